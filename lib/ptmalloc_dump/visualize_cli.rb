# frozen_string_literal: true

require "json"
require "optparse"

module PtmallocDump
  # `ptmalloc-visualize`: option parsing and dispatch. The work is done by the library.
  class VisualizeCLI
    USAGE = "Usage: ptmalloc-visualize [options] DUMP OUTDIR\n" \
            "       ptmalloc-visualize --summary|--json DUMP...\n" \
            "       ptmalloc-visualize --explain ADDR [--json] DUMP\n" \
            "       ptmalloc-visualize --retainers [--json] DUMP\n" \
            "       ptmalloc-visualize --sites [--json] DUMP\n" \
            "       ptmalloc-visualize --diff OLD NEW [OUTDIR]\n" \
            "       ptmalloc-visualize --compare DUMP... OUTDIR\n" \
            "       ptmalloc-visualize --timeline FILE... OUTDIR"

    def initialize(argv, out: $stdout, err: $stderr)
      @argv = argv.dup
      @out = out
      @err = err
      @options = { mode: :render, force: false }
    end

    # @return [Integer] the exit status
    def run
      parser.parse!(@argv)
      @options[:mode] = :json if @options[:json] && @options[:mode] == :render
      case @options[:mode]
      when :summary then summaries
      when :json then json_summaries
      when :explain then explain
      when :retainers then retainers
      when :sites then sites
      when :diff then diff
      when :compare then compare
      when :timeline then timeline
      else render
      end
    rescue OptionParser::ParseError, UsageError => e
      @err.puts "ptmalloc-visualize: #{e.message}"
      @err.puts USAGE
      2
    rescue SystemCallError, IOError, Error => e
      @err.puts "ptmalloc-visualize: #{e.message}"
      1
    end

    class UsageError < StandardError; end

    private

    def parser
      OptionParser.new do |o|
        o.banner = USAGE
        o.separator ""
        o.on("--summary", "Print the text summary of each DUMP and exit") { @options[:mode] = :summary }
        o.on("--json", "Print the summary of each DUMP as JSON (an Array for several) and exit;",
             "with --explain, --retainers or --sites: theirs") do
          @options[:json] = true
        end
        o.on("--explain ADDR", "Say what ADDR (hex or decimal) is in DUMP: heap, chunk, state, owner, page") do |a|
          @options[:mode] = :explain
          @options[:address] = parse_address(a)
        end
        o.on("--retainers", "Print who keeps DUMP's Ruby memory alive (a dump with its object graph)") do
          @options[:mode] = :retainers
        end
        o.on("--sites", "Print where DUMP's traced objects were allocated (PtmallocDump.trace_allocations)") do
          @options[:mode] = :sites
        end
        o.on("--diff", "Compare two dumps of one process: what grew and what to do; with OUTDIR, also the page") do
          @options[:mode] = :diff
        end
        o.on("--compare", "Compare dumps of several workers: DUMP... OUTDIR") { @options[:mode] = :compare }
        o.on("--timeline", "Chart readings over time (PtmallocDump.sample's files, and dumps): FILE... OUTDIR") do
          @options[:mode] = :timeline
        end
        o.on("-f", "--force", "Write into OUTDIR even if it is not empty; --diff dumps of different processes") do
          @options[:force] = true
        end
        o.on("-v", "--version", "Print the version") do
          @out.puts "ptmalloc-visualize #{VERSION}"
          throw :done
        end
        o.on("-h", "--help", "Print this help") do
          @out.puts o
          throw :done
        end
      end
    end

    # --summary DUMP...: one block each, headed by its file when there are several
    def summaries
      raise UsageError, "--summary: expected one or more DUMPs" if @argv.empty?

      @argv.each_with_index do |path, i|
        @out.puts if i.positive?
        @out.puts "#{path}:" if @argv.size > 1
        @out.print TextSummary.new(PtmallocDump.load(path))
      end
      0
    end

    # --json DUMP...: one object, or an Array of them in the order given when there are several
    def json_summaries
      raise UsageError, "--json: expected one or more DUMPs" if @argv.empty?

      require "json"
      list = @argv.map { |path| JsonSummary.new(PtmallocDump.load(path)).to_h }
      @out.puts JSON.pretty_generate(@argv.size == 1 ? list.first : list)
      0
    end

    def with_dump(args)
      raise UsageError, "expected #{args} argument(s), got #{@argv.size}" unless @argv.size == args

      require "json" if @options[:json]
      yield PtmallocDump.load(@argv[0])
      0
    end

    def parse_address(text)
      Integer(text.start_with?("0x", "0X") ? text : text.sub(/\A(?=[0-9a-f]*[a-f])/i, "0x"))
    rescue ArgumentError
      raise UsageError, "--explain: #{text} is not an address (hex like 0x7f12... or decimal)"
    end

    def explain
      require_relative "output/explanation"
      with_dump(1) do |d|
        e = Explanation.new(d, @options[:address])
        @out.print(@options[:json] ? "#{JSON.pretty_generate(e.to_h)}\n" : e.to_s)
      end
    end

    def retainers
      with_dump(1) do |d|
        list = d.retainers
        next @out.puts(JSON.pretty_generate(list)) if @options[:json]

        @out.puts "who keeps Ruby's memory alive (malloc bytes each holder alone retains, with its objects):"
        list.each { |r| @out.puts RetainerLines.line(r), "    #{r[:path].join(' > ')}" }
      end
    end

    def sites
      with_dump(1) do |d|
        list = d.allocation_sites
        next @out.puts(JSON.pretty_generate(list)) if @options[:json]

        @out.puts SiteLines.heading(d)
        list.each { |s| @out.puts SiteLines.line(s), *SiteLines.callers(s).map { |f| "    from #{f}" } }
      end
    end

    def render
      raise UsageError, "expected DUMP and OUTDIR, got #{@argv.size} argument(s)" unless @argv.size == 2

      dump_path, outdir = @argv
      dump = PtmallocDump.load(dump_path)
      prepare_outdir(outdir)
      Report.new(dump, outdir, progress: @err.tty? ? @err : nil).write
      @out.puts "wrote #{File.join(outdir, 'index.html')}"
      0
    end

    def diff
      unless [2, 3].include?(@argv.size)
        raise UsageError, "--diff expects OLD NEW [OUTDIR], got #{@argv.size} argument(s)"
      end

      old, new, outdir = @argv
      d = Diff.new(old, new, force: @options[:force])
      if outdir
        prepare_outdir(outdir)
        ComparisonReport.new(outdir).write_diff(d)
      end
      findings = GrowthFindings.new(d)
      @out.puts findings.lead
      findings.all.each do |f|
        @out.puts "- #{f.title.sub(/\A./, &:upcase)}: #{f.text}"
        f.steps.each { |s| @out.puts "  next: #{s}" }
      end
      @out.puts "wrote #{File.join(outdir, 'index.html')}" if outdir
      0
    end

    def compare
      raise UsageError, "--compare expects DUMP... OUTDIR with at least two dumps" if @argv.size < 3

      outdir = @argv.pop
      fleet = Fleet.new(@argv)
      prepare_outdir(outdir)
      ComparisonReport.new(outdir).write_fleet(fleet)
      print_fleet(fleet)
      @out.puts "wrote #{File.join(outdir, 'index.html')}"
      0
    end

    # --compare's lines: the worker that deviates most and why, then each worker's owners.
    def print_fleet(fleet)
      d = fleet.most_deviant
      hb = FormatHelpers.method(:human_bytes)
      @out.puts "deviates most: pid #{d[:pid]} (#{ComparisonReport.label(d[:figure])} #{hb.call(d[:value])}, " \
                "median #{hb.call(d[:median])})"
      reasons = ComparisonReport.deviation_reasons(fleet)
      unless reasons.empty?
        above = reasons.map { |what, b| "#{what} #{FormatHelpers.signed_bytes(b)}" }
        @out.puts "  above the median worker: #{above.join(', ')}"
      end
      fleet.dumps.each do |dump|
        o = ComparisonReport.owners_of(dump)
        top = (o[:classes].empty? ? o[:types] : o[:classes]).map { |n, b| "#{n} #{hb.call(b)}" }.join(", ")
        @out.puts "  pid #{dump.header[:pid]}: #{top.empty? ? 'no Ruby data' : top}" \
                  "#{o[:native] ? ", native #{hb.call(o[:native])}" : ''}" \
                  "#{o[:leaked] ? ", leaked #{hb.call(o[:leaked])}" : ''}"
      end
    end

    def timeline
      raise UsageError, "--timeline expects FILE... OUTDIR" if @argv.size < 2

      outdir = @argv.pop
      t = Timeline.new(@argv)
      prepare_outdir(outdir)
      TimelineReport.new(t, outdir).write
      t.verdicts.each { |v| @out.puts v }
      @out.puts "wrote #{File.join(outdir, 'index.html')}"
      0
    end

    def prepare_outdir(dir)
      if File.exist?(dir)
        raise UsageError, "#{dir} is not a directory" unless File.directory?(dir)
        unless @options[:force] || Dir.empty?(dir)
          raise UsageError, "#{dir} is not empty (use --force to write into it anyway)"
        end
      else
        parent = File.dirname(File.expand_path(dir))
        unless File.directory?(parent)
          raise OutputDirectoryError, "cannot make #{dir}: its parent directory #{parent} does not exist"
        end

        Dir.mkdir(dir)
      end
    end
  end
end
