# frozen_string_literal: true

require_relative "../format_helpers"

module PtmallocDump
  # What a dump says about where memory goes, ranked by what to do about it: leaked memory first, then
  # what one named holder keeps alive, then fragmentation, free memory other arenas hold, and pages a
  # trim would give back; each a sentence with its figure, the next step and the report section that
  # holds the evidence: what the report's first screen and `--summary` lead with. A finding fills a
  # slot only where it stands out (the thresholds the advice uses, {Advice}): a healthy process fills
  # none. Figures that only describe the heap (the largest class, module, native holder, mmapped
  # chunks, Ruby's pages) are in {#all} and in the report's sections, never in {#top}.
  class Findings
    include FormatHelpers

    MIB = 1024 * 1024

    # `topic` names it, `bytes` is its figure, `text` says it, `anchor` is the id of the report section
    # with the evidence, `step` what to do next (one sentence, nil for a figure that only describes),
    # `rank` its place in what to do (lower first; nil: never in {#top}), `heap` the index of the heap
    # it is about ({Heap#index}), where it names one.
    Finding = Struct.new(:topic, :bytes, :text, :anchor, :step, :rank, :heap)

    # The order of what to do: leaks, then retention, fragmentation, arenas, trim; memory no root
    # reaches in a dump without Ruby's objects is not known to be leaked, and comes last.
    RANKS = %i[leaked holder fragmentation arenas trim unowned].each_with_index.to_h.freeze

    # @param dump [Dump]
    def initialize(dump)
      @dump = dump
      @s = dump.summary
    end

    # @param n [Integer]
    # @return [Array<Finding>] up to n findings that stand out, the first to act on first (by rank, then
    #   bytes); empty when nothing does
    def top(n = 3)
      all.select(&:rank).sort_by { |f| [f.rank, -f.bytes] }.first(n)
    end

    # @return [Array<Finding>] every finding that applies, those that stand out and those that only
    #   describe, in no particular order
    def all
      @all ||= [leaked, unknown_owners, fragmentation, arenas, trim, by_module, native, top_class, holder, garbage,
                mmapped, ruby_pages].compact.reject { |f| f.bytes.zero? }
    end

    # The one line a report says where nothing stands out.
    # @return [String]
    def nothing_line
      "Nothing stands out: no leak, no holder of a large share, and #{human_bytes(@s[:free_resident_bytes])} free " \
        "but resident (#{percent(@s[:free_resident_bytes], @s[:resident_bytes])} of resident malloc memory), too " \
        "little for advice."
    end

    private

    def advice
      @advice ||= Advice.new(@dump, exact: false)
    end

    def advice_line(topic)
      advice.lines.find { |l| l.topic == topic }
    end

    # The heap of one of the given arenas with the most free but resident pages.
    def freest_heap(arena_indexes)
      classes = @dump.analysis[:heap_page_classes]
      heaps = @dump.heaps.select { |h| h.arena && arena_indexes.include?(h.arena.index) }
      heaps.max_by { |h| classes[h.index].values_at(:free_resident, :pinned, :top).compact.sum }&.index
    end

    # A clause of the advice as a sentence of its own (its first letter up, the rest as it is).
    def sentence(clause)
      "#{clause[0].upcase}#{clause[1..]}."
    end

    def in_use_total
      @s[:in_use_bytes] + @s[:mmapped_bytes]
    end

    # Free memory in chunks smaller than a page, or pages pinned by little live data: no trim gives it back.
    def fragmentation
      a = @dump.analysis
      small = a[:free_bytes_below_page]
      pinned = a[:pinned_bytes]
      return nil unless Advice.notable_fragmentation?(small, pinned, @s[:resident_bytes])

      text = "#{human_bytes(small)} of the free memory is in chunks smaller than a page and " \
             "#{a[:pinned_page_count]} page(s) (#{human_bytes(pinned)}) stay resident for less than 10% live data: " \
             "fragmentation, which no trim can give back."
      step = "Keep long-lived objects apart from short-lived ones (allocate caches at boot, reuse buffers), or " \
             "run with jemalloc (LD_PRELOAD), which keeps sizes apart."
      bytes = Advice.notable_fragmentation?(small, 0, @s[:resident_bytes]) ? small : pinned
      Finding.new(:fragmentation, bytes, text, "fragmentation", step, RANKS[:fragmentation],
                  freest_heap(@s[:arenas].map { |e| e[:index] }))
    end

    def arenas
      line = advice_line(:arena_max)
      return nil unless line

      others = @s[:arenas].reject { |e| e[:main] }
      text = "#{human_bytes(line.figure)} is free but resident in the #{others.size} arenas besides the main one " \
             "(#{percent(line.figure, @s[:resident_bytes])} of resident malloc memory): each thread keeps its own."
      step = "Run one worker with MALLOC_ARENA_MAX=#{Advice::ARENA_MAX} and compare its dump with this one: about " \
             "#{human_bytes(line.gain)} less if its threads allocate at the same time, up to " \
             "#{human_bytes(line.in_turn[:gain])} if they allocate in turn."
      Finding.new(:arenas, line.figure, text, "arenas", step, RANKS[:arenas],
                  freest_heap(others.map { |e| e[:index] }))
    end

    def trim
      est = @dump.analysis[:trim_estimate].sum
      return nil unless Advice.notable_trim?(est, @s[:resident_bytes])

      per = @dump.analysis[:trim_estimate]
      text = "#{human_bytes(est)} of whole free pages is resident: malloc_trim(0) would give it back now " \
             "(#{percent(est, @s[:resident_bytes])} of resident malloc memory)."
      Finding.new(:trim, est, text, "reclaimable", sentence(Advice::TRIM_STEP), RANKS[:trim],
                  freest_heap([per.each_with_index.max_by { |b, _| b }&.last].compact))
    end

    # Memory nothing points at: leaked (a dump without Ruby's objects has none: see unknown_owners).
    def leaked
      o = @s[:owners]
      return nil unless o && o[:leaked] && o[:leaked][:bytes].positive?

      bytes = o[:leaked][:bytes]
      big = Array(o[:leaked_by_size]).max_by { |e| e[:bytes] }
      how = big ? ", most in #{big[:count]} block(s) of #{human_bytes(big[:size])}" : ""
      heap = big && big[:heap]

      text = "#{human_bytes(bytes)} in #{o[:leaked][:count]} block(s) is leaked: " \
             "nothing points at it#{how}." # where it was allocated is its next step (the advice's)
      rank = Advice.notable_leak?(bytes, in_use_total) ? RANKS[:leaked] : nil
      Finding.new(:leaked, bytes, text, "owners", advice.leak_step.strip, rank, heap)
    end

    # In-use memory whose holder this dump cannot tell (no Ruby objects: ruby: false, a skipped Ruby pass,
    # a dump from outside): what an in-process dump with the Ruby pass would add, not a leak.
    def unknown_owners
      return nil if @dump.ruby

      o = @s[:owners]
      bytes, what = if o && o[:unknown]
                      [o[:unknown][:bytes], " in #{o[:unknown][:count]} block(s) that no root reaches"]
                    else
                      [@dump.figures[:in_use], " in use"]
                    end
      text = "#{human_bytes(bytes)}#{what} has no known owner: #{@dump.no_ruby_reason}, so it is not known " \
             "which of it Ruby objects own, nor whether any of it leaks."
      step = "Dump in process with the Ruby pass (PtmallocDump.dump with ruby: true, the default): it tells Ruby " \
             "owners and their holders from leaked memory."
      rank = Advice.notable_leak?(bytes, in_use_total) ? RANKS[:unowned] : nil
      Finding.new(:unknown_owners, bytes, text, "owners", step, rank)
    end

    def by_module
      name, e = @s.dig(:ruby, :by_module)&.max_by { |_, v| v[:bytes] }
      return nil unless name

      text = "#{human_bytes(e[:bytes])} in #{e[:chunks]} chunk(s) is held by #{name} " \
             "(its code and the objects it owns)."
      Finding.new(:module, e[:bytes], text, "owners")
    end

    def native
      r = @s[:ruby]
      return nil unless r

      o = @s[:owners]
      if o && o[:anchored]
        name, bytes = Array(o[:anchored_by]).max_by { |_, b| b }
        by = name ? ", most by #{name} (#{human_bytes(bytes)})" : ""
        text = "#{human_bytes(o[:anchored][:bytes])} in #{o[:anchored][:count]} block(s) is held by native " \
               "code#{by}.#{site_of_owned(:anchored_bytes)}"
        return Finding.new(:anchored, o[:anchored][:bytes], text, "owners")
      end
      share = percent(r[:unattributed_bytes], @dump.figures[:in_use])
      text = "#{human_bytes(r[:unattributed_bytes])} in use is native: no Ruby object points at it " \
             "(#{share} of the memory in use)."
      Finding.new(:native, r[:unattributed_bytes], text, "owners")
    end

    # Where most of the leaked (or anchored) memory was allocated, when the tracker ran in the process.
    def site_of_owned(key)
      site = @dump.malloc_sites? && @dump.allocation_sites(limit: 10_000).max_by { |e| e[key] }
      return "" unless site && site[key].positive?

      " Most was allocated at #{SiteLines.where(site)} (about #{human_bytes(site[key])})."
    end

    # Where most of a class's traced memory was allocated, when the dump has allocation sites.
    def site_of_class(name)
      return "" unless @dump.allocation_sites?

      site = @dump.allocation_sites(limit: 1, class_name: name).first
      return "" unless site && site[:bytes].positive?

      " The largest share was allocated at #{SiteLines.where(site)} " \
        "(#{site[:estimated] ? 'about ' : ''}#{human_bytes(site[:bytes])})."
    end

    # The class whose live objects own the most: the bytes of garbage awaiting the lazy sweep are
    # said apart, and do not rank it (a class whose memory is mostly garbage is no leak).
    def top_class
      name, e = @s.dig(:ruby, :by_class)&.max_by { |_, v| v[:bytes] - v[:garbage_bytes].to_i }
      return nil unless name

      garbage = e[:garbage_bytes].to_i
      live = e[:bytes] - garbage
      text = if garbage.zero?
               "#{human_bytes(live)} in #{e[:chunks]} chunk(s) is owned by #{name} objects, the largest class."
             else
               "#{human_bytes(live)} is owned by live #{name} objects, the largest class; its dead objects awaiting " \
                 "the lazy sweep hold #{human_bytes(garbage)} more."
             end
      Finding.new(:class, live, text + site_of_class(name), "owners")
    end

    # The largest holder a person would name (a constant, a global, a variable: not a root of the VM's
    # own), from the object graph; it stands out where the advice names it.
    def holder
      return nil unless @dump.ruby && @dump.graph?

      r = @dump.retainers(limit: 20).find { |e| !e[:root].start_with?("(") }
      return nil unless r

      text = "#{human_bytes(r[:retained_bytes])} is retained by #{r[:root]} (#{r[:class_name]}, " \
             "#{count(r[:retained_objects])} objects): freeing or emptying it gives that back."
      rank = Advice.notable_holder?(r[:retained_bytes], @s[:in_use_bytes]) ? RANKS[:holder] : nil
      Finding.new(:holder, r[:retained_bytes], text, "retainers", sentence(Advice::HOLDER_STEP), rank)
    end

    def garbage
      r = @s[:ruby]
      return nil unless r && r[:garbage_bytes].to_i.positive?

      text = "#{human_bytes(r[:garbage_bytes])} in use belongs to #{r[:garbage_objects]} dead Ruby object(s) the " \
             "pending lazy sweep has not freed yet: no leak, freed as Ruby goes on allocating."
      Finding.new(:garbage, r[:garbage_bytes], text, "owners")
    end

    def mmapped
      return nil if @s[:hblks].zero?

      text = "#{human_bytes(@s[:hblkhd])} is in #{@s[:hblks]} mmapped chunk(s) (requests above the mmap threshold, " \
             "#{human_bytes(@dump.header[:mmap_threshold])})."
      Finding.new(:mmapped, @s[:hblkhd], text, "arenas")
    end

    def ruby_pages
      rss = @s[:rss]
      return nil unless rss && rss[:ruby_pages].to_i.positive?

      Finding.new(:ruby_pages, rss[:ruby_pages], "#{human_bytes(rss[:ruby_pages])} of the RSS is Ruby's object pages " \
                                                 "(#{percent(rss[:ruby_pages], rss[:total])}).", "rss")
    end
  end
end
