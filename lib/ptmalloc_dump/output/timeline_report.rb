# frozen_string_literal: true

require "cgi"
require_relative "../format_helpers"

module PtmallocDump
  # The page `ptmalloc-visualize --timeline` writes: OUTDIR/index.html, self-contained (inline SVG).
  class TimelineReport
    include FormatHelpers

    CHARTS = [["Resident memory and its parts", %i[vm_rss anonymous file_backed ruby_pages]],
              ["malloc's heap: in use and free", %i[heap in_use free]]].freeze
    COLORS = { vm_rss: "#1f4e79", anonymous: "#2e86c1", file_backed: "#7fb3d5", ruby_pages: "#a04000",
               heap: "#555555", in_use: "#c0392b", free: "#27ae60" }.freeze
    DASHES = ["", "6 3", "2 3", "8 3 2 3", "1 2"].freeze
    W = 900
    H = 320
    PAD = { left: 80, right: 20, top: 20, bottom: 40 }.freeze

    # @param timeline [Timeline]
    # @param outdir [String]
    def initialize(timeline, outdir)
      @t = timeline
      @outdir = outdir
      @t0, @t1 = timeline.span
      @t1 = @t0 + 1 if @t1 <= @t0
      @pids = timeline.series.keys.sort
    end

    # @return [String] the path of index.html
    def write
      path = File.join(@outdir, "index.html")
      File.write(path, page)
      path
    end

    private

    def page
      <<~HTML
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>ptmalloc_dump timeline</title>
        <style>
        body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
        table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
        td:first-child,th:first-child{text-align:left}.verdict{font-size:16px}
        svg text{font:11px system-ui,sans-serif}
        </style></head><body>
        <h1>Memory over time: #{@pids.size} process(es), #{h(duration)}</h1>
        <ul class="verdict">#{@t.verdicts.map { |v| "<li>#{h(v)}</li>" }.join}</ul>
        #{CHARTS.map { |title, figures| chart(title, figures) }.join("\n")}
        <h2>Trends (least-squares lines, dashed grey on the charts)</h2>
        <table><tr>#{TREND_HEADS}</tr>
        #{@t.trends.map { |x| trend_row(x) }.join("\n")}
        </table>
        <p>#{trend_note}</p>
        #{dump_list}
        </body></html>
      HTML
    end

    TREND_HEADS = "<th>pid</th><th>figure</th><th>slope</th><th>rise over the period</th><th>last third</th>" \
                  "<th>noise</th><th>r²</th><th>trend</th>"
    SHAPES = { climbs: "climbs", warm_up: "warm-up, then flat", steady: "steady" }.freeze

    # What the trends count and what the figures are (the paragraph's line breaks are the page's own).
    def trend_note
      "A rise counts when the figure's last readings stand at least #{human_bytes(Timeline::MIN_CHANGE)}, " \
        "#{(Timeline::MIN_SHARE * 100).round}% of its mean\nand #{Timeline::NOISE_RISES.round} times its noise " \
        "above its first (medians of the first and last fifth of the readings),\nhowever well a straight line " \
        "fits; it climbs while the last third still rises at least #{(Timeline::TAIL_SHARE * 100).round}% as " \
        "fast as the\nperiod did, and is a warm-up otherwise. In use: mallinfo2's uordblks plus hblkhd " \
        "(mmapped chunks); free but\nresident: fordblks, free chunks malloc keeps (resident unless malloc_trim " \
        "released their pages); heap: the arenas'\nsystem memory plus mmapped chunks. In use that climbs is a leak " \
        "or a cache still filling; free that climbs while in\nuse does not is fragmentation."
    end

    def duration
      s = (@t1 - @t0).round
      s >= 120 ? "#{(s / 60.0).round(1)} min" : "#{s} s"
    end

    def trend_row(x)
      "<tr><td>#{x.pid}</td><td>#{h(Timeline::LABELS[x.figure])}</td>" \
        "<td>#{h(signed(x.slope * 60))}/min</td><td>#{h(signed(x.net))}</td><td>#{h(signed(x.tail))}</td>" \
        "<td>#{h(human_bytes(x.noise.round))}</td><td>#{format('%.2f', x.r2)}</td>" \
        "<td>#{SHAPES.fetch(x.shape)}</td></tr>"
    end

    def signed(n)
      n = n.round
      n.negative? ? "-#{human_bytes(-n)}" : "+#{human_bytes(n)}"
    end

    def dump_list
      return "" if @t.markers.empty?

      items = @t.markers.map do |m|
        name = h(File.basename(m.path))
        link = m.report ? %(<a href="#{h(rel(m.report))}">#{name}</a>) : name
        at = Time.at(m.time).utc.strftime("%H:%M:%S")
        "<li>#{at} UTC, pid #{m.pid}: #{link}</li>"
      end
      "<h2>Dumps in this period</h2><ul>#{items.join}</ul>"
    end

    def rel(path)
      File.expand_path(path).then { |p| p.start_with?("/") ? "file://#{p}" : p }
    end

    def chart(title, figures)
      lines = []
      max = 1
      @pids.each do |pid|
        figures.each { |f| @t.points(pid, f).each { |(_, v)| max = v if v > max } }
      end
      x = ->(t) { PAD[:left] + (t - @t0) / (@t1 - @t0) * (W - PAD[:left] - PAD[:right]) }
      y = ->(v) { H - PAD[:bottom] - v.to_f / max * (H - PAD[:top] - PAD[:bottom]) }
      @pids.each_with_index do |pid, i|
        figures.each do |f|
          pts = @t.points(pid, f)
          next if pts.empty?

          d = pts.map { |t, v| format("%.1f,%.1f", x.call(t), y.call(v)) }.join(" ")
          dash = DASHES[i % DASHES.size]
          lines << %(<polyline fill="none" stroke="#{COLORS[f]}" stroke-width="1.5" stroke-dasharray="#{dash}" ) +
                   %(points="#{d}"><title>pid #{pid} #{h(Timeline::LABELS[f])}</title></polyline>)
          tr = @t.trends.find { |z| z.pid == pid && z.figure == f }
          lines << trend_line(tr, pts, x, y) if tr
        end
      end
      svg = %(<svg xmlns="http://www.w3.org/2000/svg" width="#{W}" height="#{H}" viewBox="0 0 #{W} #{H}" ) +
            %(role="img" aria-label="#{h(title)}">)
      <<~SVG
        <h2>#{h(title)}</h2>
        #{svg}
        #{axes(max, x, y)}
        #{markers(x)}
        #{lines.join("\n")}
        </svg>
        <p>#{legend(figures)}</p>
      SVG
    end

    def trend_line(tr, pts, x, y)
      t_a = pts.first[0]
      t_b = pts.last[0]
      v_a = tr.mean - tr.slope * ((t_b - t_a) / 2.0)
      v_b = tr.mean + tr.slope * ((t_b - t_a) / 2.0)
      ends = %(x1="#{format('%.1f', x.call(t_a))}" y1="#{format('%.1f', y.call(v_a))}" ) +
             %(x2="#{format('%.1f', x.call(t_b))}" y2="#{format('%.1f', y.call(v_b))}")
      %(<line #{ends} stroke="#888" stroke-width="1" stroke-dasharray="4 4"><title>#{h(tr)}</title></line>)
    end

    def axes(max, x, y)
      base = H - PAD[:bottom]
      out = [%(<line x1="#{PAD[:left]}" y1="#{base}" x2="#{W - PAD[:right]}" y2="#{base}" stroke="#000"/>),
             %(<line x1="#{PAD[:left]}" y1="#{PAD[:top]}" x2="#{PAD[:left]}" y2="#{base}" stroke="#000"/>)]
      5.times do |i|
        v = max * i / 4.0
        bytes = h(human_bytes(v.round))
        out << %(<text x="#{PAD[:left] - 6}" y="#{format('%.1f', y.call(v) + 4)}" text-anchor="end">#{bytes}</text>)
        t = @t0 + (@t1 - @t0) * i / 4.0
        at = Time.at(t).utc.strftime("%H:%M:%S")
        out << %(<text x="#{format('%.1f', x.call(t))}" y="#{base + 16}" text-anchor="middle">#{at}</text>)
      end
      out.join("\n")
    end

    def markers(x)
      @t.markers.select { |m| m.time.between?(@t0, @t1) }.map do |m|
        px = format("%.1f", x.call(m.time))
        bottom = H - PAD[:bottom]
        mark = %(<line x1="#{px}" y1="#{PAD[:top]}" x2="#{px}" y2="#{bottom}" stroke="#8e44ad" stroke-width="2">) +
               %(<title>dump #{h(File.basename(m.path))} (pid #{m.pid})</title></line>)
        m.report ? %(<a href="#{h(rel(m.report))}">#{mark}</a>) : mark
      end.join("\n")
    end

    def legend(figures)
      f = figures.map { |k| %(<span style="color:#{COLORS[k]}">&#9644; #{h(Timeline::LABELS[k])}</span>) }
      p = @pids.each_with_index.map do |pid, i|
        dash = DASHES[i % DASHES.size]
        "pid #{pid}: #{dash.empty? ? 'solid' : "dashes #{dash}"}"
      end
      (f + p + ["purple: a dump"]).join(" &nbsp; ")
    end
  end
end
