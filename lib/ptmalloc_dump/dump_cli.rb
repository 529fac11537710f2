# frozen_string_literal: true

require "json"
require "optparse"

module PtmallocDump
  # `ptmalloc-dump`: dumps the heap of another process or of a core file, or starts a command with the
  # allocation tracker. Option parsing and dispatch only; the work is {PtmallocDump.dump_process},
  # {PtmallocDump.dump_core} and {Tracker}.
  class DumpCLI
    USAGE = "Usage: ptmalloc-dump [options] --pid PID OUT.dump\n" \
            "       ptmalloc-dump [options] CORE OUT.dump\n" \
            "       ptmalloc-dump --track [--track-bytes N] -- COMMAND [ARGS...]\n" \
            "       ptmalloc-dump --preload-path"

    # @param exec [#call] replaces this process with a command (+Kernel#exec+'s arguments)
    def initialize(argv, out: $stdout, err: $stderr, env: ENV, exec: ->(*args) { Kernel.exec(*args) })
      @argv = argv.dup
      @out = out
      @err = err
      @env = env
      @exec = exec
      @options = { symbols: :auto }
    end

    # @return [Integer] the exit status (for --track, only when the command could not be started)
    def run
      parser.parse!(@argv)
      return 0 if @options[:done]
      return preload_path if @options[:preload_path]
      return track if @options[:track]

      wanted = @options[:pid] ? 1 : 2
      raise OptionParser::MissingArgument, @options[:pid] ? "OUT.dump" : "--pid or CORE" if @argv.size < wanted
      raise OptionParser::NeedlessArgument, @argv.drop(wanted).join(" ") if @argv.size > wanted

      report(dump)
      0
    rescue OptionParser::ParseError => e
      @err.puts "ptmalloc-dump: #{e.message}"
      @err.puts USAGE
      2
    rescue SystemCallError, IOError, Error => e
      @err.puts "ptmalloc-dump: #{e.message}"
      1
    end

    private

    def preload_path
      raise OptionParser::NeedlessArgument, @argv.join(" ") unless @argv.empty?

      @out.puts Tracker.path
      0
    end

    def track
      raise OptionParser::MissingArgument, "COMMAND (after --)" if @argv.empty?

      env = @env.to_h
      problem = Tracker.problem(@argv, env)
      raise TrackError, "cannot track #{@argv.first}: #{problem}" if problem

      @exec.call(Tracker.environment(env, bytes: @options[:track_bytes]), *@argv)
      0
    end

    def dump
      opts = { debug_dir: @options[:debug_dir], symbols: @options[:symbols] }
      return PtmallocDump.dump_process(@options[:pid], @argv.first, **opts) if @options[:pid]

      PtmallocDump.dump_core(@argv[0], @argv[1], **opts)
    end

    def parser
      OptionParser.new do |o|
        o.banner = USAGE
        o.separator ""
        o.on("--pid PID", Integer, "The process to dump (glibc malloc; the same user's, or any as root)") do |pid|
          @options[:pid] = pid
        end
        o.on("--track", "Run COMMAND (after --) with the allocation tracker: its dumps say where",
             "malloc's blocks were allocated (its children and forks are tracked too)") { @options[:track] = true }
        o.on("--track-bytes N", Integer, "The tracker's mean sampling gap in bytes (default 524288)") do |n|
          raise OptionParser::InvalidArgument, "--track-bytes #{n}: must be positive" unless n.positive?

          @options[:track_bytes] = n
        end
        o.on("--preload-path", "Print the tracker library's path, for LD_PRELOAD") { @options[:preload_path] = true }
        o.on("--json", "Print the dump's summary as JSON instead of one line") { @options[:json] = true }
        o.on("--debug-dir DIR", "Where libc's symbol file is looked for (default /usr/lib/debug)") do |dir|
          @options[:debug_dir] = dir
        end
        o.on("--symbols MODE", %i[auto file heuristic],
             "auto (default: a symbol file, else by structure), file or heuristic (by structure alone)") do |m|
          @options[:symbols] = m
        end
        o.on("-v", "--version", "Print the version") do
          @out.puts "ptmalloc-dump #{VERSION}"
          @options[:done] = true
        end
        o.on("-h", "--help", "Print this help") do
          @out.puts o
          @options[:done] = true
        end
      end
    end

    def report(summary)
      if @options[:json]
        require "json"
        @out.puts JSON.pretty_generate(JsonSummary.new(PtmallocDump.load(summary[:path])).to_h)
        return
      end
      mib = summary[:copied_bytes] / 1_048_576.0
      source = if @options[:pid]
                 format("process %<pid>d stopped for %<pause>.1f ms (%<mib>.1f MiB copied)",
                        pid: @options[:pid], pause: summary[:pause_ns] / 1e6, mib: mib)
               else
                 format("core file %<core>s (%<mib>.1f MiB read)", core: @argv[0], mib: mib)
               end
      @out.puts format("%<path>s: %<source>s; %<arenas>d arena(s), %<chunks>d chunks, %<used>d bytes in use, " \
                       "%<free>d free",
                       path: summary[:path], source: source, arenas: summary[:arena_count],
                       chunks: summary[:chunk_count], used: summary[:uordblks], free: summary[:fordblks])
    end
  end
end
