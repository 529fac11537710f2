# frozen_string_literal: true

require "optparse"

module PtmallocDump
  # `ptmalloc-dump`: dumps the heap of another process or of a core file. Option parsing and dispatch
  # only; the work is {PtmallocDump.dump_process} and {PtmallocDump.dump_core}.
  class DumpCLI
    USAGE = "Usage: ptmalloc-dump [options] --pid PID OUT.dump\n" \
            "       ptmalloc-dump [options] CORE OUT.dump"

    def initialize(argv, out: $stdout, err: $stderr)
      @argv = argv.dup
      @out = out
      @err = err
      @options = { symbols: :auto }
    end

    # @return [Integer] the exit status
    def run
      parser.parse!(@argv)
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
        o.on("--json", "Print the dump's summary as JSON instead of one line") { @options[:json] = true }
        o.on("--debug-dir DIR", "Where libc's symbol file is looked for (default /usr/lib/debug)") do |dir|
          @options[:debug_dir] = dir
        end
        o.on("--symbols MODE", %i[auto file heuristic],
             "auto (default: a symbol file, else by structure), file or heuristic (by structure alone)") do |m|
          @options[:symbols] = m
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
