# frozen_string_literal: true

require_relative "../format_helpers"
require_relative "findings"

module PtmallocDump
  # The plain-text summary of a dump: what `ptmalloc-visualize --summary` and the demo print.
  class TextSummary
    include FormatHelpers

    def initialize(dump)
      @dump = dump
      @s = dump.summary
      @h = dump.header
    end

    # @return [String]
    def to_s
      parts = process_lines + findings_lines + totals_lines + rss_lines + owner_lines + arena_lines + verify_lines +
              advice_lines
      parts.join("\n") << "\n"
    end

    private

    def process_lines
      [format("ptmalloc_dump of pid %d at %s, glibc %s (main_arena %s, symbols: %s), %d thread%s",
              @h[:pid], @h[:time].utc.strftime("%Y-%m-%d %H:%M:%S UTC"), @h[:glibc_version],
              hex(@h[:main_arena]), @h[:symbol_source], @h[:thread_count], @h[:thread_count] == 1 ? "" : "s"),
       *snapshot_line, ""]
    end

    # What a fork snapshot's process paused for, and who recorded its Ruby heap.
    def snapshot_line
      snap = @h[:snapshot]
      return [] unless snap

      ruby = { child: "; its Ruby heap recorded by the snapshot process",
               parent: format("; its Ruby heap recorded by itself before the fork (%.1f ms)",
                              snap[:ruby_pass_ns] / 1e6) }
      [format("fork snapshot: the process paused %.1f ms (%.1f ms before the fork, %.1f ms the fork)%s",
              snap[:pause_ns] / 1e6, snap[:before_fork_ns] / 1e6, snap[:fork_ns] / 1e6,
              ruby.fetch(snap[:ruby_pass], ""))]
    end

    def totals_lines
      s = @s
      f = @dump.figures
      free = s[:free_bytes]
      bins = s[:fordblks] - s[:top_bytes] - s[:fastbin_bytes]
      heaps = s[:heap_count] - s[:hblks]
      [
        row("malloc heap",
            "#{human_bytes(f[:malloc_heap])} (#{f[:malloc_heap]} B): #{human_bytes(f[:arena_bytes])} in " \
            "#{s[:arena_count]} arena(s), #{heaps} heap(s), and the mmapped chunks"),
        row("mmapped", "#{human_bytes(f[:mmapped_chunks])} in #{f[:mmapped_chunk_count]} chunk(s)"),
        row("in use", "#{human_bytes(f[:in_use])} (#{f[:in_use]} B), #{percent(f[:in_use], f[:malloc_heap])} of the " \
                      "malloc heap: #{human_bytes(f[:in_use_arenas])} in #{f[:in_use_arena_count]} chunks of the " \
                      "arenas and the mmapped chunks"),
        row("free", "#{human_bytes(free)}: tcache #{human_bytes(s[:tcache_bytes])} (#{s[:tcache_count]}), " \
                    "fastbins #{human_bytes(s[:fastbin_bytes])} (#{s[:fastbin_count]}), bins #{human_bytes(bins)}, " \
                    "top #{human_bytes(s[:top_bytes])}"),
        row("free, resident",
            "#{human_bytes(f[:free_resident])} (#{f[:free_resident]} B): still in RAM, not in use"),
        row("free, released", human_bytes(s[:free_released_bytes])),
        row("largest free", human_bytes(s[:largest_free])),
        row("resident", "#{human_bytes(s[:resident_bytes])} (#{sharing_text(s)}), " \
                        "swapped #{human_bytes(s[:swapped_bytes])}, not resident #{human_bytes(s[:absent_bytes])}" \
                        "#{page_size_text}"),
        row("ruby owners", ruby_text),
        ""
      ]
    end

    # Residency is counted in whole pages: said where they are not the usual 4 KiB (arm64 kernels with
    # 16 KiB or 64 KiB pages).
    def page_size_text
      ps = @dump.header[:page_size]
      ps == 4096 ? "" : ", in #{human_bytes(ps)} pages"
    end

    def sharing_text(sum)
      shared = "#{human_bytes(sum[:shared_bytes])} still shared with another process"
      unknown = sum[:sharing_unknown_bytes]
      return shared if unknown.zero?
      return "whether shared with another process is not known" if unknown == sum[:resident_bytes]

      "#{shared}, #{human_bytes(unknown)} not known"
    end

    def ruby_text
      r = @s[:ruby]
      if r
        garbage = if r[:garbage_bytes].to_i.positive?
                    " (#{human_bytes(r[:garbage_bytes])} of it by garbage awaiting the lazy sweep)"
                  else
                    ""
                  end
        # owned, the object pages where they are malloc chunks (Ruby 2.7 and 3.0) and native add up to
        # what is in use in the arenas and in mmapped chunks
        pages = r[:ruby_pages_in_malloc_bytes].to_i
        pages_text = pages.positive? ? ", #{human_bytes(pages)} their object pages" : ""
        return "#{human_bytes(r[:owned_bytes])} of the #{human_bytes(@dump.figures[:in_use])} in use owned " \
               "by #{r[:objects]} Ruby objects#{garbage}#{pages_text}, #{human_bytes(r[:unattributed_bytes])} native"
      end

      "none: #{@dump.no_ruby_reason}"
    end

    # Each finding that stands out, the first to act on first, with its next step; else one line.
    def findings_lines
      findings = Findings.new(@dump)
      top = findings.top(3)
      return ["what stands out: nothing. #{findings.nothing_line}", ""] if top.empty?

      items = top.each_with_index.flat_map { |f, i| ["#{i + 1}. #{f.text}", "   next: #{f.step}"] }
      ["what stands out:", *items, ""]
    end

    # the RSS parts are resident bytes: the malloc ones say so, apart from the heap's own figures
    RSS_LABELS = {
      malloc_in_use: "in use, resident", malloc_free_resident: "free, resident", malloc_metadata: "malloc metadata",
      mmapped_chunks: "mmapped, resident", ruby_pages: "Ruby pages", stacks: "thread stacks",
      file_backed: "mapped files",
      other_anonymous: "other anonymous", allocation_tracking: "tracker tables", dump_scratch: "dump scratch"
    }.freeze

    # " ± 17.2 MiB" when the RSS figures are approximate, else ""
    def plus_minus(rss)
      rss[:error] ? " ± #{human_bytes(rss[:error])}" : ""
    end

    # The RSS by part, where the dump accounts it (dumps with a mappings section).
    def rss_lines
      rss = @s[:rss]
      return [row("rss", "not accounted: this dump has no mappings section"), ""] unless rss

      vm = rss[:vm_rss] ? ", VmRSS #{human_bytes(rss[:vm_rss])} (#{rss[:vm_rss]} B)" : ""
      lines = [row("rss", "#{human_bytes(rss[:total])}#{plus_minus(rss)} (#{rss[:total]} B)#{vm}")]
      if rss[:error]
        lines << "  approximate: the process's memory moved while the dump read its smaps and page residency, " \
                 "by up to #{human_bytes(rss[:error])}"
      end
      RSS_LABELS.each do |k, label|
        next if k == :allocation_tracking && !@dump.malloc_sites?

        if k == :ruby_pages && !@dump.ruby
          lines << format("  %-17s %s", label, "not recorded (no Ruby objects): counted in other anonymous")
          next
        end
        next if rss[k].to_i.zero?

        lines << format("  %-17s %10s %6s", label, human_bytes(rss[k].to_i), percent(rss[k].to_i, rss[:total]))
        next unless k == :file_backed

        Array(rss[:files]).first(3).each do |f|
          lines << format("    %-24s %10s", File.basename(f[:path].to_s), human_bytes(f[:bytes]))
        end
      end
      lines << ""
    end

    # Who owns the memory in use: Ruby by type, class and defining module; native by anchor, and leaked.
    def owner_lines
      r = @s[:ruby]
      return unknown_owner_lines unless r

      top = ->(h) { h.first(5).map { |name, e| "#{name} #{human_bytes(e[:bytes])}" }.join(", ") }
      lines = ["ruby owners:",
               format("  %-16s %s", "by type", top.call(r[:by_type])),
               format("  %-16s %s", "by class", top.call(r[:by_class]))]
      lines << format("  %-16s %s", "by typed data", top.call(r[:by_data_type])) unless r[:by_data_type].empty?
      lines << format("  %-16s %s", "by module", top.call(r[:by_module])) if r[:by_module]
      if r[:old_bytes]
        lines << format("  %-16s %s old, %s young, %s garbage awaiting the lazy sweep", "by GC age",
                        human_bytes(r[:old_bytes]), human_bytes(r[:young_bytes]), human_bytes(r[:garbage_bytes].to_i))
      end
      if (o = @s[:owners])
        by = Array(o[:anchored_by]).max_by(3) { |_, b| b }.map { |n, b| ", #{n} #{human_bytes(b)}" }.join
        lines << format("  %-16s %s in %d block(s)%s", "anchored", human_bytes(o.dig(:anchored, :bytes)),
                        o.dig(:anchored, :count), by)
        lines << interior_line(o)
        lines << format("  %-16s %s in %d block(s)", "leaked", human_bytes(o.dig(:leaked, :bytes)),
                        o.dig(:leaked, :count))
      end
      lines.concat(holder_lines).concat(site_lines) << ""
    end

    # A dump without Ruby objects: what roots hold, and that the rest has no known owner (not leaked).
    def unknown_owner_lines
      lines = ["owners:", format("  %-16s not known: %s", "ruby owners", @dump.no_ruby_reason)]
      if (o = @s[:owners])
        lines << format("  %-16s %s in %d block(s)", "anchored", human_bytes(o.dig(:anchored, :bytes)),
                        o.dig(:anchored, :count))
        lines << interior_line(o)
        lines << format("  %-16s %s in %d block(s) no root reaches (a Ruby object's, or leaked: an in-process " \
                        "dump with ruby: true tells which)", "no known owner", human_bytes(o.dig(:unknown, :bytes)),
                        o.dig(:unknown, :count))
      end
      lines << ""
    end

    def interior_line(owners)
      format("  %-16s %s in %d block(s) reached only through a pointer into their middle", "held (interior)",
             human_bytes(owners.dig(:interior, :bytes)), owners.dig(:interior, :count))
    end

    # Where it was allocated: the five largest sites, when the dump has them.
    def site_lines
      return [] unless @dump.malloc_sites? || (@dump.ruby && @dump.allocation_sites?)

      @dump.allocation_sites(limit: 5).map.with_index do |s, i|
        format("  %-16s %s", i.zero? ? "allocated at" : "", SiteLines.line(s))
      end
    end

    # Who keeps it alive: the five largest holders, or why the dump cannot say.
    def holder_lines
      return [format("  %-16s not known: %s", "kept alive by", @dump.no_graph_reason)] unless @dump.graph?

      @dump.retainers(limit: 5).map.with_index do |r, i|
        format("  %-16s %s", i.zero? ? "kept alive by" : "", RetainerLines.line(r))
      end
    end

    def row(label, text)
      format("%-16s %s", label, text)
    end

    def arena_lines
      lines = [format("%-5s %-16s %10s %10s %12s %10s %7s",
                      "arena", "address", "heap", "in use", "free resident", "top", "chunks")]
      @s[:arenas].each do |a|
        lines << format("%-5s %-16s %10s %10s %12s %10s %7d", "#{a[:index]}#{a[:main] ? '*' : ''}", hex(a[:address]),
                        human_bytes(a[:arena]), human_bytes(a[:in_use_bytes]), human_bytes(a[:free_resident_bytes]),
                        human_bytes(a[:top_bytes]), a[:chunk_count])
      end
      lines << ""
    end

    def advice_lines
      lines = Advice.new(@dump).lines
      return ["", "advice: none: no figure crosses a threshold for it"] if lines.empty?

      ["", "advice:"] + lines.map { |l| "- #{l.text}" }
    end

    def verify_lines
      v = @dump.verify
      return ["verify: #{v}"] unless v.status == :differs

      ["verify: #{v.differences.size} difference(s), #{v.anomalies.size} anomaly(ies)"] +
        v.to_s.lines.first(20).map { |l| "  #{l.chomp}" }
    end
  end
end
