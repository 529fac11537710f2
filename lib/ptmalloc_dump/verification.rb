# frozen_string_literal: true

module PtmallocDump
  # The result of {Dump#verify}: every place where the figures computed from the chunk records differ
  # from what glibc itself reported (mallinfo2 and malloc_info, captured just before the walk), plus
  # the anomalies the walk recorded.
  class Verification
    MALLINFO_FIELDS = %i[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost].freeze

    # One figure that disagrees.
    Difference = Struct.new(:scope, :field, :glibc, :walk) do
      def to_s
        "#{scope} #{field}: glibc says #{glibc.inspect}, the walk found #{walk.inspect}"
      end
    end

    # @return [Array<Difference>]
    attr_reader :differences
    # @return [Array<Anomaly>]
    attr_reader :anomalies
    # @return [Array<Integer>] indices of arenas whose figures all agree with malloc_info
    attr_reader :consistent_arenas
    # @return [Array<String>] figures that differ for a reason glibc itself explains (not counted
    #   as differences)
    attr_reader :notes

    # Anomaly kinds that come from reading another thread's tcache while it runs, not from the
    # arenas (which are walked under their locks).
    TCACHE_KINDS = %i[tcache_count tcache_key list_not_chunk duplicate].freeze

    def initialize(dump)
      @dump = dump
      @differences = []
      @anomalies = dump.anomalies
      @consistent_arenas = []
      @notes = []
      if dump.header[:oracles_captured]
        check_mallinfo
        check_malloc_info
      elsif dump.header[:source] != :self
        @notes << "glibc's mallinfo2 and malloc_info cannot be called in another process: nothing to compare the walk with"
      else
        @differences << Difference.new("glibc", :counters, "not captured: a list of the heap is corrupt and glibc would crash reading it", nil)
      end
    end

    # @return [Array<Hash>] per arena: :index, :address, :consistent (its figures equal malloc_info's)
    #   and :anomalies (how many the walk recorded in it)
    def arenas
      @dump.arenas.map do |a|
        { index: a.index, address: a.address, consistent: arena_consistent?(a.index),
          anomalies: anomalies.count { |x| x.arena == a.index } }
      end
    end

    # @return [Array<Anomaly>] anomalies found in the arenas themselves (each walked under its lock)
    def arena_anomalies
      anomalies.select(&:arena)
    end

    # @return [Array<Anomaly>] anomalies from reading threads' tcaches (which can change meanwhile)
    def tcache_anomalies
      anomalies.reject(&:arena)
    end

    # @return [Boolean] true when nothing differs and no anomaly was recorded
    def ok?
      differences.empty? && anomalies.empty?
    end

    # @return [Boolean] whether arena i's own figures all agree with malloc_info
    def arena_consistent?(index)
      consistent_arenas.include?(index)
    end

    def to_s
      return (["verified: the walk reproduces #{mallinfo_name} and malloc_info exactly"] + notes).join("\n") if ok?

      (differences.map(&:to_s) + anomalies.map { |a| "anomaly: #{a}" } + notes).join("\n")
    end

    # @return [String] the glibc counter the dump captured: "mallinfo2", or "mallinfo" before glibc 2.33
    def mallinfo_name
      @dump.header[:mallinfo_32bit] ? "mallinfo" : "mallinfo2"
    end

    private

    def differ(scope, field, glibc, walk)
      @differences << Difference.new(scope, field, glibc, walk) unless glibc == walk
    end

    def check_mallinfo
      mi = @dump.header[:mallinfo2]
      s = @dump.summary
      # glibc before 2.33 has only mallinfo(), whose int fields keep the low 32 bits
      mask = @dump.header[:mallinfo_32bit] ? 0xffff_ffff : -1
      MALLINFO_FIELDS.each do |f|
        next if f == :hblkhd && mremap_overcount?(mi, s)

        differ(mallinfo_name, f, mi[f], s[f] & mask)
      end
    end

    # glibc 2.43's mremap_chunk adds new_size - size - offset to mp_.mmapped_mem, 16 bytes
    # (CHUNK_HDR_SZ) more than the mapping grew, and nothing takes them back: hblkhd then exceeds the
    # mappings by 16 per remap. Explained when the mappings are all there (hblks agrees).
    def mremap_overcount?(mi, s)
      extra = mi[:hblkhd] - s[:hblkhd]
      return false unless @dump.header[:mremap_overcounts] && extra.positive? && (extra % 16).zero? && mi[:hblks] == s[:hblks]

      @notes << "#{mallinfo_name} hblkhd: glibc says #{mi[:hblkhd]}, the mappings hold #{s[:hblkhd]}: " \
                "glibc's mremap_chunk counted #{extra / 16} remap(s) 16 bytes too large"
      true
    end

    def check_malloc_info
      info = @dump.malloc_info_figures
      arenas = @dump.summary[:arenas]
      differ("malloc_info", :heap_count, info.heaps.size, arenas.size)
      info.heaps.zip(arenas).each do |heap, arena|
        next unless heap && arena

        before = @differences.size
        scope = "arena #{arena[:index]} (0x#{arena[:address].to_s(16)})"
        differ(scope, :fast_count, heap.fast_count, arena[:fastbin_count])
        differ(scope, :fast_size, heap.fast_size, arena[:fastbin_bytes])
        differ(scope, :rest_count, heap.rest_count, arena[:ordblks])
        differ(scope, :rest_size, heap.rest_size, arena[:malloc_info_rest_size])
        differ(scope, :system_current, heap.system_current, arena[:arena])
        differ(scope, :fastbins, histogram(heap.fastbins), histogram(arena[:fastbins], fast: true))
        differ(scope, :bins, histogram(heap.bins), histogram(arena[:bins]))
        differ(scope, :unsorted, heap.unsorted && histogram([heap.unsorted]), arena[:unsorted].empty? ? nil : histogram(arena[:unsorted]))
        @consistent_arenas << arena[:index] if @differences.size == before
      end
    end

    # malloc_info reports a fastbin as from = size - 15, to = size, total = count * size.
    def histogram(entries, fast: false)
      entries.map do |e|
        from = fast ? e[:to] - 15 : e[:from]
        [from, e[:to], e[:total], e[:count]]
      end
    end
  end
end
