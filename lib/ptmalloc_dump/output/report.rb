# frozen_string_literal: true

require "cgi"
require_relative "../format_helpers"
require_relative "explanation"
require_relative "explorer"
require_relative "findings"
require_relative "retainers_section"
require_relative "sites_section"

module PtmallocDump
  # Writes OUTDIR/index.html, its PNG maps and the explorer's data (explorer-data.js) for one dump: a
  # self-contained page (its own files beside it, inline CSS and script, nothing from the network) whose
  # first screen gives the verdict: the RSS and its parts, the malloc heap, the three largest findings,
  # the advice and whether the walk reproduced glibc's counters; the evidence follows, the maps last.
  class Report
    include FormatHelpers

    PAGE_CLASS_LABELS = {
      free_resident: "free, resident (reclaimable)",
      pinned: "pinned: < 10% of the page in use",
      mixed: "mixed in use and free",
      in_use: "in use only",
      top: "top (free, resident)",
      released: "free, released",
      swapped: "swapped",
      meta: "allocator metadata",
      untouched: "allocated, not resident"
    }.freeze

    STATE_LABELS = {
      in_use: "in use", tcache: "tcache (free, cached per thread)", fastbin: "fastbin (free)",
      unsorted: "unsorted bin (free)", smallbin: "small bin (free)", largebin: "large bin (free)",
      top: "top (free)", mmapped: "mmapped chunk", meta: "allocator metadata"
    }.freeze

    # @return [Array<Hash>] the images written (file, kind, group, tile, geometry)
    attr_reader :images

    # @param dump [Dump]
    # @param outdir [String]
    # @param progress [IO, nil] where to print a progress line (a TTY)
    # @param max_tile_pixels [Integer, nil] pixel budget of one image
    def initialize(dump, outdir, progress: nil, max_tile_pixels: nil)
      @dump = dump
      @outdir = outdir
      @progress = progress
      @max_tile_pixels = max_tile_pixels
    end

    # Renders the maps and writes index.html.
    # @return [String] the path of index.html
    def write
      @images = Render.maps(@dump, @outdir, !@dump.ruby.nil?, @max_tile_pixels, @progress&.fileno)
      @analysis = @dump.analysis
      explorer.write(@outdir)
      path = File.join(@outdir, "index.html")
      File.write(path, html)
      path
    end

    # The report's stylesheet (inline, shared by every page the gem writes).
    def self.css
      <<~CSS.gsub(/\s+/, " ")
        body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
        h1 { font-size: 1.5em; margin: 0 0 .2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
        .sub { color: #555; } .cards { display: flex; flex-wrap: wrap; gap: .7em; margin: 1em 0; }
        .card { border: 1px solid #ccc; border-radius: 6px; padding: .5em .9em; min-width: 9em; }
        .card b { display: block; font-size: 1.4em; } .card.bloat { border-color: #e31a1c; background: #fff0f0; }
        .legend { display: flex; flex-wrap: wrap; gap: .3em 1.2em; margin: .4em 0; }
        .sw { display: inline-block; width: 1em; height: 1em; vertical-align: -2px; margin-right: .3em;
        border: 1px solid #999; }
        table { border-collapse: collapse; margin: .5em 0; }
        td, th { padding: .2em .6em; border-bottom: 1px solid #eee; text-align: right; }
        th { background: #f5f5f5; } td.l, th.l { text-align: left; } code { font-size: .95em; }
        .maps { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-start; }
        .maps figure { margin: 0; } figcaption { font-size: .8em; color: #666; }
        img.map { image-rendering: pixelated; border: 1px solid #ccc; display: block; }
        .bar { background: #e31a1c; height: .9em; display: inline-block; } .barcell { text-align: left; width: 22em; }
        .ok { color: #1a7f37; } .warn { color: #b35900; }
        h2.first { margin-top: .6em; font-size: 1.2em; } .lead { margin: .6em 0 .3em; font-size: 1.1em; }
        .bigbar { display: flex; height: 2em; border: 1px solid #888; border-radius: 3px; overflow: hidden; }
        .findings li { margin: .25em 0; font-size: 1.05em; } .advice li { margin: .2em 0; }
        .findings .step { color: #1f4e79; font-size: .95em; }
        .verdict .cards { margin: .6em 0; } .check { margin: .5em 0 0; }
        .banner { background: #fff4d6; border: 1px solid #e0b44c; border-radius: 6px; padding: .4em .8em;
        margin: .4em 0; }
        .aside { display: flex; gap: 1.5em; align-items: flex-start; margin-top: 1.2em; }
        .toc { flex: 0 0 16em; } .toc ol { margin: .3em 0; padding-left: 1.4em; }
        .toc h2, .howto h2 { margin-top: 0; font-size: 1.1em; }
        .howto { flex: 1; background: #f7f9fc; border: 1px solid #dde4ee; border-radius: 6px; padding: .6em 1em; }
        .mapset h3 { content-visibility: auto; }
        .mapset .maps { content-visibility: auto; contain-intrinsic-size: auto 400px; }
      CSS
    end

    private

    def summary
      @dump.summary
    end

    def header
      @dump.header
    end

    # The page, top to bottom: the method that writes each part and, for a section the contents list,
    # its anchor and its title there.
    SECTIONS = [
      [:masthead],
      [:verdict, "verdict", "Verdict"],
      [:contents],
      [:ruby_section, "owners", "Where the heap goes"],
      [:retainers_section, "retainers", "Who keeps it alive"],
      [:sites_section, "sites", "Where it was allocated"],
      [:explorer_section, "explorer", "Heap explorer"],
      [:ruby_pages_section, "ruby-pages", "Ruby's object pages"],
      [:reclaimable_section, "reclaimable", "Reclaimable now"],
      [:fragmentation_section, "fragmentation", "Fragmentation"],
      [:arenas_section, "arenas", "Arenas"],
      [:runs_section, "runs", "Largest free runs"],
      [:pinned_section, "pinned", "Pinned pages"],
      [:threads_section, "threads", "Threads"],
      [:maps_section, "maps", "Maps"],
      [:process_section, "process", "Process"]
    ].freeze

    def html
      <<~HTML
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>#{h("Heap of pid #{header[:pid]} on #{header[:hostname]}")}</title>
        <style>#{css} #{Explorer.css.gsub(/\s+/, ' ')}</style>
        </head>
        <body>
        #{SECTIONS.map { |method, _, _| send(method) }.join("\n")}
        <script>//<![CDATA[
        #{Explorer.script}
        //]]></script>
        </body>
        </html>
      HTML
    end

    def css
      self.class.css
    end

    def masthead
      time = h(header[:time].utc.strftime("%Y-%m-%d %H:%M:%S UTC"))
      threads = h(header[:thread_count])
      <<~HTML
        <h1>Heap of pid #{h(header[:pid])} on #{h(header[:hostname])}</h1>
        <p class="sub">#{time} &#183; glibc #{h(header[:glibc_version])} &#183;
        #{h(header[:ruby_version])} &#183; #{summary[:arena_count]} arena(s), #{threads} thread(s) &#183;
        #{h(header[:strings]['program'] || '')}</p>
      HTML
    end

    RSS_PARTS = {
      malloc_in_use: ["malloc in use, resident", "#3b73b9"], malloc_free_resident: ["free but resident", "#e31a1c"],
      malloc_metadata: ["malloc metadata", "#5b6770"], mmapped_chunks: ["mmapped chunks, resident", "#17a398"],
      ruby_pages: ["Ruby object pages", "#bcbd22"], stacks: ["thread stacks", "#9467bd"],
      file_backed: ["mapped files", "#c7c7c7"], other_anonymous: ["other anonymous memory", "#ff7f0e"],
      allocation_tracking: ["allocation tracker", "#8c564b"], dump_scratch: ["this dump's own scratch", "#7f7f7f"]
    }.freeze

    # The first screen: the RSS as one bar, the malloc heap, the findings, the advice, the check.
    def verdict
      <<~HTML
        <section id="verdict" class="verdict">
        #{caveats}
        #{rss_bar}
        #{heap_figures}
        <h2 class="first">What stands out</h2>
        <ol class="findings">#{findings_items}</ol>
        #{advice_list}
        <p class="check">#{verify_line}</p>
        </section>
      HTML
    end

    def findings
      @findings ||= Findings.new(@dump)
    end

    # The explorer, opening on the heap the first finding is about (where it names one).
    def explorer
      @explorer ||= Explorer.new(@dump, initial_heap: findings.top(1).first&.heap)
    end

    # Each finding, its evidence and its next step; where nothing stands out, one line says so.
    def findings_items
      top = findings.top(3)
      return %(<li class="none">#{h(findings.nothing_line)}</li>) if top.empty?

      top.map do |f|
        %(<li>#{h(f.text)} <a href="##{f.anchor}">evidence</a><br /><span class="step">Next: #{h(f.step)}</span></li>)
      end.join("\n")
    end

    # Where this dump's figures may mislead, said before any figure (as memray's banner does).
    def caveats
      hd = header
      notes = []
      unless @dump.anomalies.empty?
        notes << "The walk recorded #{@dump.anomalies.size} anomaly(ies): the heap is damaged, some figures stop " \
                 "where it is."
      end
      notes << "Not every thread was found: tcache memory of the others counts as in use." unless hd[:threads_complete]
      if hd[:mallinfo_32bit]
        notes << "glibc #{hd[:glibc_version]} has only mallinfo(), whose counters keep 32 bits: the check against it " \
                 "is partial."
      end
      if hd[:source] != :self
        notes << "Taken from outside the process (#{hd[:source]}): glibc's own counters cannot be taken there, so " \
                 "nothing here is checked against them."
      elsif hd[:oracles_off]
        notes << "Dumped with oracles: false: glibc's counters were not called, so nothing here is checked " \
                 "against them."
      elsif hd[:oracles_skipped]
        notes << "glibc's counters were not called: the free lists held #{Verification.list_entries(@dump)} chunks, " \
                 "which they would each follow again (oracles: :auto stops at #{ORACLES_AUTO_MAX_ENTRIES}; oracles: " \
                 "true calls them always), so nothing here is checked against them."
      elsif hd[:oracles_outgrown]
        notes << "glibc's malloc_info() output outgrew the room reserved for it: nothing here is checked against " \
                 "glibc's counters."
      elsif !hd[:oracles_captured]
        notes << "glibc's counters were not captured (the lists are damaged): nothing here is checked against them."
      end
      notes << "No Ruby owners: #{@dump.no_ruby_reason}." unless @dump.ruby
      return "" if notes.empty?

      %(<div class="banner">#{notes.map { |n| h(n) }.join('<br />')}</div>)
    end

    def bar(parts)
      total = parts.sum { |_, b, _| b }
      spans = parts.reject { |_, b, _| b.zero? }.map do |label, bytes, color|
        %(<span title="#{h(label)}: #{h(human_bytes(bytes))}" style="flex:#{bytes} 0 0;background:#{color}"></span>)
      end
      keys = parts.reject { |_, b, _| b.zero? }.map do |label, bytes, color|
        "<span><span class=\"sw\" style=\"background:#{color}\"></span>#{h(label)} " \
          "<b>#{h(human_bytes(bytes))}</b> #{h(percent(bytes, total))}</span>"
      end
      %(<div class="bigbar">#{spans.join}</div><div class="legend">#{keys.join("\n")}</div>)
    end

    def rss_bar
      rss = summary[:rss]
      unless rss
        heap = h(human_bytes(@dump.figures[:malloc_heap]))
        resident = "#{h(human_bytes(summary[:resident_bytes]))} of it resident"
        return <<~HTML
          <p class="lead">Malloc heap <b>#{heap}</b>, #{resident} (this dump does not account the rest of the RSS):</p>
          #{bar(malloc_parts)}
        HTML
      end

      parts = RSS_PARTS.filter_map do |k, (label, color)|
        [label, rss[k].to_i, color] unless k == :allocation_tracking && !@dump.malloc_sites?
      end
      vm = rss[:vm_rss] ? " (the kernel's VmRSS at the dump: #{human_bytes(rss[:vm_rss])})" : ""
      error = rss[:error] ? " ± #{human_bytes(rss[:error])}" : ""
      unknown = if @dump.ruby then ""
                else
                  "<p class=\"sub\">Ruby's object pages are not recorded in a dump without Ruby objects: they count " \
                    "as other anonymous memory.</p>"
                end
      <<~HTML
        <p class="lead" id="rss">RSS <b>#{h(human_bytes(rss[:total]))}#{h(error)}</b>#{h(vm)}:</p>
        #{approximate_note(rss)}#{bar(parts)}
        #{unknown}
      HTML
    end

    # Why the RSS carries a "±": the process's memory moved while its smaps was read
    def approximate_note(rss)
      return "" unless rss[:error]

      "<p class=\"sub\">Approximate: the process's memory moved while the dump read its smaps and page " \
        "residency, by up to #{h(human_bytes(rss[:error]))}.</p>\n"
    end

    def malloc_parts
      s = summary
      f = @dump.figures
      pal = Render.palette
      [["in use in the arenas", f[:in_use_arenas], pal[:states][:in_use]],
       ["mmapped chunks", f[:mmapped_chunks], pal[:states][:mmapped]],
       ["free but resident", f[:free_resident], pal[:page_classes][:free_resident]],
       ["free, released or swapped", s[:free_released_bytes] + s[:free_swapped_bytes], pal[:page_classes][:released]],
       ["allocator metadata", s[:meta_bytes], pal[:states][:meta]]]
    end

    def heap_figures
      s = summary
      f = @dump.figures
      heaps = s[:heap_count] - s[:hblks]
      trim_note = "malloc_trim(0) now: #{human_bytes(reclaimable_total)}"
      cached = "#{s[:tcache_count]} + #{s[:fastbin_count]} chunks"
      <<~HTML
        <div class="cards">
        #{card('malloc heap', f[:malloc_heap],
               "#{s[:arena_count]} arena(s), #{heaps} heap(s), #{f[:mmapped_chunk_count]} mmapped chunk(s)")}
        #{card('in use', f[:in_use], "#{percent(f[:in_use], f[:malloc_heap])} of the malloc heap")}
        #{card('free but resident', f[:free_resident], trim_note, css: 'bloat')}
        #{card('free, released', s[:free_released_bytes], "swapped #{human_bytes(s[:swapped_bytes])}")}
        #{card('tcache + fastbins', s[:tcache_bytes] + s[:fastbin_bytes], cached)}
        </div>
      HTML
    end

    def advice_list
      lines = Advice.new(@dump).lines
      title = %(<h2 id="advice" class="first">Advice</h2>)
      return "#{title}<p>No advice: no figure crosses a threshold for it.</p>" if lines.empty?

      %(#{title}<ul class="advice">#{lines.map { |l| %(<li class="advice">#{h(l.text)}</li>) }.join("\n")}</ul>)
    end

    def verify_line
      v = @dump.verify
      case v.status
      when :nothing_compared
        "<span class=\"warn\">Nothing compared: the dump holds no figures of glibc's own to check the walk " \
        "against (#{h(v.notes.join('; '))}).</span>"
      when :verified
        "<span class=\"ok\">&#10003; The walk reproduces glibc's #{h(v.mallinfo_name)}() and malloc_info() " \
        "exactly: every figure here adds up to glibc's own.</span>"
      else
        "<span class=\"warn\">&#9888; #{v.differences.size} figure(s) differ from glibc's #{h(v.mallinfo_name)}(), " \
        "#{v.anomalies.size} anomaly(ies) recorded: read the figures with care " \
        "(see <a href=\"#process\">Process</a>).</span>"
      end
    end

    def contents
      <<~HTML
        <div class="aside">
        <nav class="toc" id="contents"><h2>Contents</h2><ol>#{contents_items}</ol></nav>
        <div class="howto" id="how-to-read"><h2>How to read this</h2>
        <p><b>RSS</b> is what the process holds in RAM; the <b>malloc heap</b> is the part glibc's malloc manages:
        its arenas' heaps and the chunks it mmapped for large requests. A chunk is <b>in use</b> (the program holds
        it) or <b>free</b> (in a bin, a fastbin, a thread's <b>tcache</b> or the arena's <b>top</b>).
        <b>Free but resident</b> memory is free to malloc and still in RAM: the program does not use it, the kernel
        cannot take it back; <code>malloc_trim(0)</code> returns the whole free pages of it. A <b>pinned</b> page is
        kept in RAM by a few live bytes among free ones. The <b>tcache</b> is a per-thread cache of small free
        chunks that the arena counts as in use. <b>Owners</b>: a chunk belongs to the Ruby object whose slot (or
        whose memory) points at it; in-use chunks no Ruby object reaches are <b>native</b>: <b>anchored</b> when a
        loaded library's data, a thread's stack or TLS points at them (directly or through other native chunks),
        <b>leaked</b> when nothing does. The scan is conservative: a stale word can make a chunk look reached.</p></div>
        </div>
      HTML
    end

    def contents_items
      SECTIONS.filter_map { |_, id, title| %(<li><a href="##{id}">#{h(title)}</a></li>) if title }.join
    end

    def explorer_section
      explorer.section
    end

    def card(label, bytes, note = nil, css: nil)
      note = note ? "<br /><small>#{h(note)}</small>" : ""
      %(<div class="card#{css ? " #{css}" : ''}"><b>#{h(human_bytes(bytes))}</b>#{h(label)}#{note}</div>)
    end

    OWNER_LABELS = {
      string: "String buffers", array: "Array buffers", hash: "Hash tables", object: "object ivars",
      data: "typed / C data", imemo: "iseqs and imemos", other_ruby: "other Ruby",
      ruby_page: "Ruby object pages (malloc'd)", native: "native (no Ruby owner)"
    }.freeze

    def swatch(color, label)
      %(<span><span class="sw" style="background:#{color}"></span>#{h(label)}</span>)
    end

    def owner_color(category)
      Render.palette[:owners][Format::OWNER_CATEGORIES.index(category)]
    end

    PALE_PIXELS = "pale pixels are on pages not resident."

    def legend
      pal = Render.palette
      pages = PAGE_CLASS_LABELS.map { |k, label| swatch(pal[:page_classes][k], label) }
      states = STATE_LABELS.map { |k, label| swatch(pal[:states][k], label) }
      owners = OWNER_LABELS.map { |k, label| swatch(owner_color(k), label) }
      owners << swatch(owner_color(:none), "free (any bin, cache or top)")
      owners << swatch(pal[:states][:meta], "allocator metadata")
      page_cell = "one cell per #{h(human_bytes(header[:page_size]))} page, #{Render::PAGE_CELLS_PER_ROW} to a row"
      byte_pixel = "one pixel per #{Render::BYTES_PER_PIXEL} bytes, #{Render::BYTE_MAP_PAGES_PER_ROW} pages to a row"
      owner_maps = if @dump.ruby
                     "<p>Owner maps: the byte map again, in-use chunks coloured by the Ruby object that owns " \
                       "them.</p>\n<div class=\"legend\">#{owners.join("\n")}</div>"
                   else
                     ""
                   end
      <<~HTML
        <h3>Legend</h3>
        <p>Page maps: #{page_cell}. A checkered cell is still shared copy-on-write with another process (a parent
        or a child).</p>
        <div class="legend">#{pages.join("\n")}</div>
        <p>Byte maps: #{byte_pixel}; neighbouring chunks of one state alternate two shades; #{PALE_PIXELS}</p>
        <div class="legend">#{states.join("\n")}</div>
        #{owner_maps}
      HTML
    end

    def sites_section
      @dump.ruby ? SitesSection.new(@dump).html : ""
    end

    def retainers_section
      @dump.ruby ? RetainersSection.new(@dump).html : ""
    end

    NOT_DIVIDED = "so its in-use memory is not divided between Ruby objects and native code."

    # Says why a dump holds no Ruby objects, so nobody reads its in-use memory as native.
    def no_ruby_section
      why = @dump.no_ruby_reason
      <<~HTML
        <h2 id="owners">Where the heap goes</h2>
        <p class="warn">No Ruby owners: this dump holds no Ruby objects (#{h(why)}), #{NOT_DIVIDED}</p>
      HTML
    end

    # Where the heap goes: in-use bytes by owner, then free and metadata, as a table and a bar.
    def ruby_section
      return no_ruby_section unless @dump.ruby

      r = summary[:ruby]
      pal = Render.palette
      rows = OWNER_LABELS.keys.map { |k| [OWNER_LABELS[k], r[:by_category][k][:bytes], owner_color(k)] }
      rows << ["free, resident", summary[:free_resident_bytes], pal[:page_classes][:free_resident]]
      rows << ["free, released or swapped", summary[:free_released_bytes] + summary[:free_swapped_bytes],
               pal[:page_classes][:released]]
      rows << ["allocator metadata", summary[:meta_bytes], pal[:states][:meta]]
      rows = rows.reject { |_, b, _| b.zero? }
      total = rows.sum { |_, b, _| b }
      bar = rows.map do |label, bytes, color|
        %(<span title="#{h(label)}: #{h(human_bytes(bytes))}" style="flex:#{bytes} 0 0;background:#{color}"></span>)
      end
      table = rows.map do |label, bytes, color|
        "<tr><td class=\"l\">#{swatch(color, label)}</td><td>#{h(human_bytes(bytes))}</td>" \
          "<td>#{h(percent(bytes, total))}</td></tr>"
      end
      outside = r[:ruby_pages_in_malloc_bytes].zero? ? ", allocated outside malloc" : ""
      <<~HTML
        <h2 id="owners">Where the heap goes</h2>
        <p>#{owned_sentence(r)}
        #{h(human_bytes(r[:unattributed_bytes]))} is in use by native code that no Ruby object points at.
        Ruby's own object pages: #{r[:pages]} (#{h(human_bytes(r[:ruby_page_bytes]))}#{outside}).</p>
        <div style="display:flex;height:1.6em;border:1px solid #999;margin:.5em 0">#{bar.join}</div>
        <table><tr><th class="l">what</th><th>bytes</th><th>share</th></tr>#{table.join("\n")}</table>
        #{holders_paragraph}
        <div class="maps">#{owner_tables(r)}</div>
        #{methods_table}
      HTML
    end

    # The section's first sentence: the malloc memory in use that Ruby objects and their pages own.
    def owned_sentence(r)
      in_use = @dump.figures[:in_use]
      following = r[:references] ? " (following pointers between chunks)" : ""
      pages = r[:ruby_pages_in_malloc_bytes].to_i
      by_pages = pages.positive? ? " #{h(human_bytes(pages))} by their object pages (malloc chunks on this Ruby)," : ""
      "#{h(human_bytes(r[:owned_bytes]))} of the #{h(human_bytes(in_use))} of malloc memory in use (in the arenas " \
        "and in mmapped chunks) is owned by #{r[:objects]} Ruby objects#{following}#{garbage_clause(r)},#{by_pages}"
    end

    def top_table(hash, title)
      lines = hash.first(20).map do |name, e|
        "<tr><td class=\"l\">#{h(name)}</td><td>#{h(human_bytes(e[:bytes]))}</td><td>#{e[:chunks]}</td></tr>"
      end
      "<table><tr><th class=\"l\">#{h(title)}</th><th>bytes</th><th>chunks</th></tr>#{lines.join("\n")}</table>"
    end

    def owner_tables(r)
      tables = [top_table(r[:by_type].transform_keys(&:to_s), "Ruby type"),
                top_table(r[:by_class], "class (top 20 of 50 in the JSON)"), top_table(r[:by_data_type], "typed data")]
      tables << top_table(r[:by_module], "defining module") if r[:by_module]
      tables.join(" ")
    end

    # Ruby's object pages, one row a page: after the explorer, folded (a big heap has thousands of rows).
    def ruby_pages_section
      pages = @images.select { |im| im[:kind] == :ruby_pages }
      return "" if pages.empty?

      figures = pages.map { |im| figure(im, "object pages #{im[:first_unit] + 1}-#{im[:first_unit] + im[:units]}") }
      rows = pages.sum { |im| im[:units] }
      <<~HTML
        <h2 id="ruby-pages">Ruby's object pages</h2>
        <details><summary>#{rows} page(s): one row per page, one cell per slot; live slots coloured like their
        owners in the owner maps, free slots white</summary><div class="maps">#{figures.join}</div></details>
      HTML
    end

    # Native memory by who holds it (anchored by a root, or leaked) and Ruby memory by GC age, where
    # the dump has those figures.
    def holders_paragraph
      o = summary[:owners]
      r = summary[:ruby]
      parts = []
      if o
        anchors = Array(o[:anchored_by]).max_by(5) { |_, b| b }.map { |n, b| "#{h(n)} #{h(human_bytes(b))}" }
        anchors = anchors.empty? ? "" : " (#{anchors.join(', ')})"
        parts << "Native memory: #{h(human_bytes(o.dig(:anchored, :bytes)))} anchored by roots#{anchors}, " \
                 "#{h(human_bytes(o.dig(:interior, :bytes)))} held through pointers into the middle of blocks " \
                 "(interior pointers), " \
                 "<b>#{h(human_bytes(o.dig(:leaked, :bytes)))} leaked</b> in #{o.dig(:leaked, :count)} block(s): " \
                 "nothing points at them."
        sizes = Array(o[:leaked_by_size]).first(5).map do |e|
          samples = Array(e[:samples]).first(2).map { |a| "<code>#{h(hex(a))}</code>" }
          "#{e[:count]} x #{h(human_bytes(e[:size]))} (#{h(human_bytes(e[:bytes]))}; e.g. #{samples.join(', ')})"
        end
        parts << "Leaked blocks by size: #{sizes.join('; ')}." unless sizes.empty?
      end
      if r[:young_bytes] && r[:old_bytes]
        parts << "By GC age of the owner: #{h(human_bytes(r[:old_bytes]))} held by old objects, " \
                 "#{h(human_bytes(r[:young_bytes]))} by young ones."
        if r[:garbage_bytes].to_i.positive?
          parts << "#{h(human_bytes(r[:garbage_bytes]))} more is held by #{r[:garbage_objects]} dead object(s): " \
                   "garbage the GC's lazy sweep had not reached, freed when it does (not a leak)."
        end
      end
      parts.empty? ? "" : "<p>#{parts.join(' ')}</p>"
    end

    def garbage_clause(ruby)
      return "" unless ruby[:garbage_objects].to_i.positive?

      "; #{ruby[:garbage_objects]} of them are dead and hold #{h(human_bytes(ruby[:garbage_bytes]))} until the " \
        "GC's lazy sweep frees it"
    end

    def methods_table
      methods = summary.dig(:ruby, :methods)
      return "" if methods.nil? || methods.empty?

      rows = methods.first(15).map do |m|
        "<tr><td class=\"l\">#{h(m[:module])}##{h(m[:method])}</td><td class=\"l\">#{h(m[:path])}:#{h(m[:line])}</td>" \
          "<td>#{h(human_bytes(m[:bytes]))}</td></tr>"
      end
      "<table><tr><th class=\"l\">method</th><th class=\"l\">defined at</th><th>bytes</th></tr>" \
        "#{rows.join("\n")}</table>"
    end

    def group_images(group)
      @images.select { |im| im[:group] == group }
    end

    def figure(im, caption)
      "<figure><img class=\"map\" loading=\"lazy\" decoding=\"async\" src=\"#{h(im[:file])}\" " \
        "width=\"#{im[:width]}\" height=\"#{im[:height]}\" alt=\"#{h(caption)}\" />" \
        "<figcaption>#{h(caption)}</figcaption></figure>"
    end

    # The PNG maps, last: the explorer above shows the same bytes interactively; the images load as
    # they scroll into view, so a report of many heaps opens as fast as one of one.
    def maps_section
      <<~HTML
        <h2 id="maps">Maps</h2>
        <p class="sub">The same heaps as still pictures, one file each (they load as they scroll into view).</p>
        #{legend}
        <div class="mapset">#{heaps_section}</div>
      HTML
    end

    def heaps_section
      groups = @dump.heaps.reject { |hp| hp.kind == :mmapped_chunk }.map { |hp| [hp.index, [hp]] }
      mm = @dump.heaps.select { |hp| hp.kind == :mmapped_chunk }
      groups << [:mmapped, mm] unless mm.empty?
      groups.map { |group, heaps| heap_block(group, heaps) }.join("\n")
    end

    def heap_block(group, heaps)
      classes = Hash.new(0)
      heaps.each { |hp| @analysis[:heap_page_classes][hp.index].each { |k, n| classes[k] += n } }
      title = if group == :mmapped then "#{heaps.size} mmapped chunk(s), #{human_bytes(heaps.sum(&:size))}"
              else
                hp = heaps.first
                "Heap #{hp.index}: #{hp.kind == :sbrk ? 'main arena (sbrk)' : "arena #{hp.arena.index}"} " \
                  "#{hex(hp.start)}-#{hex(hp.end)}, #{human_bytes(hp.size)}"
              end
      counts = PAGE_CLASS_LABELS.keys.filter_map { |k| "#{classes[k]} #{PAGE_CLASS_LABELS[k]}" if classes[k].positive? }
      page_maps = group_images(group).select { |im| im[:kind] == :page_map }
      byte_maps = group_images(group).select { |im| im[:kind] == :byte_map }
      owner_maps = group_images(group).select { |im| im[:kind] == :owner_map }
      page_figures = page_maps.map do |im|
        figure(im, "page map#{page_maps.size > 1 ? " #{im[:tile] + 1}/#{page_maps.size}" : ''}")
      end
      owner_figures = if owner_maps.empty? then ""
                      else
                        figures = owner_maps.map { |im| figure(im, byte_caption(im, heaps)) }
                        "<p class=\"sub\">owner map:</p>\n<div class=\"maps\">#{figures.join}</div>"
                      end
      <<~HTML
        <h3>#{h(title)}</h3>
        <p class="sub">pages: #{h(counts.join(', '))}</p>
        <div class="maps">#{page_figures.join}</div>
        <p class="sub">byte map#{byte_maps.size > 1 ? " in #{byte_maps.size} tiles" : ''}:</p>
        <div class="maps">#{byte_maps.map { |im| figure(im, byte_caption(im, heaps)) }.join}</div>
        #{owner_figures}
      HTML
    end

    def byte_caption(im, heaps)
      return "tile #{im[:tile] + 1}" unless heaps.size == 1

      first = (heaps.first.start & ~(header[:page_size] - 1)) + im[:first_unit] * Render::BYTES_PER_PIXEL
      "#{hex(first)} +#{human_bytes(im[:units] * Render::BYTES_PER_PIXEL)}"
    end

    def reclaimable_total
      @analysis[:trim_estimate].sum
    end

    TRIM_GIVES_BACK = "What <code>malloc_trim(0)</code> would give back: the whole pages inside free chunks (after " \
                      "fastbins are consolidated) and, for the main arena, the top beyond its first page. Memory in " \
                      "tcaches stays."
    RECLAIMABLE_HEAD = '<tr><th class="l">arena</th><th class="l">address</th><th>free, resident</th>' \
                       "<th>malloc_trim(0) would release</th></tr>"

    def reclaimable_section
      rows = @dump.arenas.map do |a|
        s = summary[:arenas][a.index]
        "<tr><td class=\"l\">#{a.index}#{a.main? ? ' (main)' : ''}</td>" \
          "<td class=\"l\"><code>#{h(hex(a.address))}</code></td><td>#{h(human_bytes(s[:free_resident_bytes]))}</td>" \
          "<td>#{h(human_bytes(@analysis[:trim_estimate][a.index]))}</td></tr>"
      end
      totals = "<th>#{h(human_bytes(summary[:free_resident_bytes]))}</th><th>#{h(human_bytes(reclaimable_total))}</th>"
      <<~HTML
        <h2 id="reclaimable">Reclaimable now</h2>
        <p>#{TRIM_GIVES_BACK}</p>
        #{measured_trim}
        <table>#{RECLAIMABLE_HEAD}
        #{rows.join("\n")}
        <tr><th class="l" colspan="2">total</th>#{totals}</tr></table>
      HTML
    end

    def measured_trim
      released = @dump.trim_released
      return "" unless released

      "<p>Measured with <code>trim_check: true</code>: malloc_trim(0), run right after the walk, released " \
        "<b>#{h(human_bytes(released.sum))}</b> (#{released.sum} B) against #{h(human_bytes(reclaimable_total))} " \
        "(#{reclaimable_total} B) estimated.</p>"
    end

    def fragmentation_section
      hist = @analysis[:free_histogram]
      max = hist.map { |_, _, b| b }.max.to_i
      rows = hist.map do |from, count, bytes|
        width = max.zero? ? 0 : (100.0 * bytes / max).round(1)
        "<tr><td>#{h(human_bytes(from))} - #{h(human_bytes(from * 2 - 1))}</td><td>#{count}</td>" \
          "<td>#{h(human_bytes(bytes))}</td>" \
          "<td class=\"barcell\"><span class=\"bar\" style=\"width:#{width}%\"></span></td></tr>"
      end
      small = @analysis[:free_bytes_below_page]
      not_top = @analysis[:free_bytes_not_top]
      <<~HTML
        <h2 id="fragmentation">Fragmentation</h2>
        <p>Largest free chunk: <b>#{h(human_bytes(summary[:largest_free]))}</b> (top chunks aside).
        Free memory in chunks smaller than a page: <b>#{h(percent(small, @analysis[:free_bytes_not_top]))}</b>
        (#{h(human_bytes(small))} of #{h(human_bytes(not_top))}): such memory can only be reused by
        requests that fit, and no page of it can be released. Pages kept resident by little live data:
        <b>#{@analysis[:pinned_page_count]}</b> (#{h(human_bytes(@analysis[:pinned_bytes]))}).</p>
        <table><tr><th>free chunk size</th><th>chunks</th><th>bytes</th><th class="l">bytes</th></tr>
        #{rows.join("\n")}</table>
      HTML
    end

    ARENA_BYTES = %i[arena in_use_bytes free_resident_bytes free_released_bytes tcache_bytes fastbin_bytes top_bytes
                     largest_free].freeze
    ARENAS_HEAD = '<tr><th class="l">arena</th><th class="l">address</th><th>heap</th><th>in use</th>' \
                  "<th>free, resident</th><th>free, released</th>\n<th>tcache</th><th>fastbins</th><th>top</th>" \
                  "<th>largest free</th><th>chunks</th><th>heaps</th></tr>"

    def arenas_section
      rows = summary[:arenas].map do |a|
        bytes = ARENA_BYTES.map { |k| "<td>#{h(human_bytes(a[k]))}</td>" }.join
        "<tr><td class=\"l\">#{a[:index]}#{a[:main] ? ' (main)' : ''}</td>" \
          "<td class=\"l\"><code>#{h(hex(a[:address]))}</code></td>#{bytes}" \
          "<td>#{a[:chunk_count]}</td><td>#{a[:heap_count]}</td></tr>"
      end
      <<~HTML
        <h2 id="arenas">Arenas</h2>
        <table>#{ARENAS_HEAD}
        #{rows.join("\n")}</table>
      HTML
    end

    def runs_section
      rows = @analysis[:free_runs].map do |r|
        "<tr><td class=\"l\"><code>#{h(hex(r[:start]))}</code></td><td>#{h(human_bytes(r[:end] - r[:start]))}</td>" \
          "<td>#{h(human_bytes(r[:resident]))}</td><td>#{r[:chunks]}</td><td>#{r[:heap]}</td></tr>"
      end
      <<~HTML
        <h2 id="runs">The 20 largest free and resident runs</h2>
        <p>Runs of adjacent free chunks (bins, tcache, fastbins, top), by their resident bytes.</p>
        <table><tr><th class="l">address</th><th>size</th><th>resident</th><th>chunks</th><th>heap</th></tr>
        #{rows.join("\n")}</table>
      HTML
    end

    PINNED_REST = "the rest of each is free but cannot be released. The emptiest:"

    def pinned_section
      rows = @analysis[:pinned_pages].first(20).map do |pg|
        chunks = pg[:chunks].map { |a, s| "<code>#{h(hex(a))}</code> (#{h(human_bytes(s))})" }.join(", ")
        "<tr><td class=\"l\"><code>#{h(hex(pg[:address]))}</code></td><td>#{h(human_bytes(pg[:in_use]))}</td>" \
          "<td>#{pg[:chunk_count]}</td><td class=\"l\">#{chunks}</td></tr>"
      end
      <<~HTML
        <h2 id="pinned">Pages pinned by little live data</h2>
        <p>#{@analysis[:pinned_page_count]} resident page(s) hold less than 10% in-use bytes; #{PINNED_REST}</p>
        <table><tr><th class="l">page</th><th>in use</th><th>chunks</th><th class="l">chunks pinning it</th></tr>
        #{rows.join("\n")}</table>
      HTML
    end

    FOUND_BY = { tls: "its thread's TLS", scan: "its structure" }.freeze
    THREADS_HEAD = '<tr><th class="l">thread</th><th class="l">arena</th><th>tcache chunks</th><th>tcache bytes</th>' \
                   '<th class="l">tcache found through</th></tr>'

    def threads_section
      rows = @dump.threads.map do |t|
        thread = "#{h(t.tid || 'none')}#{t.current ? ' (dumping)' : ''}#{t.exiting ? ' (exiting)' : ''}"
        "<tr><td class=\"l\">#{thread}</td><td class=\"l\"><code>#{h(hex(t.arena))}</code></td>" \
          "<td>#{t.tcache_count}</td><td>#{h(human_bytes(t.tcache_bytes))}</td>" \
          "<td class=\"l\">#{h(FOUND_BY.fetch(t.found_by, '-'))}</td></tr>"
      end
      <<~HTML
        <h2 id="threads">Threads and their tcaches</h2>
        <table>#{THREADS_HEAD}
        #{rows.join("\n")}</table>
        #{ownerless_tcaches_note}
      HTML
    end

    # A tcache no thread of the process points at: a thread's that is gone. In a fork child, the
    # parent's other threads' (a fork copies only the thread that called it): their cached chunks are
    # handed out to no one again. From outside without a symbol file, the threads' `tcache` pointers
    # cannot be read at all: there it says only that.
    def ownerless_tcaches_note
      gone = @dump.threads.reject(&:tid).select(&:tcache)
      return "" if gone.empty?

      found = "#{gone.size} tcache(s) holding #{h(human_bytes(gone.sum(&:tcache_bytes)))} in " \
              "#{gone.sum(&:tcache_count)} chunk(s)"
      if Array(header.dig(:source_info, :unavailable)).include?(:tls)
        return "<p>#{found} were found by their structure (thread \"none\"): without a symbol file the offset of " \
               "glibc's <code>tcache</code> in each thread's TLS is unknown here, so which thread holds each is not " \
               "known.</p>"
      end

      "<p>#{found} belong to no thread of this process (thread \"none\"): threads that are gone. In a fork child, " \
        "such as a preforking server's worker, they are the tcaches of the parent's other threads, which the fork " \
        "did not copy; no thread will take their chunks again. A thread exiting while the dump ran leaves one for a " \
        "moment too.</p>"
    end

    def process_section
      hd = header
      rows = [
        ["pid", hd[:pid]], ["time", hd[:time].utc.strftime("%Y-%m-%d %H:%M:%S.%L UTC")], ["host", hd[:hostname]],
        ["program", hd[:strings]["program"]],
        ["Ruby", hd[:ruby_version]], ["glibc", "#{hd[:glibc_version]} (#{hd[:libc_path]})"],
        ["main_arena", "#{hex(hd[:main_arena])}, found through #{hd[:symbol_source]} (#{hd[:symbol_file]})"],
        ["residency", "#{hd[:residency_source]}, page size #{hd[:page_size]}"],
        ["mmap threshold", human_bytes(hd[:mmap_threshold])], ["trim threshold", human_bytes(hd[:trim_threshold])],
        ["arena_max", hd[:arena_max].zero? ? "default (8 per core)" : hd[:arena_max]],
        ["walk", format("%.1f ms", hd[:walk_ns] / 1e6)],
        ["dump file", "#{File.basename(@dump.path)} (#{human_bytes(@dump.file_size)})"]
      ]
      rows = rows.map { |k, v| "<tr><th class=\"l\">#{h(k)}</th><td class=\"l\">#{h(v)}</td></tr>" }
      <<~HTML
        <h2 id="process">Process</h2>
        <table>#{rows.join("\n")}</table>
      HTML
    end
  end
end
