# frozen_string_literal: true

require "cgi"
require_relative "../format_helpers"

module PtmallocDump
  # The report's "Where it was allocated" section: the allocation sites of the memory still alive
  # (tracked malloc blocks, else traced Ruby objects), largest first, and a flame graph of its live
  # bytes by stack (outermost frame at the top, each bar as wide as the bytes allocated below it).
  # Without sites, why not and how to get them.
  class SitesSection
    include FormatHelpers

    WIDTH = 1100
    ROW = 18
    DEPTH = 40 # rows of the flame graph
    LIMIT = 25 # sites in the table

    # @param dump [Dump]
    def initialize(dump)
      @dump = dump
    end

    # @return [String] the section's HTML
    def html
      return absent unless @dump.allocation_sites?

      list = @dump.allocation_sites(limit: LIMIT).select { |s| s[:bytes].positive? }
      malloc = @dump.malloc_sites?
      <<~HTML
        <h2 id="sites">Where it was allocated</h2>
        <p>#{malloc ? malloc_intro : objects_intro} A site is the innermost frame of the application's own code;
        frames in gems and Ruby's library are in its stack.</p>
        <table><tr><th>bytes</th><th>#{malloc ? 'blocks' : 'objects'}</th><th class="l">site</th>
        #{malloc ? '<th class="l">kept by</th>' : ''}<th class="l">called from</th></tr>
        #{list.map { |s| row(s, malloc) }.join("\n")}</table>
        #{flame}
      HTML
    end

    private

    def objects_intro
      every = @dump.allocation_trace[:every]
      sampling = every == 1 ? "every new object traced" : "one new object in #{every} traced: the figures are estimates"
      "Where the traced Ruby objects still alive were allocated, and the malloc memory they own (#{h(sampling)}). " \
        "Sites whose objects own no malloc memory are left out here."
    end

    def malloc_intro
      mean = human_bytes(@dump.allocation_tracking[:mean_bytes])
      "Where the malloc blocks still allocated were allocated, as the allocation tracker sampled them (one block " \
        "in about #{h(mean)} allocated: the figures are estimates), and what keeps them: a Ruby object, native " \
        "code (a root outside malloc), or nothing (leaked)."
    end

    def absent
      <<~HTML
        <h2 id="sites">Where it was allocated</h2>
        <p class="warn">Not known for this dump: #{h(@dump.no_sites_reason)}. Start the process under
        <code>ptmalloc-dump --track -- COMMAND</code> (or with <code>LD_PRELOAD=$(ptmalloc-dump --preload-path)</code>):
        its dumps then say where every sampled malloc block was allocated, native or Ruby. Or call
        <code>PtmallocDump.trace_allocations</code> when the process boots (it samples one new Ruby object in 64 by
        default): dumps taken afterwards record where their traced objects were allocated.</p>
      HTML
    end

    def row(s, malloc)
      about = s[:estimated] ? "about " : ""
      kept = malloc ? "<td class=\"l\">#{h(kept_by(s))}</td>" : ""
      "<tr><td>#{h(about + human_bytes(s[:bytes]))}</td><td>#{h(count(s[:count]))}</td>" \
        "<td class=\"l\"><b>#{h(s[:site])}</b>#{s[:method].empty? ? '' : " in #{h(s[:method])}"}</td>" \
        "#{kept}<td class=\"l\">#{h(SiteLines.callers(s).join(' ‹ '))}</td></tr>"
    end

    def kept_by(s)
      { ruby_owned_bytes: "Ruby", anchored_bytes: "native code", leaked_bytes: "nothing (leaked)" }
        .select { |key, _| s[key].positive? }.map { |key, who| "#{who} #{human_bytes(s[key])}" }.join(", ")
    end

    # Live bytes by stack: a tree from the outermost frame, laid out row by row.
    def flame
      stacks = @dump.allocation_stacks.reject { |s| s[:bytes].zero? }
      total = stacks.sum { |s| s[:bytes] }
      return "" if total.zero?

      root = { children: {}, bytes: 0 }
      stacks.each do |s|
        node = root
        s[:frames].reverse.first(DEPTH).each do |f|
          node = (node[:children][f] ||= { children: {}, bytes: 0 })
          node[:bytes] += s[:bytes]
        end
      end
      bars = []
      place(root[:children], 0, 0.0, total, bars)
      height = ((bars.map { |b| b[:depth] }.max || 0) + 1) * ROW
      <<~HTML
        <h3>Live bytes by stack</h3>
        <p class="sub">outermost frame at the top; each bar as wide as the live bytes allocated below it</p>
        <svg class="flame" width="#{WIDTH}" height="#{height}" viewBox="0 0 #{WIDTH} #{height}" role="img"
        aria-label="live bytes by allocating stack">#{bars.map { |b| bar(b, total) }.join}</svg>
      HTML
    end

    def place(children, depth, offset, total, bars)
      children.sort_by { |_, n| -n[:bytes] }.each do |frame, n|
        width = WIDTH * n[:bytes].to_f / total
        next offset += n[:bytes] if width < 1

        bars << { frame: frame, bytes: n[:bytes], depth: depth, offset: offset }
        place(n[:children], depth + 1, offset, total, bars)
        offset += n[:bytes]
      end
    end

    def bar(b, total)
      x = WIDTH * b[:offset].to_f / total
      w = WIDTH * b[:bytes].to_f / total
      label = "#{b[:frame]} #{human_bytes(b[:bytes])}"
      %(<g><title>#{h(label)}</title><rect x="#{format('%.1f', x)}" y="#{b[:depth] * ROW}" ) +
        %(width="#{format('%.1f', [w - 1, 0.5].max)}" height="#{ROW - 2}" fill="#{color(b[:frame])}"></rect>) +
        "#{text(label, x, w, b[:depth])}</g>"
    end

    # the label, cut to the bar's width (about 7 px a character), where at least a few characters fit
    def text(label, x, width, depth)
      fits = ((width - 6) / 7).floor
      return "" if fits <= 3

      shown = label.size > fits ? "#{label[0, fits - 1]}…" : label
      %(<text x="#{format('%.1f', x + 3)}" y="#{depth * ROW + 13}">#{h(shown)}</text>)
    end

    # application frames warm, library and C frames cool
    def color(frame)
      if frame.start_with?("(C)") then "#9aa7b5"
      elsif frame.include?("/gems/") || frame.start_with?("<internal:") then "#76b7b2"
      else %w[#e15759 #f28e2b #edc948 #ff9d76][frame.sum % 4]
      end
    end
  end
end
