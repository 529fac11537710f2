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

    # One figure of one process over the period. `slope` (bytes per second) and `r2` are the
    # least-squares line's; `change` is what that line adds over the period. `net` is what the
    # figure really rose by: the median of the period's last readings minus that of its first (a
    # tenth of them, at most 3 each), so one outlying reading moves it little; `tail` the same over
    # the last third alone; `noise` the readings' scatter from one to the next (a robust standard
    # deviation). `shape` is the verdict on the figure: :climbs (a net rise large against the
    # figure's level and its noise, not clearly flatter over the last third), :warm_up (such a rise
    # that flattened over the last third: it rose at less than half the period's rate) or :steady.
    # A low r² does not make a large rise steady: a figure that jumps up and down while it climbs
    # fits a line badly and climbs all the same. `climbs` is shape == :climbs.
    Trend = Struct.new(:pid, :figure, :slope, :change, :r2, :mean, :climbs, :net, :tail, :noise, :shape,
                       :span) do
      # @return [String] e.g. "in use climbs: +120 MiB over 10.0 min, +12.0 MiB/min (r² 0.99)"
      def to_s
        h = FormatHelpers
        rise = "#{Timeline.signed_bytes(net)} over #{Timeline.duration(span)}"
        line = "#{Timeline.signed_bytes(slope * 60)}/min (r² #{format('%.2f', r2)})"
        case shape
        when :climbs then "#{LABELS[figure]} climbs: #{rise}, #{line}"
        when :warm_up
          "#{LABELS[figure]} warmed up: #{rise}, then flat over the last third " \
          "(#{Timeline.signed_bytes(tail)}, noise #{h.human_bytes(noise.round)})"
        else "#{LABELS[figure]} does not climb: #{rise}, #{line}"
        end
      end
    end

    # One dump in the period: `report` is the path of its HTML report when one was found next to it
    # (`ptmalloc-visualize X.dump X` writes X/index.html).
    Marker = Struct.new(:path, :pid, :time, :report)

    # A rise counts when it adds at least this over the period, 2% of the figure's mean and
    # NOISE_RISES times what the noise alone could add; it is a warm-up when the last third added less
    # than TAIL_SHARE of what the period's rate would have, by more than the noise explains, and
    # climbs otherwise.
    MIN_CHANGE = 1024 * 1024
    MIN_SHARE = 0.02
    NOISE_RISES = 3.0
    TAIL_SHARE = 0.5

    class << self
      # @return [String] "+1.5 MiB", "-300 KiB"
      def signed_bytes(n)
        n = n.round
        n.negative? ? "-#{FormatHelpers.human_bytes(-n)}" : "+#{FormatHelpers.human_bytes(n)}"
      end

      # @return [String] "45 s", "10.0 min"
      def duration(seconds)
        s = seconds.round
        s >= 120 ? "#{(s / 60.0).round(1)} min" : "#{s} s"
      end
    end

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

    # @return [Array<String>] one verdict per process: in use that climbs (a leak, or a cache still
    #   filling), free but resident that climbs while in use does not (fragmentation), RSS that climbs
    #   outside the malloc heap, a warm-up that flattened, or steady
    def verdicts
      @series.keys.sort.map do |pid|
        t = trends.select { |x| x.pid == pid }.to_h { |x| [x.figure, x] }
        "pid #{pid}: #{verdict(t[:in_use], t[:free], t[:vm_rss])}"
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

    def verdict(in_use, free, rss)
      warmed = [in_use, free, rss].compact.select { |x| x.shape == :warm_up }
      if in_use&.shape == :climbs then "in use climbs: a leak, or a cache still filling (#{in_use})"
      elsif free&.shape == :climbs then "free but resident climbs while in use does not: fragmentation (#{free})"
      elsif rss&.shape == :climbs then "RSS climbs while the malloc heap does not: memory outside malloc (#{rss})"
      elsif warmed.any? then "warm-up, then steady (#{warmed.join('; ')})"
      else "in use does not climb, nor does free but resident: steady"
      end
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
      span = xs.last - xs.first
      net, tail, noise, shape = rise(xs, ys, my)
      Trend.new(pid, figure, slope, slope * span, r2, my, shape == :climbs, net, tail, noise, shape, span)
    end

    # The rise from the first readings to the last, and over the last third alone
    # (medians of each stretch's first and last readings), the readings' noise, and the shape.
    def rise(xs, ys, mean)
      net, rate, k = ends(xs, ys, 10.0, 3)
      third = xs.first + (xs.last - xs.first) * 2 / 3.0
      last = xs.each_index.select { |i| xs[i] >= third }
      last = [xs.size - 2, xs.size - 1] if last.size < 2
      tail, _, j, tail_dt = ends(last.map { |i| xs[i] }, last.map { |i| ys[i] }, 3.0, 5)
      steps = ys.each_cons(2).map { |a, b| b - a }
      m = median(steps)
      # the median absolute deviation of the steps, scaled to a standard deviation, and of one
      # reading rather than of the difference of two
      noise = 1.4826 * median(steps.map { |d| (d - m).abs }) / Math.sqrt(2)
      rises = net >= MIN_CHANGE && net >= MIN_SHARE * mean.abs && net >= NOISE_RISES * spread(noise, k)
      # at the period's rate the last third would have added `expected`: it flattened when it added
      # less than TAIL_SHARE of that, by more than its own noise can explain
      expected = rate * tail_dt
      flattened = tail < TAIL_SHARE * expected && expected - tail > 2 * spread(noise, j)
      shape = if !rises then :steady
              elsif flattened then :warm_up
              else :climbs
              end
      [net, tail, noise, shape]
    end

    # The standard deviation of the difference of two medians of `k` readings each
    def spread(noise, k)
      noise * 1.2533 * Math.sqrt(2.0 / k)
    end

    # The rise from the first `parts`-th of the readings (at most `most` of them) to the last
    # (medians), its rate, how many readings each median took and the time between them
    def ends(xs, ys, parts, most)
      k = (ys.size / parts).ceil.clamp(1, most)
      dy = median(ys.last(k)) - median(ys.first(k))
      dt = median(xs.last(k)) - median(xs.first(k))
      [dy, dt.positive? ? dy / dt : 0.0, k, dt]
    end

    def median(values)
      sorted = values.sort
      mid = sorted.size / 2
      sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
    end
  end
end
