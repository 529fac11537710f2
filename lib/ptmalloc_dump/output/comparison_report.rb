# frozen_string_literal: true

require "cgi"
require_relative "../format_helpers"
require_relative "explorer"
require_relative "growth_findings"

module PtmallocDump
  # The pages `ptmalloc-visualize --diff` and `--compare` write: OUTDIR/index.html, self-contained.
  class ComparisonReport
    include FormatHelpers

    # What each summary figure is called on a page (the names a reader knows, not glibc's field names).
    LABELS = {
      arena: "malloc heap (arenas)", in_use_bytes: "in use", in_use_count: "chunks in use",
      free_resident_bytes: "free but resident", free_released_bytes: "free, released", hblkhd: "mmapped chunks",
      hblks: "mmapped chunk count", tcache_bytes: "tcache", fastbin_bytes: "fastbins", resident_bytes: "resident",
      chunk_count: "chunks", private_bytes: "private (this worker only)", shared_bytes: "shared with the parent"
    }.freeze

    # @param figure [Symbol] a summary key
    # @return [String] its label
    def self.label(figure)
      LABELS.fetch(figure) { figure.to_s.tr("_", " ") }
    end

    # @param size_class [Integer] a key of {Dump#size_classes}
    # @return [String] the chunk sizes it holds: "1040 B" for an exact size, "1.0 KiB to 2.0 KiB" for a
    #   power-of-two class (its key is the class's upper bound)
    def self.size_class_label(size_class)
      range = Dump.size_class_range(size_class)
      return "#{size_class} B" if range.size == 1

      "#{FormatHelpers.human_bytes(range.first - 1)} to #{FormatHelpers.human_bytes(range.last)}"
    end

    # @param owner [Array(Symbol, String, Integer)] what {Diff#top_growth_owner} returns
    # @return [String] its name as a reader says it: "String objects", "T_STRING objects", "native memory"
    def self.owner_label(owner)
      kind, name, = owner
      case kind
      when :native then "native memory (no Ruby owner)"
      when :class then "#{name} objects"
      else "#{name} objects (Ruby type)"
      end
    end

    # Ruby owners and leaked bytes of one worker: its top types, classes and (where the dump has them)
    # defining modules, and native memory (unattributed, or anchored and leaked).
    #
    # @param dump [Dump]
    # @return [Hash] :types, :classes, :modules (Arrays of [name, bytes], largest first, at most 3),
    #   :native and :leaked (bytes, or nil where the dump cannot tell: no Ruby objects, no roots)
    def self.owners_of(dump)
      s = dump.summary
      r = s[:ruby]
      top = ->(h) { h ? h.sort_by { |_, e| -e[:bytes] }.first(3).map { |k, e| [k.to_s, e[:bytes]] } : [] }
      { types: top.call(r && r[:by_type]), classes: top.call(r && r[:by_class]),
        modules: top.call(r && r[:by_module]), native: r && r[:unattributed_bytes],
        leaked: dump.ruby && s.dig(:owners, :leaked, :bytes) }
    end

    # What makes the most deviant worker deviate: the figures (free but resident, native, leaked, a
    # Ruby type, class or module) by which it exceeds the median worker most.
    #
    # @param fleet [Fleet]
    # @return [Array<Array(String, Integer)>] [what, bytes above the median], largest first, at most 3
    def self.deviation_reasons(fleet)
      d = fleet.most_deviant
      worker = fleet.dumps.find { |x| x.path == d[:path] }
      figures = fleet.dumps.to_h { |x| [x, deviation_figures(x)] }
      names = figures.values.flat_map(&:keys).uniq
      names.filter_map do |name|
        values = fleet.dumps.map { |x| figures[x][name].to_i }.sort
        excess = figures[worker][name].to_i - values[(values.size - 1) / 2]
        [name, excess] if excess.positive?
      end.max_by(3) { |_, b| b }
    end

    def self.deviation_figures(dump)
      s = dump.summary
      r = s[:ruby]
      f = { "free but resident memory" => s[:free_resident_bytes], "mmapped chunks" => s[:hblkhd] }
      if r
        f["native memory (no Ruby owner)"] = r[:unattributed_bytes]
        r[:by_type].each { |k, e| f["#{k} objects"] = e[:bytes] }
        r[:by_class].each { |k, e| f["#{k} instances"] = e[:bytes] }
        r[:by_module]&.each { |k, e| f["module #{k}"] = e[:bytes] }
      else
        f["memory in use"] = s[:in_use_bytes]
      end
      f["leaked memory"] = s.dig(:owners, :leaked, :bytes) if s[:owners] && r
      f
    end
    private_class_method :deviation_figures

    def initialize(outdir)
      @outdir = outdir
    end

    # @param diff [Diff]
    # @return [String] the path of index.html
    def write_diff(diff)
      images = Render.diff_maps(diff.new, @outdir, diff.page_changes)
      explorer = Explorer.new(diff.new, page_changes: diff.page_changes)
      explorer.write(@outdir)
      write("Heap growth of pid #{diff.new.header[:pid]}", diff_body(diff, images, explorer), explorer: true)
    end

    # @param fleet [Fleet]
    # @return [String] the path of index.html
    def write_fleet(fleet)
      write("#{fleet.dumps.size} workers compared", fleet_body(fleet))
    end

    private

    def write(title, body, explorer: false)
      path = File.join(@outdir, "index.html")
      File.write(path, <<~HTML)
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8" />
        <title>#{h(title)}</title>
        <style>#{Report.css}#{explorer ? " #{Explorer.css.gsub(/\s+/, ' ')}" : ''}</style>
        </head>
        <body>
        <h1>#{h(title)}</h1>
        #{body}
        #{explorer ? "<script>//<![CDATA[\n#{Explorer.script}\n//]]></script>" : ''}
        </body>
        </html>
      HTML
      path
    end

    def signed_count(n)
      n.negative? ? count(n) : "+#{count(n)}"
    end

    def row(cells)
      "<tr>#{cells.map { |c| "<td>#{c}</td>" }.join}</tr>"
    end

    # A table: a header row of `heads` (<th> cells), then `rows`, one a line.
    def table(heads, rows)
      "<table><tr>#{heads}</tr>#{rows.join("\n")}</table>"
    end

    # The first screen: what grew, what kind of growth it is, with the next step for each.
    def verdict(diff)
      f = GrowthFindings.new(diff)
      items = f.all.map do |x|
        steps = x.steps.map { |s| %(<br /><span class="step">Next: #{h(s)}</span>) }.join
        %(<li class="growth" data-topic="#{x.topic}"><b>#{h(x.title.sub(/\A./, &:upcase))}</b>: #{h(x.text)}#{steps} ) +
          %(<a href="##{x.anchor}">evidence</a></li>)
      end
      list = items.empty? ? "" : %(<ol class="findings">#{items.join("\n")}</ol>)
      <<~HTML
        <section id="verdict" class="verdict">
        <h2 class="first">What grew</h2>
        <p class="lead">#{h(f.lead)}</p>
        #{list}
        <p class="sub">#{h(verdict_note(f))}</p>
        </section>
      HTML
    end

    def verdict_note(findings)
      "A kind of growth is listed when it grew by #{human_bytes(findings.notable)} or more (1 MiB, or 1% of the " \
        "later heap where that is more), largest first; the kinds overlap: a leaked mmapped chunk is in both."
    end

    GROWTH_HEADS = %(<th class="l">figure</th><th>before</th><th>after</th><th>growth</th>)
    ARENA_HEADS = %(<th class="l">arena</th><th>heap</th><th>in use</th><th>free, resident</th><th>free, released</th>)
    SIZE_CLASS_HEADS = "<th>size class</th><th>before</th><th>after</th><th>chunks</th><th>bytes</th>"

    def diff_body(diff, images, explorer)
      c = diff.chunks
      same = "#{count(c[:same_count])} (#{h(human_bytes(c[:same_bytes]))})"
      gone = "#{count(c[:gone_count])} (#{h(human_bytes(c[:gone_bytes]))})"
      <<~HTML
        <p class="sub">#{diff_span(diff)}</p>
        #{verdict(diff)}
        <h2 id="growth">Growth</h2>
        #{table(GROWTH_HEADS, growth_rows(diff))}
        <h2>Chunks</h2>
        <p>In both dumps (same address, size and state): #{same}; new: #{count(c[:new_count])}
        (#{h(human_bytes(c[:new_bytes]))}); gone: #{gone}. Pages that became resident:
        #{count(c[:pages_became_resident])}.</p>
        <h2 id="arenas">Arenas</h2>
        #{table(ARENA_HEADS, arena_rows(diff))}
        <h2>In-use chunks by size class</h2>
        #{table(SIZE_CLASS_HEADS, size_class_rows(diff))}
        #{owners_section(diff)}
        #{explorer.section}
        <h2 id="pages">Pages by what changed</h2>
        <p>#{PAGE_RULE}</p>
        <div class="legend">#{page_legend(c).join("\n")}</div>
        #{page_maps(images).join("\n")}
      HTML
    end

    # Which two dumps, when, and how far apart.
    def diff_span(diff)
      older = diff.old
      newer = diff.new
      apart = format("%.1f", newer.header[:time] - older.header[:time])
      processes = diff.same_process? ? "" : " &#183; <b>different processes</b>: addresses are not comparable"
      "#{h(older.path)} (#{h(older.header[:time].utc)}) to #{h(newer.path)} (#{h(newer.header[:time].utc)}), " \
        "#{apart} s apart#{processes}"
    end

    def growth_rows(diff)
      g = diff.growth
      Diff::FIGURES.map do |f|
        counted = f.to_s.end_with?("count", "hblks")
        before = diff.old.summary[f]
        after = diff.new.summary[f]
        row([%(<span class="l">#{h(self.class.label(f))}</span>),
             h(counted ? count(before) : human_bytes(before)), h(counted ? count(after) : human_bytes(after)),
             h(counted ? signed_count(g[f]) : signed_bytes(g[f]))])
      end
    end

    def arena_rows(diff)
      diff.arenas.map do |a|
        growth = %i[arena in_use_bytes free_resident_bytes free_released_bytes].map { |k| h(signed_bytes(a[k])) }
        row(["<code>#{h(hex(a[:address]))}</code>#{a[:main] ? ' (main)' : ''}#{a[:new] ? ' (new)' : ''}", *growth])
      end
    end

    def size_class_rows(diff)
      diff.size_classes.first(20).map do |e|
        row([h(self.class.size_class_label(e[:size_class])), count(e[:old_count]), count(e[:new_count]),
             h(signed_count(e[:count_growth])),
             h(signed_bytes(e[:bytes_growth]))])
      end
    end

    PAGE_RULE = "Each page of the later dump, by what it holds now: <b>new in use</b> when it is resident and more " \
                "than half of its bytes are in use now, and were not before; <b>new free resident</b> when it is " \
                "resident and more than half of its bytes are free (in a bin, a cache or top) now, and were not " \
                "before, whatever it held then; <b>released</b> when it was resident and no longer is; <b>new page" \
                "</b> when the earlier dump did not have it and it is neither of the first two."

    PAGE_CHANGE_LABELS = { unchanged: "unchanged", new_in_use: "new in use", new_free_resident: "new free resident",
                           released: "released", new_page: "new page" }.freeze

    def page_legend(chunks)
      pal = Render.palette[:diff]
      Diff::DIFF_PAGE_STATES.each_with_index.map do |st, i|
        swatch = %(<span class="sw" style="background:#{pal[i]}"></span>)
        label = PAGE_CHANGE_LABELS.fetch(st) { st.to_s.tr("_", " ") }
        %(<span class="page-change" data-change="#{st}">#{swatch}#{h(label)}: #{count(chunks[:pages][st])} pages</span>)
      end
    end

    def page_maps(images)
      images.group_by { |im| im[:group] }.map do |group, ims|
        label = group == :mmapped ? "mmapped chunks" : "heap #{group}"
        imgs = ims.map do |im|
          %(<img class="map" src="#{h(im[:file])}" width="#{im[:width]}" height="#{im[:height]}" alt="#{h(label)}" />)
        end
        "<h3>#{h(label)}</h3><div class=\"maps\">#{imgs.join}</div>"
      end
    end

    def owners_section(diff)
      o = diff.owners
      return "" unless o

      top = lambda do |hash, title|
        lines = hash.first(15).map { |k, v| row([h(k), h(signed_bytes(v))]) }
        "<table><tr><th class=\"l\">#{h(title)}</th><th>growth</th></tr>#{lines.join}</table>"
      end
      who = diff.top_growth_owner
      most = who ? "<b>#{h(self.class.owner_label(who))}</b>, #{h(signed_bytes(who[2]))}" : "nothing"
      tables = [top.call(o[:by_type], "Ruby type"), top.call(o[:by_class], "class"),
                top.call(o[:by_data_type], "typed data")]
      tables << top.call(o[:by_module], "module") if o[:by_module]
      <<~HTML
        <h2 id="owners">Growth by owner</h2>
        <p>Grew most: #{most}. Native (no Ruby owner): #{h(signed_bytes(o[:native]))}.#{extra_growth(o)}</p>
        <div class="maps">#{tables.join(' ')}</div>
        #{holders_growth(diff)}
        #{sites_growth(diff)}
      HTML
    end

    # Which allocation sites grew (Diff#allocation_sites), where both dumps have them.
    def sites_growth(diff)
      return "" unless diff.site_source

      grew = diff.allocation_sites(limit: 10).select { |g| g[:growth_bytes].positive? }
      return "<p>No allocation site grew.</p>" if grew.empty?

      what, unit = grew.first[:source] == :malloc ? ["malloc blocks", "blocks"] : ["live objects", "objects"]

      lines = grew.map do |g|
        row([h(signed_bytes(g[:growth_bytes])), h(signed_count(g[:growth_count])),
             "<b>#{h(g[:site])}</b> #{h(g[:method])}",
             h(human_bytes(g[:bytes]))])
      end
      <<~HTML
        <h3>Which allocation site grew</h3>
        <p>The site whose #{what} grew most: <b>#{h(grew.first[:site])}</b> #{h(grew.first[:method])},
        #{h(signed_bytes(grew.first[:growth_bytes]))}#{grew.first[:estimated] ? ' (estimated from samples)' : ''}.</p>
        <table><tr><th>growth</th><th>#{unit}</th><th class="l">site</th><th>now</th></tr>
        #{lines.join}</table>
      HTML
    end

    # Which holders grew (Diff#retainers), where both dumps have the object graph.
    def holders_growth(diff)
      return "" unless diff.old.graph? && diff.new.graph?

      grew = diff.retainers(limit: 10).select { |g| g[:growth_bytes].positive? }
      return "<p>No holder of Ruby memory grew.</p>" if grew.empty?

      lines = grew.map do |g|
        row([h(signed_bytes(g[:growth_bytes])), h(signed_count(g[:growth_objects])),
             "<b>#{h(g[:root])}</b> (#{h(g[:class_name])})",
             h(g[:path].join(" › "))])
      end
      <<~HTML
        <h3>Which holder grew</h3>
        <p>The holder that grew most: <b>#{h(grew.first[:root])}</b> (#{h(grew.first[:class_name])}),
        #{h(signed_bytes(grew.first[:growth_bytes]))} that it alone keeps alive.</p>
        <table><tr><th>growth</th><th>objects</th><th class="l">holder</th><th class="l">path</th></tr>
        #{lines.join}</table>
      HTML
    end

    # Leaked memory and GC age, where both dumps have them.
    def extra_growth(owners)
      parts = []
      parts << " Leaked: #{h(signed_bytes(owners[:leaked]))}." if owners[:leaked].is_a?(Integer)
      if owners[:old].is_a?(Integer) && owners[:young].is_a?(Integer)
        parts << " Held by old objects: #{h(signed_bytes(owners[:old]))}, " \
                 "by young ones: #{h(signed_bytes(owners[:young]))}."
      end
      if owners[:garbage].is_a?(Integer) && !owners[:garbage].zero?
        parts << " By garbage awaiting the lazy sweep: #{h(signed_bytes(owners[:garbage]))}."
      end
      parts.join
    end

    FLEET_NOTE = "private = resident pages this worker alone maps; shared = pages still shared copy-on-write with " \
                 "the parent."

    def fleet_body(fleet)
      rows = fleet.workers.map do |w|
        row([h(w[:pid]), *Fleet::COLUMNS.map { |c| h(human_bytes(w[c])) }, h(File.basename(w[:path]))])
      end
      t = fleet.totals
      d = fleet.most_deviant
      reasons = self.class.deviation_reasons(fleet).map { |what, b| "#{h(what)} #{h(signed_bytes(b))}" }
      worker = "<b>pid #{h(d[:pid])}</b>, #{h(self.class.label(d[:figure]))} #{h(human_bytes(d[:value]))}"
      above = reasons.empty? ? "" : ". Above the median worker: #{reasons.join(', ')}"
      heads = Fleet::COLUMNS.map { |c| "<th>#{h(self.class.label(c))}</th>" }.join
      sums = Fleet::COLUMNS.map { |c| "<th>#{h(human_bytes(t[c]))}</th>" }.join
      <<~HTML
        <p>The worker that deviates most: #{worker}
        against a median of #{h(human_bytes(d[:median]))}#{above}.</p>
        <table><tr><th>pid</th>#{heads}<th class="l">dump</th></tr>
        #{rows.join("\n")}
        <tr><th>fleet</th>#{sums}<th></th></tr></table>
        <p class="sub">#{FLEET_NOTE}</p>
        #{fleet_owners(fleet)}
      HTML
    end

    OWNER_HEADS = %(<th>pid</th><th class="l">top Ruby types</th><th class="l">top classes</th>) +
                  %(<th class="l">top modules</th><th>native</th><th>leaked</th>)

    def fleet_owners(fleet)
      rows = fleet.dumps.map do |dump|
        o = self.class.owners_of(dump)
        list = ->(pairs) { pairs.map { |n, b| "#{h(n)} #{h(human_bytes(b))}" }.join(", ") }
        text = [o[:types], o[:classes], o[:modules]].map do |pairs|
          "<td class=\"l\">#{pairs.empty? ? '-' : list.call(pairs)}</td>"
        end
        "<tr><td>#{h(dump.header[:pid])}</td>#{text.join}<td>#{h(o[:native] ? human_bytes(o[:native]) : '-')}</td>" \
          "<td>#{h(o[:leaked] ? human_bytes(o[:leaked]) : '-')}</td></tr>"
      end
      <<~HTML
        <h2>Owners by worker</h2>
        <table><tr>#{OWNER_HEADS}</tr>
        #{rows.join("\n")}</table>
      HTML
    end
  end
end
