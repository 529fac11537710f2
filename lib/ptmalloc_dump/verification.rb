# frozen_string_literal: true

module PtmallocDump
  # The result of {Dump#verify}: every place where the figures computed from the chunk records differ
  # from what glibc itself reported (mallinfo2 and malloc_info, captured right after the walk, or
  # given by the caller for a dump from outside), plus the anomalies the walk recorded.
  class Verification
    MALLINFO_FIELDS = %i[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost].freeze
    # the glibc release that added mallinfo2()
    MALLINFO2_SINCE = Gem::Version.new("2.33")

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
    # @return [Array<String>] the glibc reports the walk was compared with ("mallinfo2" (or
    #   "mallinfo"), "malloc_info"); empty when there was none (a dump from outside, no oracles given)
    attr_reader :compared

    # Anomaly kinds that come from reading another thread's tcache while it runs, not from the
    # arenas (which are walked under their locks).
    TCACHE_KINDS = %i[tcache_count tcache_key list_not_chunk duplicate].freeze

    # @param dump [Dump]
    # @param mallinfo2 [Hash{Symbol=>Integer}, nil] glibc's counters taken by the process itself (see
    #   {Dump#verify}), keyed by mallinfo2's field names; the fields given are compared
    # @param malloc_info [String, nil] malloc_info()'s XML taken by the process itself
    # @raise [ArgumentError] when mallinfo2 names a field mallinfo2 does not have
    # @raise [FormatError] when malloc_info is not malloc_info() output
    def initialize(dump, mallinfo2: nil, malloc_info: nil)
      @dump = dump
      @differences = []
      @anomalies = dump.anomalies
      @consistent_arenas = []
      @notes = []
      @compared = []
      if mallinfo2 || malloc_info
        given(mallinfo2, malloc_info)
      elsif dump.header[:oracles_captured]
        check_mallinfo(dump.header[:mallinfo2], dump.header[:mallinfo_32bit] ? 0xffff_ffff : -1, MALLINFO_FIELDS)
        check_malloc_info(dump.malloc_info_figures)
      elsif dump.header[:source] != :self
        @notes << "glibc's #{mallinfo_name} and malloc_info cannot be called in another process: nothing to " \
                  "compare the walk with"
      elsif dump.header[:oracles_off]
        @notes << "glibc's #{mallinfo_name} and malloc_info were not called (oracles: false): nothing to compare " \
                  "the walk with"
      elsif dump.header[:oracles_skipped]
        @notes << "glibc's #{mallinfo_name} and malloc_info were not called: the free lists held " \
                  "#{self.class.list_entries(dump)} chunks, more than the #{ORACLES_AUTO_MAX_ENTRIES} oracles: :auto " \
                  "has glibc follow again (oracles: true calls them always): nothing to compare the walk with"
      elsif dump.header[:oracles_outgrown]
        @differences << Difference.new("glibc", :counters, "not kept: malloc_info()'s output outgrew the room " \
                                                           "reserved for it (the next dump reserves more)", nil)
      else
        why = "not captured: a list of the heap is corrupt and glibc would crash reading it"
        @differences << Difference.new("glibc", :counters, why, nil)
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

    # @return [Symbol] :verified (the walk was compared with glibc's counters and reproduces them, and
    #   no anomaly was recorded), :differs (a figure differs or an anomaly was recorded) or
    #   :nothing_compared (no difference, no anomaly, but nothing to compare the walk with: a dump from
    #   outside without counters given, oracles: false or skipped; {#notes} says why)
    def status
      return :differs unless differences.empty? && anomalies.empty?

      compared? ? :verified : :nothing_compared
    end

    # @return [Boolean] true when the walk was compared with glibc's counters at all
    def compared?
      !@compared.empty?
    end

    # @return [Boolean] true when the walk was compared with glibc's counters, nothing differs and no
    #   anomaly was recorded ({#status} is :verified); false, too, when there was nothing to compare
    def ok?
      status == :verified
    end

    # @return [Boolean] whether arena i's own figures all agree with malloc_info
    def arena_consistent?(index)
      consistent_arenas.include?(index)
    end

    # @return [String] "verified: ...", "nothing compared: ..." with the reason, or the differences,
    #   anomalies and notes a line each
    def to_s
      case status
      when :verified then (["verified: the walk reproduces #{@compared.join(' and ')} exactly"] + notes).join("\n")
      when :nothing_compared then "nothing compared: #{notes.join('; ')}"
      else (differences.map(&:to_s) + anomalies.map { |a| "anomaly: #{a}" } + notes).join("\n")
      end
    end

    # @param dump [Dump]
    # @return [Integer] the chunks on the arenas' fastbins and bins, which glibc's counters follow
    def self.list_entries(dump)
      dump.summary[:states].values_at(:fastbin, :unsorted, :smallbin, :largebin).sum { |s| s[:count] }
    end

    # @return [String] glibc's counters function for the dumped process: "mallinfo2", or "mallinfo"
    #   before glibc 2.33 (which has no mallinfo2)
    def mallinfo_name
      version = @dump.header[:glibc_version].to_s
      old = version.match?(/\A\d+\.\d+/) && Gem::Version.new(version[/\A\d+\.\d+/]) < MALLINFO2_SINCE
      @dump.header[:mallinfo_32bit] || old ? "mallinfo" : "mallinfo2"
    end

    private

    def differ(scope, field, glibc, walk)
      @differences << Difference.new(scope, field, glibc, walk) unless glibc == walk
    end

    # Counters the process printed itself (a dump from outside has none of glibc's own).
    def given(mallinfo2, malloc_info)
      if mallinfo2
        mallinfo2 = mallinfo2.transform_keys(&:to_sym)
        unknown = mallinfo2.keys - MALLINFO_FIELDS
        raise ArgumentError, "mallinfo2 has no field #{unknown.join(', ')}" unless unknown.empty?

        check_mallinfo(mallinfo2, -1, MALLINFO_FIELDS & mallinfo2.keys, name: "mallinfo2")
      end
      check_malloc_info(MallocInfo.new(malloc_info)) if malloc_info
    end

    # glibc before 2.33 has only mallinfo(), whose int fields keep the low 32 bits (mask)
    def check_mallinfo(mi, mask, fields, name: mallinfo_name)
      s = @dump.summary
      @compared << name
      fields.each do |f|
        next if f == :hblkhd && mremap_overcount?(name, :hblkhd, mi[:hblkhd], mi[:hblks], s)

        differ(name, f, mi[f], s[f] & mask)
      end
    end

    # glibc 2.43's mremap_chunk adds new_size - size - offset to mp_.mmapped_mem, 16 bytes
    # (CHUNK_HDR_SZ) more than the mapping grew, and nothing takes them back: hblkhd (and malloc_info's
    # mmap total) then exceeds the mappings by 16 per remap. Explained when the mappings are all there
    # (their count agrees).
    def mremap_overcount?(scope, field, mmapped_mem, n_mmaps, s)
      extra = mmapped_mem - s[:hblkhd]
      unless @dump.header[:mremap_overcounts] && extra.positive? && (extra % 16).zero? && n_mmaps == s[:hblks]
        return false
      end

      @notes << "#{scope} #{field}: glibc says #{mmapped_mem}, the mappings hold #{s[:hblkhd]}: " \
                "glibc's mremap_chunk counted #{extra / 16} remap(s) 16 bytes too large"
      true
    end

    def check_malloc_info(info)
      @compared << "malloc_info"
      arenas = @dump.summary[:arenas]
      check_malloc_info_totals(info.totals, arenas)
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
        listed = arena[:unsorted].empty? ? nil : histogram(arena[:unsorted])
        differ(scope, :unsorted, heap.unsorted && histogram([heap.unsorted]), listed)
        @consistent_arenas << arena[:index] if @differences.size == before
      end
    end

    # The totals after the last heap: the mmapped chunks (mp_.n_mmaps, mp_.mmapped_mem) and every
    # arena's system_mem. Each is compared when the XML has it.
    def check_malloc_info_totals(totals, arenas)
      s = @dump.summary
      count, size, system = totals.values_at(:total_mmap_count, :total_mmap_size, :system_current_size)
      differ("malloc_info", :mmap_count, count, s[:hblks]) if count
      if size && !mremap_overcount?("malloc_info", :mmap_size, size, count, s)
        differ("malloc_info", :mmap_size, size, s[:hblkhd])
      end
      differ("malloc_info", :system_current, system, arenas.sum { |a| a[:arena] }) if system
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
