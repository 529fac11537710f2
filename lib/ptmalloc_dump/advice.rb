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
    ARENA_RANGE = (0.8..1.2)
    TRIM_RANGE = (0.8..1.2)

    # One piece of advice: `figure` is the number behind it (bytes unless `unit` says otherwise),
    # `gain` what acting on it could give back (bytes), `text` the sentence with both in it; `low` and
    # `high` the range the gain is expected in, where it was checked against a real run
    # (spec/advice_calibration_spec.rb), else nil.
    Line = Struct.new(:topic, :figure, :unit, :gain, :text, :low, :high) do
      def to_s
        text
      end
    end

    def initialize(dump)
      @dump = dump
      @s = dump.summary
      @a = dump.analysis
    end

    # @return [Array<Line>]
    def lines
      @lines ||= [trim, arenas, pinned, small_free, mmap_threshold, tcache].compact
    end

    private

    def b(n)
      "#{human_bytes(n)} (#{n} B)"
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
               "main arena's top): call it periodically, for example after a major GC, to gain about #{human_bytes(est)} " \
               "(#{human_bytes(low)} to #{human_bytes(high)} of RSS)#{checked}.", low, high)
    end

    # MALLOC_ARENA_MAX=ARENA_MAX leaves ARENA_MAX arenas for every thread, the main one included: the
    # threads of the extra arenas then reuse each other's free memory, but each remaining arena still
    # keeps about as much free memory as one of today's extra arenas. So the gain is the extra arenas'
    # free resident memory less ARENA_MAX arenas' worth of it: less than all of it (the upper bound,
    # what the advice once promised), between the worth of the fullest and of the emptiest arena.
    def arenas
      others = @s[:arenas].reject { |a| a[:main] }
      held = others.sum { |a| a[:free_resident_bytes] }
      return nil if others.size < ARENA_MAX || held < 4 * MIB

      free = others.map { |a| a[:free_resident_bytes] }
      est = [held - ARENA_MAX * held / others.size, 0].max
      low = ([held - ARENA_MAX * free.max, 0].max * ARENA_RANGE.first).floor
      high = [(held - ARENA_MAX * free.min) * ARENA_RANGE.last, held].min.ceil
      return nil if high < 4 * MIB

      Line.new(:arena_max, held, :bytes, est,
               "#{others.size + 1} arenas; the #{others.size} besides the main arena hold #{b(held)} free but resident: " \
               "MALLOC_ARENA_MAX=#{ARENA_MAX} makes threads share #{ARENA_MAX} arenas so they reuse each other's free memory; " \
               "each arena left keeps some, so expect about #{human_bytes(est)} less heap and RSS " \
               "(#{human_bytes(low)} to #{human_bytes(high)}; all #{human_bytes(held)} only if every thread's free memory were reused).",
               low, high)
    end

    def pinned
      bytes = @a[:pinned_bytes]
      return nil if bytes < MIB && bytes * 20 < @s[:resident_bytes]

      Line.new(:fragmentation, bytes, :bytes, bytes,
               "#{@a[:pinned_page_count]} pages (#{b(bytes)}) stay resident for less than 10% live data each: " \
               "fragmentation a compacting or size-segregated allocator (jemalloc) avoids; up to #{human_bytes(bytes)} " \
               "could be released.")
    end

    def small_free
      small = @a[:free_bytes_below_page]
      return nil if small < 4 * MIB || small * 4 < @s[:resident_bytes]

      Line.new(:small_free_chunks, small, :bytes, small,
               "#{b(small)} of free memory is in chunks smaller than a page, which no trim can release; it is reused only by " \
               "requests that fit. Fewer long-lived objects among short-lived ones (or jemalloc) would give back up to " \
               "#{human_bytes(small)}.")
    end

    def mmap_threshold
      threshold = @dump.header[:mmap_threshold]
      near = @dump.heaps.select { |h| h.kind == :mmapped_chunk && h.size < 2 * threshold }
      bytes = near.sum(&:size)
      return nil if near.size < 8

      Line.new(:mmap_threshold, near.size, :chunks, bytes,
               "#{near.size} mmapped chunks (#{b(bytes)}) are within twice the mmap threshold (#{human_bytes(threshold)}): " \
               "each malloc and free of them is an mmap and munmap. MALLOC_MMAP_THRESHOLD_=#{2 * threshold} keeps them " \
               "in the heap, saving those system calls for up to #{human_bytes(bytes)} more heap.")
    end

    def tcache
      bytes = @s[:tcache_bytes]
      return nil if bytes < 8 * MIB

      Line.new(:tcache, bytes, :bytes, bytes,
               "Threads' tcaches hold #{b(bytes)} in #{@s[:tcache_count]} free chunks that no other thread can use: " \
               "a smaller GLIBC_TUNABLES=glibc.malloc.tcache_count would return up to #{human_bytes(bytes)} to the arenas.")
    end
  end
end
