# frozen_string_literal: true

require "json"

module PtmallocDump
  # Readings over time (the JSON lines {PtmallocDump.sample} writes), one series per process, the
  # dumps taken in that period, and the trend of each figure: whether in-use memory climbs (a leak)
  # or free memory the heap keeps does (fragmentation).
  class Timeline
    # The figures charted, from a reading (bytes).
    FIGURES = {
      vm_rss: ->(r) { r.dig(:rss, :vm_rss) },
      anonymous: ->(r) { r.dig(:rss, :anonymous) },
      file_backed: ->(r) { r.dig(:rss, :file_backed) },
      heap: ->(r) { r.dig(:malloc, :arena).to_i + r.dig(:malloc, :hblkhd).to_i },
      in_use: ->(r) { r.dig(:malloc, :uordblks).to_i + r.dig(:malloc, :hblkhd).to_i },
      free: ->(r) { r.dig(:malloc, :fordblks) },
      ruby_pages: ->(r) { r.dig(:gc, :ruby_pages_bytes) }
    }.freeze
    LABELS = { vm_rss: "RSS", anonymous: "anonymous RSS", file_backed: "file-backed RSS", heap: "heap",
               in_use: "in use", free: "free but resident", ruby_pages: "Ruby pages" }.freeze

    # The least-squares line through one figure of one process. `slope` in bytes per second, `change`
    # over the period the readings span, `r2` how well the line fits (1 = a straight line).
    Trend = Struct.new(:pid, :figure, :slope, :change, :r2, :mean, :climbs) do
      # @return [String] e.g. "in use climbs: +2.0 MiB/min (r² 0.99)"
      def to_s
        per_min = FormatHelpers.human_bytes((slope * 60).abs.round)
        sign = slope.negative? ? "-" : "+"
        what = climbs ? "climbs" : "does not climb"
        "#{LABELS[figure]} #{what}: #{sign}#{per_min}/min (r² #{format('%.2f', r2)})"
      end
    end

    # One dump in the period: `report` is the path of its HTML report when one was found next to it
    # (`ptmalloc-visualize X.dump X` writes X/index.html).
    Marker = Struct.new(:path, :pid, :time, :report)

    # A climb counts when it adds at least this over the period, and 2% of the figure's mean.
    MIN_CHANGE = 1024 * 1024
    MIN_R2 = 0.5

    # @return [Hash{Integer=>Array<Hash>}] readings by pid, oldest first
    attr_reader :series
    # @return [Array<Marker>]
    attr_reader :markers

    # @param paths [Array<String>] JSON Lines files from {Sampler} and dump files (`*.dump`)
    # @raise [FormatError] when a line of a readings file is not a reading
    def initialize(paths)
      @series = Hash.new { |h, k| h[k] = [] }
      @markers = []
      paths.each { |p| p.end_with?(".dump") ? add_dump(p) : add_readings(p) }
      raise Error, "no readings in #{paths.join(', ')}" if @series.empty?

      @series.each_value { |rs| rs.sort_by! { |r| r[:time] } }
      @markers.sort_by!(&:time)
    end

    # @return [Array<Float>] first and last reading's time (Unix seconds)
    def span
      times = @series.values.flatten.map { |r| r[:time] }
      times.minmax
    end

    # @param pid [Integer]
    # @param figure [Symbol] a key of FIGURES
    # @return [Array<Array(Float, Integer)>] [time, bytes] pairs
    def points(pid, figure)
      @series[pid].filter_map do |r|
        v = FIGURES.fetch(figure).call(r)
        [r[:time], v] if v
      end
    end

    # @return [Array<Trend>] in use and free but resident (and RSS) per process
    def trends
      @trends ||= @series.keys.sort.flat_map { |pid| %i[in_use free vm_rss].filter_map { |f| trend(pid, f) } }
    end

    # @return [Array<String>] one verdict per process
    def verdicts
      @series.keys.sort.map do |pid|
        t = trends.select { |x| x.pid == pid }.to_h { |x| [x.figure, x] }
        in_use = t[:in_use]
        free = t[:free]
        verdict =
          if in_use&.climbs then "in use climbs: a leak, or a cache still filling (#{in_use})"
          elsif free&.climbs then "free but resident climbs while in use does not: fragmentation (#{free})"
          else "in use does not climb, nor does free but resident: steady"
          end
        "pid #{pid}: #{verdict}"
      end
    end

    private

    def add_readings(path)
      File.foreach(path).with_index(1) do |line, n|
        next if line.strip.empty?

        r = JSON.parse(line, symbolize_names: true)
        unless r.is_a?(Hash) && r[:time] && r[:pid]
          raise FormatError, "#{path}:#{n}: not a reading of PtmallocDump.stats"
        end

        @series[r[:pid]] << r
      rescue JSON::ParserError => e
        raise FormatError, "#{path}:#{n}: not JSON (#{e.message.lines.first.strip})"
      end
    end

    def add_dump(path)
      header = PtmallocDump.load(path).header
      dir = path.delete_suffix(".dump")
      report = File.file?(File.join(dir, "index.html")) ? File.join(dir, "index.html") : nil
      @markers << Marker.new(path, header[:pid], header[:time].to_f, report)
    end

    def trend(pid, figure)
      pts = points(pid, figure)
      return nil if pts.size < 3

      t0 = pts.first[0]
      xs = pts.map { |t, _| t - t0 }
      ys = pts.map { |_, v| v.to_f }
      n = pts.size.to_f
      mx = xs.sum / n
      my = ys.sum / n
      sxx = xs.sum { |x| (x - mx)**2 }
      return nil if sxx.zero?

      sxy = xs.zip(ys).sum { |x, y| (x - mx) * (y - my) }
      syy = ys.sum { |y| (y - my)**2 }
      slope = sxy / sxx
      r2 = syy.zero? ? 0.0 : (sxy * sxy) / (sxx * syy)
      change = slope * (xs.last - xs.first)
      climbs = change >= MIN_CHANGE && change >= 0.02 * my && r2 >= MIN_R2
      Trend.new(pid, figure, slope, change, r2, my, climbs)
    end
  end
end
