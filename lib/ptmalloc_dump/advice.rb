# frozen_string_literal: true

require_relative "format_helpers"

module PtmallocDump
  # Advice computed from a dump's figures. Every line states the number that triggers it and the
  # expected gain; nothing is advised without its figure.
  class Advice
    include FormatHelpers

    MIB = 1024 * 1024
    # The arenas MALLOC_ARENA_MAX is advised to.
    ARENA_MAX = 2
    # Each range's margins around its estimate, from spec/advice_calibration_spec.rb's runs (README
    # gives the measured ratios).
    ARENA_RANGE = (0.8..1.2).freeze
    # Threads that allocate at the same time need their free memory again at their common peak: sharing
    # arenas gives back only a share of what it gives threads that allocate in turn, a base plus so much
    # per extra arena, within ARENA_CONCURRENT_RANGE of it (spec/advice_calibration_spec.rb's concurrent
    # runs measured 0.04 of the in-turn estimate for 3 and 5 threads, 0.055 for 6, 0.05 to 0.09 for 8,
    # each yielding to the others every 64 blocks). The range starts at nothing: threads whose
    # allocations interleave closely (rounds of 64 blocks each, in lockstep, as the spec now runs them)
    # gained 0.02 to 0.11 of this estimate; beside other work the yielding runs gained 0.32 to 0.58 of
    # it, and once, on a busy machine, 1.55 (5 threads), which sets the top at twice the estimate.
    ARENA_CONCURRENT_BASE = 0.02
    ARENA_CONCURRENT_PER_ARENA = 0.0065
    ARENA_CONCURRENT_RANGE = (0.0..2.0).freeze
    TRIM_RANGE = (0.8..1.2).freeze
    TRIM_THRESHOLD_RANGE = (0.9..1.1).freeze
    # glibc's DEFAULT_TRIM_THRESHOLD and DEFAULT_MMAP_THRESHOLD (malloc/malloc.c), the least
    # MALLOC_TRIM_THRESHOLD_ advised.
    DEFAULT_TRIM_THRESHOLD = 128 * 1024
    # malloc.c's MINSIZE on 64-bit
    MINSIZE = 32

    # One piece of advice: `figure` is the number behind it (bytes unless `unit` says otherwise),
    # `gain` what acting on it could give back (bytes), `text` the sentence with both in it; `low` and
    # `high` the range the gain is expected in, where it was checked against a real run
    # (spec/advice_calibration_spec.rb), else nil; `env` the environment variables the line advises
    # setting (name => value, Strings) where it names a value, else nil; `in_turn`, for MALLOC_ARENA_MAX,
    # the gain and range where the threads allocate in turn rather than at the same time ({ gain:, low:,
    # high: }), else nil.
    Line = Struct.new(:topic, :figure, :unit, :gain, :text, :low, :high, :env, :in_turn) do
      def to_s
        text
      end
    end

    # What to do about a holder of Ruby memory that keeps growing.
    HOLDER_STEP = "if it is a cache, bound it (an LRU, an expiry); if it should be empty between requests, clear it"
    # What to do about free memory that other threads' arenas hold.
    ARENA_STEP = "MALLOC_ARENA_MAX=#{ARENA_MAX} makes threads share #{ARENA_MAX} arenas so they reuse each other's " \
                 "free memory"
    # What to do about whole free pages that stay resident.
    TRIM_STEP = "call malloc_trim(0) periodically, for example after a major GC"

    # @param dump [Dump]
    # @param exact [Boolean] give each byte figure in bytes too, beside its human unit ("1.5 MiB
    #   (1572864 B)"), as the single report and --summary do; false: the human unit alone
    def initialize(dump, exact: true)
      @dump = dump
      @s = dump.summary
      @a = dump.analysis
      @exact = exact
    end

    # The topics whose gains come out of the same free memory: acting on several gives back no more than
    # that memory.
    FREE_MEMORY_TOPICS = %i[small_free_chunks pinned_pages arena_max malloc_trim trim_threshold tcache].freeze
    # How the overlap line names each of them.
    TOPIC_NAMES = { small_free_chunks: "small free chunks", pinned_pages: "pinned pages",
                    arena_max: "MALLOC_ARENA_MAX", malloc_trim: "malloc_trim",
                    trim_threshold: "MALLOC_TRIM_THRESHOLD_", tcache: "tcaches" }.freeze

    # @param bytes [Integer] leaked bytes
    # @param in_use [Integer] bytes in use (arenas and mmapped chunks)
    # @return [Boolean] whether a leak is worth a line (and a finding)
    def self.notable_leak?(bytes, in_use)
      bytes >= 4 * MIB && bytes * 50 >= in_use
    end

    # @param bytes [Integer] what one holder retains
    # @param in_use [Integer] bytes in use in the arenas
    def self.notable_holder?(bytes, in_use)
      bytes >= 4 * MIB && bytes * 10 >= in_use
    end

    # @param small [Integer] free bytes in chunks smaller than a page
    # @param pinned [Integer] bytes of pages pinned by little live data
    # @param resident [Integer] resident malloc bytes
    def self.notable_fragmentation?(small, pinned, resident)
      [small, pinned].any? { |bytes| bytes >= 4 * MIB && bytes * 4 >= resident }
    end

    # @param est [Integer] what malloc_trim(0) would give back
    # @param resident [Integer] resident malloc bytes
    def self.notable_trim?(est, resident)
      est >= 4 * MIB && est * 10 >= resident
    end

    # @return [Array<Line>] in the order of what to do: leaks and retention, fragmentation, arenas, trim,
    #   then the rest; where lines draw on the same free memory, a last line says so with their combined gain
    def lines
      @lines ||= begin
        list = [leak, holder, small_free, pinned_pages, arenas, trim, trim_threshold, tcache, mmap_threshold].compact
        list + [together(list)].compact
      end
    end

    # What to do about leaked memory: free it where it was allocated, when the tracker ran in the
    # process; else how to find out where that was.
    # @return [String] a sentence or two, each ending with a full stop and a space
    def leak_step
      site = @dump.malloc_sites? && @dump.allocation_sites(limit: 10_000).max_by { |e| e[:leaked_bytes] }
      if site && site[:leaked_bytes].positive?
        return "Most was allocated at #{SiteLines.where(site)} (about #{human_bytes(site[:leaked_bytes])}): free " \
               "what that code allocates once it is done with it. "
      end

      "Run the process under ptmalloc-dump --track -- COMMAND (or with LD_PRELOAD=$(ptmalloc-dump " \
        "--preload-path)) and dump it again: that dump names where the leaked blocks were allocated. "
    end

    private

    def b(n)
      @exact ? "#{human_bytes(n)} (#{n} B)" : human_bytes(n)
    end

    def trim
      est = @a[:trim_estimate].sum
      return nil if est < MIB || est * 100 < @s[:resident_bytes]

      measured = @dump.trim_released&.sum
      checked = measured ? "; malloc_trim(0) run after the dump released #{b(measured)}" : ""
      low = (est * TRIM_RANGE.first).floor
      high = (est * TRIM_RANGE.last).ceil
      Line.new(:malloc_trim, est, :bytes, est,
               "malloc_trim(0) would return #{b(est)} of resident memory now (whole pages inside free chunks and the " \
               "main arena's top): #{TRIM_STEP}, to gain about " \
               "#{human_bytes(est)} (#{human_bytes(low)} to #{human_bytes(high)} of RSS)#{checked}.", low, high)
    end

    # MALLOC_ARENA_MAX=ARENA_MAX leaves ARENA_MAX arenas for every thread, the main one included. Threads
    # that allocate in turn then reuse each other's free memory, but each remaining arena still keeps
    # about as much free memory as one of today's extra arenas: the gain is the extra arenas' free
    # resident memory less ARENA_MAX arenas' worth of it, between the worth of the fullest and of the
    # emptiest arena. Threads that allocate at the same time (requests served at once) need the same
    # memory again at their common peak, shared arenas or not: there the gain is a small share of that
    # (ARENA_CONCURRENT_BASE and _PER_ARENA, measured). A dump cannot tell which the process does: the
    # line gives both, the estimate for threads at once (a server's), the other as `in_turn`.
    def arenas
      others = @s[:arenas].reject { |a| a[:main] }
      held = others.sum { |a| a[:free_resident_bytes] }
      return nil if others.size < ARENA_MAX || held < 4 * MIB

      free = others.map { |a| a[:free_resident_bytes] }
      turn = [held - ARENA_MAX * held / others.size, 0].max
      turn_low = ([held - ARENA_MAX * free.max, 0].max * ARENA_RANGE.first).floor
      turn_high = [(held - ARENA_MAX * free.min) * ARENA_RANGE.last, held].min.ceil
      return nil if turn_high < 4 * MIB

      est = (turn * (ARENA_CONCURRENT_BASE + ARENA_CONCURRENT_PER_ARENA * others.size)).round
      low = (est * ARENA_CONCURRENT_RANGE.first).floor
      high = (est * ARENA_CONCURRENT_RANGE.last).ceil
      Line.new(:arena_max, held, :bytes, est,
               "#{others.size + 1} arenas; the #{others.size} besides the main arena hold #{b(held)} free but " \
               "resident: #{ARENA_STEP}. Threads that allocate at the same time need that memory again at their " \
               "common peak, so expect about #{human_bytes(est)} less heap and RSS (#{human_bytes(low)} to " \
               "#{human_bytes(high)}); threads that allocate in turn reuse it: about #{human_bytes(turn)} " \
               "(#{human_bytes(turn_low)} to #{human_bytes(turn_high)}). Which holds here shows in one worker run " \
               "with it, compared with this dump (ptmalloc-visualize --compare).",
               low, high, { "MALLOC_ARENA_MAX" => ARENA_MAX.to_s }, { gain: turn, low: turn_low, high: turn_high })
    end

    # Lines whose gains come out of the same free memory: together they give back no more than it.
    def together(list)
      shared = list.select { |l| FREE_MEMORY_TOPICS.include?(l.topic) }
      return nil if shared.size < 2

      free = @s[:free_resident_bytes] + @s[:tcache_bytes]
      sum = shared.sum { |l| l.in_turn ? l.in_turn[:high] : l.high || l.gain }
      combined = [sum, free].min
      names = shared.map { |l| TOPIC_NAMES.fetch(l.topic) }
      names = "#{names[0..-2].join(', ')} and #{names.last}"
      more = sum > free ? ", not the #{human_bytes(sum)} they add up to" : ""
      Line.new(:together, free, :bytes, combined,
               "The lines above on #{names} overlap: the free memory they draw on is the same (#{b(free)} free but " \
               "resident, tcaches included), so together they give back at most #{human_bytes(combined)}#{more}.",
               nil, combined)
    end

    # free() gives back an arena's top only when the chunk it frees, once merged, is at least
    # FASTBIN_CONSOLIDATION_THRESHOLD (64 KiB; a chunk that joins top counts top in) and top is then at
    # least mp_.trim_threshold: systrim (main arena, by moving the break) or heap_trim (a thread arena's
    # newest heap) then release all of top but top_pad + MINSIZE, rounded down to pages (glibc 2.36
    # malloc/malloc.c _int_free and systrim, malloc/arena.c heap_trim). Freeing an mmapped chunk of up
    # to DEFAULT_MMAP_THRESHOLD_MAX (32 MiB) above the mmap threshold raises that to its size and the
    # trim threshold to twice it (__libc_free), so up to 64 MiB of top can stay resident.
    # MALLOC_TRIM_THRESHOLD_ fixes the threshold and, as any of the thresholds set (do_set_*), stops
    # both raises. The gain is each held top's resident pages above what trimming keeps, less the top
    # left after the last trim: below the advised value, so between all of it and that much less.
    def trim_threshold
      threshold = @dump.header[:trim_threshold]
      held = held_tops(threshold)
      big = held.select { |t| t[:resident] >= MIB }
      return nil if big.empty?

      advised = [DEFAULT_TRIM_THRESHOLD, 1 << Math.log2(big.map { |t| t[:size] }.min / 4).floor].max
      held = held.select { |t| t[:size] >= advised }
      releasable = held.sum { |t| t[:resident] }
      est = held.sum { |t| [t[:resident] - advised / 2, 0].max }
      return nil if est < MIB || est * 100 < @s[:resident_bytes]

      low = (held.sum { |t| [t[:resident] - advised, 0].max } * TRIM_THRESHOLD_RANGE.first).floor
      high = (releasable * TRIM_THRESHOLD_RANGE.last).ceil
      Line.new(:trim_threshold, releasable, :bytes, est,
               "#{held.size == 1 ? "An arena's top chunk holds" : "#{held.size} arenas' top chunks hold"} " \
               "#{b(releasable)} resident that free() keeps because #{held.size == 1 ? 'it is' : 'each is'} below " \
               "the trim threshold (#{human_bytes(threshold)}#{grown_note(threshold)}): " \
               "MALLOC_TRIM_THRESHOLD_=#{advised} makes free() give back any top it leaves at " \
               "#{human_bytes(advised)} or more#{thread_note(held)}, so expect about #{human_bytes(est)} less heap " \
               "and RSS (#{human_bytes(low)} to #{human_bytes(high)}), at the cost of a system call and fresh page " \
               "faults when top grows again.#{mmap_note}#{bins_note(releasable)}",
               low, high, { "MALLOC_TRIM_THRESHOLD_" => advised.to_s })
    end

    # The tops free() would trim under a lower threshold: below the current one (else the next free of
    # 64 KiB or more trims it anyway), in a heap free() can shrink, with their releasable resident bytes.
    def held_tops(threshold)
      ps = @dump.header[:page_size]
      pad = @dump.header[:top_pad]
      @dump.arenas.filter_map do |a|
        next if a.top_size >= threshold || a.top_size - MINSIZE - 1 <= pad

        heap = a.heaps.find { |h| h.range.cover?(a.top) }
        # systrim only moves the break: a main arena that went on in mmapped regions is not trimmed
        next unless heap && (heap.kind == (a.main? ? :sbrk : :mmap_heap))

        # in pages; systrim rounds to mp_.thp_pagesize instead with glibc.malloc.hugetlb=1 (2.35+), which
        # the dump does not record
        extra = (a.top_size - MINSIZE - 1 - pad) / ps * ps
        next if extra.zero?

        top_end = a.top + a.top_size
        { size: a.top_size, resident: present_bytes(heap, top_end - extra, top_end), main: a.main? }
      end
    end

    def present_bytes(heap, lo, hi)
      pages = @dump.pages[heap.index]
      ps = pages.page_size
      first = [(lo - pages.page_base) / ps, 0].max
      last = [(hi - pages.page_base) / ps, pages.size].min
      (first...last).count { |i| pages.flags.getbyte(i).anybits?(PageMap::PRESENT) } * ps
    end

    def grown_note(threshold)
      mmap = @dump.header[:mmap_threshold]
      return "" unless threshold == 2 * mmap && mmap > DEFAULT_TRIM_THRESHOLD

      ", grown from 128 KiB to twice the #{human_bytes(mmap)} mmapped block whose free raised it"
    end

    def mmap_note
      mmap = @dump.header[:mmap_threshold]
      if mmap <= DEFAULT_TRIM_THRESHOLD
        return " Setting it also stops the mmap threshold's growth (#{human_bytes(mmap)} now)."
      end

      " Setting it also stops the mmap threshold's growth: blocks over 128 KiB are then mmapped, where today's " \
        "threshold (#{human_bytes(mmap)}) puts those below it in the heap; MALLOC_MMAP_THRESHOLD_=#{mmap} keeps that."
    end

    def thread_note(held)
      held.all? { |t| t[:main] } ? "" : " (malloc_trim(0) never releases a thread arena's top)"
    end

    def bins_note(tops)
      in_bins = @s[:free_resident_bytes] - tops
      return "" if in_bins < MIB

      " It does not reach the other #{human_bytes(in_bins)} free but resident (in bins, tcaches and what top keeps): " \
        "malloc_trim(0) is the one for that."
    end

    def pinned_pages
      bytes = @a[:pinned_bytes]
      return nil if bytes < MIB && bytes * 20 < @s[:resident_bytes]

      Line.new(:pinned_pages, bytes, :bytes, bytes,
               "#{@a[:pinned_page_count]} pages (#{b(bytes)}) stay resident for less than 10% live data each: " \
               "fragmentation a compacting or size-segregated allocator (jemalloc) avoids; up to " \
               "#{human_bytes(bytes)} could be released.")
    end

    def small_free
      small = @a[:free_bytes_below_page]
      return nil if small < 4 * MIB || small * 4 < @s[:resident_bytes]

      Line.new(:small_free_chunks, small, :bytes, small,
               "#{b(small)} of free memory is in chunks smaller than a page, which no trim can release; it is reused " \
               "only by requests that fit. Fewer long-lived objects among short-lived ones (or jemalloc) would give " \
               "back up to #{human_bytes(small)}.")
    end

    def mmap_threshold
      threshold = @dump.header[:mmap_threshold]
      near = @dump.heaps.select { |h| h.kind == :mmapped_chunk && h.size < 2 * threshold }
      bytes = near.sum(&:size)
      return nil if near.size < 8

      Line.new(:mmap_threshold, near.size, :chunks, bytes,
               "#{near.size} mmapped chunks (#{b(bytes)}) are within twice the mmap threshold " \
               "(#{human_bytes(threshold)}): each malloc and free of them is an mmap and munmap. " \
               "MALLOC_MMAP_THRESHOLD_=#{2 * threshold} keeps them in the heap, saving those system calls for up to " \
               "#{human_bytes(bytes)} more heap.", nil, nil,
               { "MALLOC_MMAP_THRESHOLD_" => (2 * threshold).to_s })
    end

    # Ruby memory one named holder keeps alive (the object graph): where to look in the code.
    def holder
      return nil unless @dump.ruby && @dump.graph?

      r = @dump.retainers(limit: 20).find { |e| !e[:root].start_with?("(") }
      return nil unless r && self.class.notable_holder?(r[:retained_bytes], @s[:in_use_bytes])

      Line.new(:holder, r[:retained_bytes], :bytes, r[:retained_bytes],
               "#{r[:root]} (#{r[:class_name]}) alone keeps #{b(r[:retained_bytes])} of Ruby memory alive in " \
               "#{count(r[:retained_objects])} objects, reached through #{r[:path].join(' > ')}: #{HOLDER_STEP}. " \
               "That gives back up to #{human_bytes(r[:retained_bytes])}.")
    end

    # Memory nothing points at (the owners' classification): where it was allocated, when the tracker
    # ran in the process, else how to find out. Without Ruby's objects in the dump, what they own is
    # reached from no root either: no line then ({Findings} says how to tell).
    def leak
      leaked = @s.dig(:owners, :leaked)
      return nil unless @dump.ruby && leaked
      return nil unless self.class.notable_leak?(leaked[:bytes], @s[:in_use_bytes] + @s[:mmapped_bytes])

      Line.new(:leak, leaked[:bytes], :bytes, leaked[:bytes],
               "#{b(leaked[:bytes])} in #{count(leaked[:count])} blocks is leaked: nothing points at it any more. " \
               "#{leak_step}That gives back up to #{human_bytes(leaked[:bytes])}, and stops the growth.")
    end

    def tcache
      bytes = @s[:tcache_bytes]
      return nil if bytes < 8 * MIB

      Line.new(:tcache, bytes, :bytes, bytes,
               "Threads' tcaches hold #{b(bytes)} in #{@s[:tcache_count]} free chunks that no other thread can use: " \
               "a smaller GLIBC_TUNABLES=glibc.malloc.tcache_count would return up to #{human_bytes(bytes)} to the " \
               "arenas.")
    end
  end
end
