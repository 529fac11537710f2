# frozen_string_literal: true

module PtmallocDump
  # The states a chunk can have, in the order of the file format.
  STATES = Format::STATES
  # States that hold free memory (what the program freed and malloc keeps).
  FREE_STATES = Format::FREE_STATES

  # Chunk flag bits (Chunk#flags, the high byte of a chunk record): ANOMALY, TCACHE_STRUCT,
  # LAST_REMAINDER, FREE_BIT, from {Format::CHUNK_FLAGS}.
  module ChunkFlags
    Format::CHUNK_FLAGS.each { |name, bit| const_set(name.upcase, bit) }
  end

  # One malloc chunk of a dump.
  #
  # @!attribute [r] address
  #   @return [Integer] the chunk's address (the user pointer is +address + 16+)
  # @!attribute [r] size
  #   @return [Integer] the chunk size in bytes, header included
  # @!attribute [r] state
  #   @return [Symbol] one of {STATES}
  # @!attribute [r] arena
  #   @return [Arena, nil] nil for mmapped chunks
  # @!attribute [r] heap
  #   @return [Heap]
  # @!attribute [r] flags
  #   @return [Integer] {ChunkFlags} bits
  Chunk = Struct.new(:address, :size, :state, :arena, :heap, :flags) do
    # @return [Integer] the address malloc returned for this chunk
    def user_address
      address + 16
    end

    # @return [Integer] the address just past the chunk
    def end_address
      address + size
    end

    # @return [Boolean] whether the chunk holds free memory
    def free?
      FREE_STATES.include?(state)
    end

    # @return [Boolean] whether this chunk is a thread's tcache_perthread_struct
    def tcache_struct?
      flags.anybits?(ChunkFlags::TCACHE_STRUCT)
    end

    # @return [Boolean] whether an anomaly record names this chunk
    def anomaly?
      flags.anybits?(ChunkFlags::ANOMALY)
    end

    def inspect
      format("#<PtmallocDump::Chunk 0x%x size=%d %s>", address, size, state)
    end
    alias_method :to_s, :inspect
  end

  # An arena (malloc_state).
  Arena = Struct.new(:index, :address, :main, :system_mem, :max_system_mem, :top, :top_size,
                     :last_remainder, :attached_threads, :noncontiguous, :corrupt, :heaps) do
    # @return [Boolean] whether this is glibc's main_arena
    def main?
      main
    end

    def inspect
      format("#<PtmallocDump::Arena %d 0x%x%s system_mem=%d heaps=%d>", index, address,
             main ? " main" : "", system_mem, heaps.size)
    end
    alias_method :to_s, :inspect
  end

  # A contiguous region of malloc memory: the main arena's sbrk heap (kind :sbrk), a region mmapped
  # for the main arena once sbrk failed (:main_mmap), a non-main heap (:mmap_heap), or the mapping of
  # one mmapped chunk (:mmapped_chunk).
  Heap = Struct.new(:index, :kind, :arena, :start, :end, :reserved_end, :chunk_count, :truncated) do
    # @return [Integer] bytes in the region
    def size
      self.end - start
    end

    # @return [Range] the address range
    def range
      (start...self.end)
    end

    def inspect
      format("#<PtmallocDump::Heap %d %s 0x%x-0x%x>", index, kind, start, self.end)
    end
    alias_method :to_s, :inspect
  end

  # Page residency of one heap, from /proc/self/pagemap (or mincore) at dump time. Whether a present
  # page is still shared copy-on-write with another process is known from pagemap only, and in a fork
  # snapshot only from what its parent read before the fork ({#sharing_at}).
  class PageMap
    PRESENT = Format::PAGE_FLAGS[:present]
    SWAPPED = Format::PAGE_FLAGS[:swapped]
    EXCLUSIVE = Format::PAGE_FLAGS[:exclusive]
    FILE = Format::PAGE_FLAGS[:file]
    SHARING_UNKNOWN = Format::PAGE_FLAGS[:sharing_unknown]

    # @return [Heap]
    attr_reader :heap
    # @return [Integer] address of the first page
    attr_reader :page_base
    # @return [Integer]
    attr_reader :page_size
    # @return [String] one flag byte per page (binary)
    attr_reader :flags

    # @param sharing [Boolean] whether the dump's exclusive bits tell sharing at all
    #   ({Dump#header}'s :page_sharing)
    def initialize(heap, page_base, page_size, flags, sharing: true)
      @heap = heap
      @page_base = page_base
      @page_size = page_size
      @flags = flags
      @sharing = sharing
    end

    # @return [Integer] number of pages
    def size
      flags.bytesize
    end

    # @param address [Integer]
    # @return [Symbol, nil] :present, :swapped or :absent; nil outside this heap
    def state_at(address)
      i = (address - page_base) / page_size
      return nil if address < page_base || i >= size

      f = flags.getbyte(i)
      if f.anybits?(PRESENT) then :present
      elsif f.anybits?(SWAPPED) then :swapped
      else :absent
      end
    end

    # @param address [Integer]
    # @return [Symbol, nil] for a present page: :exclusive (mapped by this process only), :shared (still
    #   shared copy-on-write with another process, a parent or a child) or :unknown (the dump cannot
    #   tell: mincore, an older fork snapshot, or a snapshot's page its parent had not mapped when it
    #   read); nil for a page not present or outside this heap
    def sharing_at(address)
      i = (address - page_base) / page_size
      return nil if address < page_base || i >= size

      sharing_of(flags.getbyte(i))
    end

    # @return [Boolean, nil] whether the page at address is mapped by this process only; nil where
    #   {#sharing_at} is not :exclusive or :shared
    def exclusive?(address)
      case sharing_at(address)
      when :exclusive then true
      when :shared then false
      end
    end

    # @return [Hash{Symbol=>Integer}] page counts by state, and of the present pages by sharing
    #   (:exclusive, :shared, :sharing_unknown)
    def counts
      c = { present: 0, swapped: 0, absent: 0, exclusive: 0, shared: 0, sharing_unknown: 0 }
      flags.each_byte do |f|
        if f.anybits?(PRESENT) then c[:present] += 1
        elsif f.anybits?(SWAPPED) then c[:swapped] += 1
        else c[:absent] += 1
        end
        s = sharing_of(f)
        c[s == :unknown ? :sharing_unknown : s] += 1 if s
      end
      c
    end

    private

    def sharing_of(flag)
      return nil unless flag.anybits?(PRESENT)
      return :unknown if !@sharing || flag.anybits?(SHARING_UNKNOWN)

      flag.anybits?(EXCLUSIVE) ? :exclusive : :shared
    end
  end

  # A live thread seen in the dump, with the tcache and arena it uses. #exiting is true for a thread
  # that was emptying its tcache on exit while the dump read it (its count then is what was read).
  ThreadInfo = Struct.new(:tid, :pthread, :tcache, :arena, :tcache_count, :tcache_bytes, :current, :found_by,
                          :exiting)

  # Where glibc keeps a free chunk ({Dump#bin_of}): a thread's tcache, a fastbin, the unsorted bin, a
  # small bin or a large bin, with the sizes of chunks the bin holds.
  #
  # @!attribute [r] kind
  #   @return [Symbol] :tcache, :fastbin, :unsorted, :smallbin or :largebin
  # @!attribute [r] index
  #   @return [Integer, nil] the bin's index as malloc.c numbers it: a tcache's tidx, fastbin_index,
  #     or bin_at's index in the arena's bins (1 unsorted, 2..63 small, 64..126 large); nil for a
  #     tcache chunk of a file that does not record its bin and cannot be told by its size
  # @!attribute [r] min_size
  #   @return [Integer, nil] the smallest chunk size the bin holds (nil for the unsorted bin, which
  #     holds any)
  # @!attribute [r] max_size
  #   @return [Integer, nil] the largest (nil for the unsorted bin and the last large bin)
  # @!attribute [r] thread
  #   @return [ThreadInfo, nil] a tcache chunk's thread: the one whose tcache lists it (nil for other
  #     bins, and for files written before the TCACHE_ENTRIES section)
  # @!attribute [r] position
  #   @return [Integer, nil] a tcache chunk's place in its list: 0 is the head, which that thread's
  #     next malloc of the size takes
  Bin = Struct.new(:kind, :index, :min_size, :max_size, :thread, :position) do
    # glibc's bin_index (malloc.c: smallbin_index below MIN_LARGE_SIZE, else largebin_index_64) for a
    # free chunk of this size.
    #
    # @param size [Integer] a chunk size
    # @return [Integer]
    def self.index_for(size)
      return size >> 4 if size < 1024

      if (size >> 6) <= 48 then 48 + (size >> 6)
      elsif (size >> 9) <= 20 then 91 + (size >> 9)
      elsif (size >> 12) <= 10 then 110 + (size >> 12)
      elsif (size >> 15) <= 4 then 119 + (size >> 15)
      elsif (size >> 18) <= 2 then 124 + (size >> 18)
      else 126
      end
    end

    # The chunk sizes bin `index` of an arena holds (2..126), by {.index_for}, which never decreases
    # with the size.
    #
    # @param index [Integer]
    # @return [Array(Integer, Integer), Array(Integer, nil)] the smallest and largest size (nil: no bound)
    def self.size_range(index)
      first = ->(i) { 16 * (1..(1 << 44)).bsearch { |k| index_for(16 * k) >= i } }
      [first.call(index), index >= 126 ? nil : first.call(index + 1) - 16]
    end

    # @return [Integer, nil] the tcache's thread id (nil for other bins or when unknown)
    def tid
      thread&.tid&.nonzero?
    end

    # @return [String] e.g. "tcache of thread 12345 (bin 3, 80 B)", "smallbin 12 (192 B)",
    #   "largebin 70 (1536..1599 B)", "fastbin 2 (64 B)", "unsorted"; the explorer's panel words it alike
    def to_s
      case kind
      when :unsorted then "unsorted"
      when :tcache
        sizes = min_size ? ", #{sizes_text}" : ""
        if thread.nil? then index ? "tcache bin #{index} (#{sizes_text})" : "tcache bin"
        elsif tid then "tcache of thread #{tid} (bin #{index}#{sizes})"
        else "tcache of an unlisted thread (bin #{index}#{sizes})"
        end
      else "#{kind} #{index} (#{sizes_text})"
      end
    end

    private

    def sizes_text
      if max_size.nil? then "#{min_size} B and up"
      elsif min_size == max_size then "#{min_size} B"
      else "#{min_size}..#{max_size} B"
      end
    end
  end

  # Something the walk found that a healthy heap would not have; the walk records it and carries on.
  Anomaly = Struct.new(:kind, :address, :detail, :arena) do
    def to_s
      format("%s at 0x%x (detail 0x%x)%s", kind, address, detail, arena ? " in arena #{arena}" : "")
    end
  end
end
