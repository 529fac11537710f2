# frozen_string_literal: true

# the handler runs in trap context, where nothing may be autoloaded: what it uses is loaded here
require_relative "format_helpers"

module PtmallocDump
  # The worker recipe: dump on a signal.
  module SignalHandler
    @installed = {}
    @lock = Mutex.new

    # {PtmallocDump.dump}'s options that the handler sets itself.
    OWN_OPTIONS = %i[fork wait].freeze

    class << self
      # @see PtmallocDump.install_signal_handler
      def install(signal, dir:, fork:, log:, dump_options:)
        signo = Signal.list.fetch(signal.to_s.delete_prefix("SIG")) { raise ArgumentError, "unknown signal #{signal}" }
        name = Signal.signame(signo)
        check_options(dump_options)
        dir = check_dir(dir)
        @lock.synchronize do
          if (mine = @installed[name])
            # put ours back in place (a no-op when it still is); if someone replaced it meanwhile,
            # their handler becomes the one we chain to
            other = Signal.trap(name, &mine[:handler])
            mine[:previous] = other unless other.equal?(mine[:handler])
            PtmallocDump._stamp_signal(signo)
            return mine[:handler]
          end

          state = { previous: nil }
          state[:handler] = proc { |n| run(n, state, dir, fork, log, dump_options) }
          native = PtmallocDump._signal_native_handler(signo)
          state[:previous] = Signal.trap(name, &state[:handler])
          warn_taken(log, name, state[:previous], native)
          PtmallocDump._stamp_signal(signo) # Signal.trap put Ruby's own sigaction handler in front
          @installed[name] = state
          state[:handler]
        end
      end

      private

      # One line when the signal was already someone's: a Ruby handler (a Proc or Method) runs after
      # each dump, as the chain requires; a native one (a sigaction handler that is not Ruby's) is
      # replaced by Signal.trap and no longer runs. Either way another signal suits this process better.
      def warn_taken(log, name, previous, native)
        what =
          if previous.respond_to?(:call)
            "a Ruby handler (#{describe(previous)}) that runs after each dump, so every dump also triggers it"
          elsif previous.nil? && native
            "a native handler (#{native}), which Signal.trap replaces: it no longer runs"
          end
        return unless what

        say(log, "ptmalloc_dump: SIG#{name} already had #{what}; choose a signal nothing else in " \
                 "this process uses (README: Which signal)")
      end

      def describe(handler)
        kind = handler.is_a?(Method) ? "method #{handler.owner}##{handler.name}" : "a #{handler.class}"
        file, line = handler.source_location
        file ? "#{kind} at #{file}:#{line}" : kind
      end

      def check_options(options)
        known = PtmallocDump.method(:dump).parameters.filter_map { |kind, key| key if %i[key keyreq].include?(kind) }
        unknown = options.keys - known
        if unknown.any?
          raise ArgumentError,
                "unknown dump option(s) #{unknown.join(', ')}; known: #{(known - OWN_OPTIONS).join(', ')}"
        end

        own = options.keys & OWN_OPTIONS
        return if own.empty?

        raise ArgumentError, "#{own.join(', ')}: set by the handler itself (fork: is the handler's own option)"
      end

      def check_dir(dir)
        path = File.expand_path(dir.to_s)
        make_dir(path) unless File.exist?(path) || File.symlink?(path)
        problem =
          if File.symlink?(path)
            "is a symbolic link to #{File.readlink(path)}; give the directory itself"
          elsif !File.exist?(path)
            "does not exist"
          elsif !File.directory?(path)
            "is not a directory"
          elsif !File.writable?(path) || !File.executable?(path)
            "is not writable by this process (uid #{Process.euid})"
          end
        raise DumpDirectoryError, "ptmalloc_dump: the dump directory #{path} #{problem}" if problem

        path
      end

      # A missing directory is made, readable by this user only (its parents too); several workers
      # booting at once may each try
      def make_dir(path)
        require "fileutils"
        FileUtils.mkdir_p(path, mode: 0o700)
      rescue SystemCallError => e
        raise DumpDirectoryError,
              "ptmalloc_dump: the dump directory #{path} does not exist and cannot be made: #{e.message}"
      end

      def run(signo, state, dir, fork, log, dump_options)
        arrived = PtmallocDump._signal_arrived_ns(signo) || now_ns
        if state[:running]
          # a trap run inside this one (the dump was interrupted by the next signal): one at a time
          say(log, "ptmalloc_dump: #{Signal.signame(signo)} arrived while a dump was running; no second dump for it")
        else
          state[:running] = true
          begin
            dump_on_signal(signo, arrived, state, dir, fork, log, dump_options)
          ensure
            state[:running] = false
          end
        end
        prev = state[:previous]
        prev.call(signo) if prev.respond_to?(:call)
      end

      def dump_on_signal(signo, arrived, state, dir, fork, log, dump_options)
        path = File.join(dir, format("ptmalloc-%d-%s.dump", Process.pid, Time.now.strftime("%Y%m%d-%H%M%S-%6N")))
        if fork
          # the previous snapshot process may still be writing: this request gets its own all the same
          busy = state[:snapshot]&.alive? && state[:snapshot_pid]
          if busy
            say(log, "ptmalloc_dump: #{Signal.signame(signo)} arrived while snapshot process #{busy} was still " \
                     "writing; starting another")
          end
          begin
            pid = PtmallocDump.dump(path, fork: true, **dump_options)
          rescue HeapDamagedError => e
            say(log, "ptmalloc_dump: no snapshot (#{e.message}); dumping in process")
            return dump_in_process(path, arrived, log, dump_options)
          end
          returned = now_ns
          state[:snapshot_pid] = pid
          state[:snapshot] = watch(pid, path, returned, log)
          say(log, "ptmalloc_dump: snapshot process #{pid} is writing #{path}; the worker paused " \
                   "#{ms(returned - arrived)} (signal to return)")
        else
          dump_in_process(path, arrived, log, dump_options)
        end
      rescue StandardError => e
        say(log, "ptmalloc_dump: dump to #{path} failed: #{e.class}: #{e.message}")
      end

      def dump_in_process(path, arrived, log, dump_options)
        s = PtmallocDump.dump(path, **dump_options)
        say(log, "ptmalloc_dump: wrote #{path}: #{line(s)}; the worker paused #{ms(now_ns - arrived)} " \
                 "(signal to return)")
      end

      # Reaps the snapshot process and logs when it is done: its walk and write happen there, after
      # the worker went on.
      def watch(pid, path, started, log)
        Thread.new do
          _, status = Process.wait2(pid)
          if status.success?
            say(log, "ptmalloc_dump: snapshot process #{pid} wrote #{path} in #{ms(now_ns - started)} (walk and write)")
          end
        end
      end

      def now_ns
        Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      end

      def ms(ns)
        format("%.1f ms", ns / 1e6)
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
end
