# frozen_string_literal: true

require "tmpdir"

module PtmallocDump
  # The worker recipe: dump on a signal.
  module SignalHandler
    @installed = {}
    @lock = Mutex.new

    class << self
      # @see PtmallocDump.install_signal_handler
      def install(signal, dir:, fork:, log:, dump_options:)
        name = Signal.signame(Signal.list.fetch(signal.to_s.delete_prefix("SIG")) { raise ArgumentError, "unknown signal #{signal}" })
        @lock.synchronize do
          if (mine = @installed[name])
            # put ours back in place (a no-op when it still is); if someone replaced it meanwhile,
            # their handler becomes the one we chain to
            other = Signal.trap(name, &mine[:handler])
            mine[:previous] = other unless other.equal?(mine[:handler])
            return mine[:handler]
          end

          state = { previous: nil }
          state[:handler] = proc { |signo| run(signo, state, dir, fork, log, dump_options) }
          state[:previous] = Signal.trap(name, &state[:handler])
          @installed[name] = state
          state[:handler]
        end
      end

      private

      def run(signo, state, dir, fork, log, dump_options)
        if state[:running]
          # a trap run inside this one (the dump was interrupted by the next signal): one at a time
          say(log, "ptmalloc_dump: #{Signal.signame(signo)} arrived while a dump was running; no second dump for it")
        else
          state[:running] = true
          begin
            dump_on_signal(signo, state, dir, fork, log, dump_options)
          ensure
            state[:running] = false
          end
        end
        prev = state[:previous]
        prev.call(signo) if prev.respond_to?(:call)
      end

      def dump_on_signal(signo, state, dir, fork, log, dump_options)
        path = File.join(dir, format("ptmalloc-%d-%s.dump", Process.pid, Time.now.strftime("%Y%m%d-%H%M%S-%6N")))
        if fork
          # the previous snapshot process may still be writing: this request gets its own all the same
          busy = state[:snapshot]&.alive? && state[:snapshot].pid
          say(log, "ptmalloc_dump: #{Signal.signame(signo)} arrived while snapshot process #{busy} was still writing; starting another") if busy
          begin
            pid = PtmallocDump.dump(path, fork: true, **dump_options)
          rescue HeapDamagedError => e
            say(log, "ptmalloc_dump: no snapshot (#{e.message}); dumping in process")
            return dump_in_process(path, log, dump_options)
          end
          state[:snapshot] = Process.detach(pid)
          say(log, "ptmalloc_dump: snapshot process #{pid} is writing #{path}")
        else
          dump_in_process(path, log, dump_options)
        end
      rescue StandardError => e
        say(log, "ptmalloc_dump: dump to #{path} failed: #{e.class}: #{e.message}")
      end

      def dump_in_process(path, log, dump_options)
        s = PtmallocDump.dump(path, **dump_options)
        say(log, "ptmalloc_dump: wrote #{path}: #{line(s)}")
      end

      # One line to the log from inside a trap handler. IO#puts takes the IO's write lock, which the
      # interrupted thread may hold (Ruby 3.3 runs traps inside IO#write) and which would then raise
      # ThreadError in the worker; IO#syswrite takes no such lock. A log that cannot be written to
      # loses the line, not the worker.
      def say(log, text)
        return unless log

        log.respond_to?(:syswrite) ? log.syswrite("#{text}\n") : log.puts(text)
      rescue ThreadError, IOError, SystemCallError
        nil
      end

      def line(s)
        h = FormatHelpers
        "heap #{h.human_bytes(s[:arena])} in #{s[:arena_count]} arena(s), in use #{h.human_bytes(s[:in_use_bytes])}, " \
          "free resident #{h.human_bytes(s[:free_resident_bytes])}, mmapped #{h.human_bytes(s[:hblkhd])}, " \
          "walk #{format('%.1f', s[:walk_ns] / 1e6)} ms"
      end
    end
  end

  class << self
    # Installs a Signal.trap handler that dumps this process into `dir` as
    # `ptmalloc-<pid>-<timestamp>.dump` and logs one line (the path and the main figures) to `log`.
    # The handler that was installed for the signal before is called afterwards (when it is a Proc or
    # Method; "DEFAULT", "IGNORE" and friends are not called). Installing again for the same signal
    # returns the handler already in place.
    #
    # @param signal [String, Symbol, Integer] e.g. "USR2"
    # @param dir [String] where dumps go
    # @param fork [Boolean] use the fork snapshot mode (the worker pauses only for the fork)
    # @param log [IO, nil] where the one-line report goes
    # @param dump_options further options for {dump} (ruby:, references:, debug_dir:)
    # @return [Proc] the handler
    def install_signal_handler(signal = "USR2", dir: Dir.tmpdir, fork: false, log: $stderr, **dump_options)
      SignalHandler.install(signal, dir: dir, fork: fork, log: log, dump_options: dump_options)
    end
  end
end
