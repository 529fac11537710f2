# frozen_string_literal: true

require_relative "../format_helpers"

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
      (process_lines + rss_lines + totals_lines + arena_lines + verify_lines + advice_lines).join("\n") << "\n"
    end

    private

    def process_lines
      [format("ptmalloc_dump of pid %d at %s, glibc %s (main_arena %s, symbols: %s), %d threads",
              @h[:pid], @h[:time].utc.strftime("%Y-%m-%d %H:%M:%S UTC"), @h[:glibc_version],
              hex(@h[:main_arena]), @h[:symbol_source], @h[:thread_count]), ""]
    end

    def totals_lines
      s = @s
      free = s[:free_bytes]
      bins = s[:fordblks] - s[:top_bytes] - s[:fastbin_bytes]
      [
        row("malloc heap", "#{human_bytes(s[:arena])} (#{s[:arena]} B) in #{s[:arena_count]} arena(s), #{s[:heap_count] - s[:hblks]} heap(s)"),
        row("mmapped", "#{human_bytes(s[:hblkhd])} in #{s[:hblks]} chunk(s)"),
        row("in use", "#{human_bytes(s[:in_use_bytes])} (#{s[:in_use_bytes]} B) in #{s[:in_use_count]} chunks (#{percent(s[:in_use_bytes], s[:arena])} of the heap)"),
        row("free", "#{human_bytes(free)}: tcache #{human_bytes(s[:tcache_bytes])} (#{s[:tcache_count]}), " \
                    "fastbins #{human_bytes(s[:fastbin_bytes])} (#{s[:fastbin_count]}), bins #{human_bytes(bins)}, " \
                    "top #{human_bytes(s[:top_bytes])}"),
        row("free, resident", "#{human_bytes(s[:free_resident_bytes])} (#{s[:free_resident_bytes]} B): still in RAM, not in use"),
        row("free, released", human_bytes(s[:free_released_bytes])),
        row("largest free", human_bytes(s[:largest_free])),
        row("resident", "#{human_bytes(s[:resident_bytes])} (#{human_bytes(s[:shared_bytes])} still shared with a parent), " \
                        "swapped #{human_bytes(s[:swapped_bytes])}, not resident #{human_bytes(s[:absent_bytes])}"),
        row("ruby owners", ruby_text),
        ""
      ]
    end

    def ruby_text
      r = @s[:ruby]
      return "#{human_bytes(r[:owned_bytes])} owned by #{r[:objects]} Ruby objects, #{human_bytes(r[:unattributed_bytes])} native" if r
      return "none: the dump was taken with ruby: false" unless @h[:ruby_layer] == :skipped

      "none: the Ruby pass was skipped: #{@h[:ruby_layer_reason]}"
    end

    # The whole RSS by part, and the Ruby-owned bytes by GC age (Dump#rss, RubyHeap#summary).
    def rss_lines
      lines = []
      if (r = @s[:rss])
        parts = %i[malloc_in_use malloc_free_resident malloc_metadata mmapped_chunks ruby_pages stacks file_backed other_anonymous]
        lines << "RSS #{human_bytes(r[:total])} = " + parts.map { |p| "#{p.to_s.tr('_', ' ')} #{human_bytes(r[p])}" }.join(" + ") +
                 " (VmRSS #{human_bytes(r[:vm_rss])})"
      end
      if (ruby = @s[:ruby]) && ruby[:young_bytes]
        lines << "Ruby-owned by GC age: old #{human_bytes(ruby[:old_bytes])}, young #{human_bytes(ruby[:young_bytes])}" +
                 (@h.dig(:gc, :full_gc) ? " (after a full GC)" : " (young objects may be garbage not yet collected)")
      end
      lines.empty? ? lines : lines << ""
    end

    def row(label, text)
      format("%-16s %s", label, text)
    end

    def arena_lines
      lines = [format("%-5s %-16s %10s %10s %12s %10s %7s", "arena", "address", "heap", "in use", "free resident", "top", "chunks")]
      @s[:arenas].each do |a|
        lines << format("%-5s %-16s %10s %10s %12s %10s %7d", "#{a[:index]}#{a[:main] ? '*' : ''}", hex(a[:address]),
                        human_bytes(a[:arena]), human_bytes(a[:in_use_bytes]), human_bytes(a[:free_resident_bytes]),
                        human_bytes(a[:top_bytes]), a[:chunk_count])
      end
      lines << ""
    end

    def advice_lines
      lines = Advice.new(@dump).lines
      return ["", "advice: none: no figure crosses a threshold"] if lines.empty?

      ["", "advice:"] + lines.map { |l| "- #{l.text}" }
    end

    def verify_lines
      v = @dump.verify
      return ["verify: #{v}"] if v.ok?

      ["verify: #{v.differences.size} difference(s), #{v.anomalies.size} anomaly(ies)"] +
        v.to_s.lines.first(20).map { |l| "  #{l.chomp}" }
    end
  end
end
