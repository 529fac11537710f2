# frozen_string_literal: true

module PtmallocDump
  # A dump file loaded by {PtmallocDump.load}. Parsing, validation and every figure are done in C;
  # this class presents them.
  class Dump
    # code => name, as the file stores them
    SYMBOL_SOURCES = Format::SYMBOL_SOURCES.each_with_index.filter_map { |name, code| [code, name] if name }.to_h.freeze
    RESIDENCY_SOURCES =
      Format::RESIDENCY_SOURCES.each_with_index.filter_map { |name, code| [code, name] if name }.to_h.freeze

    # Loads and validates a dump.
    #
    # @param path [String]
    # @raise [FormatError] when the file is not a valid dump
    # @raise [SystemCallError] when it cannot be read
    def self.open(path)
      new(path)
    end

    # @param path [String, Pathname] (see {.open})
    def initialize(path)
      @path = path.to_s
      _load(@path)
      begin
        malloc_info_figures
      rescue FormatError => e
        raise FormatError, "#{@path}: damaged malloc_info section (#{e.message})"
      end
    end

    # @return [String] the file this dump was loaded from
    attr_reader :path

    # What the file says about the process and how it was dumped.
    #
    # @return [Hash{Symbol=>Object}] with at least :format_version, :pid, :time (Time), :glibc_version,
    #   :page_size, :main_arena (Integer), :symbol_source (Symbol), :symbol_file, :residency_source,
    #   :page_sharing (whether the pages tell which are still shared copy-on-write: false for mincore
    #   and for a fork snapshot written before snapshots took sharing from their parent),
    #   :mallinfo2 (Hash keyed by glibc's field names; before glibc 2.33 mallinfo()'s, whose int fields
    #   keep only the low 32 bits: then :mallinfo_32bit is true), :malloc_info (the XML String),
    #   :ruby_layer (:recorded, :off for +ruby: false+, :skipped where this Ruby did not allow the Ruby
    #   pass) and :ruby_layer_reason (why it was skipped, or the caveat it was recorded with; nil),
    #   :gc (GC.stat's counts at the Ruby pass: :count, :major_gc_count, :minor_gc_count,
    #   :total_allocated_objects, :total_freed_objects, :old_objects, :time_ms ..., and :full_gc (the
    #   dump ran a full GC first, +gc: true+), :last_gc_major (the latest GC was a major one),
    #   :sweep_pending (a lazy sweep was left when the pass began); nil without Ruby data),
    #   :source (:self for a process that dumped itself, :pid for {PtmallocDump.dump_process}) and
    #   :source_info (nil for :self; else :pid, :pause_ns (how long the process was stopped),
    #   :copied_bytes, :threads, :attempts (stops until no arena lock was held) and :unavailable, what
    #   that source cannot give: :ruby, :references, :oracles (mallinfo2 and malloc_info), :tls);
    #   :snapshot (nil unless +fork: true+ wrote it) what the snapshot's parent paused for: :pause_ns
    #   (from the dump's call to the child's first step; the fork's return in the parent takes about as
    #   long as :fork_ns), :before_fork_ns, :fork_ns, :ruby_pass (:child: the snapshot process ran the
    #   Ruby pass on its copy; :parent: the parent ran it before the fork, where this Ruby's pages are
    #   not known by their structure; nil without one), :ruby_pass_ns (the parent's) and :gc_ns
    #   (+gc: true+'s full GC, in the parent)
    def header
      @header ||= begin
        m = _meta
        strings = m.delete(:strings)
        source_info = _source
        page_sharing = page_sharing?(m)
        m.merge(
          format_version: 1,
          time: Time.at(m[:time_sec], m[:time_nsec], :nsec),
          glibc_version: strings["glibc_version"],
          libc_path: strings["libc_path"],
          libc_build_id: strings["libc_build_id"],
          symbol_file: strings["symbol_file"],
          symbol_source: SYMBOL_SOURCES.fetch(m.delete(:symbol_source_code), :unknown),
          residency_source: RESIDENCY_SOURCES.fetch(m.delete(:residency_source_code), :unknown),
          hostname: strings["hostname"],
          ruby_version: strings["ruby_version"],
          ruby_layer: ruby_layer_status(strings["ruby_layer"]),
          ruby_layer_reason: strings["ruby_layer_reason"].to_s.then { |r| r.empty? ? nil : r },
          gem_version: strings["gem_version"],
          strings: strings,
          threads_complete: flag?(m, :threads_complete),
          fork_snapshot: flag?(m, :fork_child),
          page_sharing: page_sharing,
          oracles_captured: !flag?(m, :no_oracles),
          oracles_outgrown: flag?(m, :oracles_outgrown),
          oracles_off: flag?(m, :oracles_off),
          oracles_skipped: flag?(m, :oracles_skipped),
          mallinfo_32bit: flag?(m, :mallinfo32),
          mremap_overcounts: flag?(m, :mremap_overcount),
          mallinfo2: _mallinfo2,
          malloc_info: malloc_info,
          gc: _gc&.freeze,
          source: source_info ? source_info[:kind] : :self,
          source_info: source_info&.freeze,
          snapshot: _snapshot&.freeze
        ).freeze
      end
    end

    # Why this dump holds no Ruby objects, in words for a report; nil when it holds them.
    #
    # @return [String, nil]
    def no_ruby_reason
      return nil if _ruby?
      return "the Ruby pass was skipped: #{header[:ruby_layer_reason]}" if header[:ruby_layer] == :skipped
      if header[:source] != :self
        return "the dump was taken from outside the process (#{header[:source]}): Ruby objects need the in-process dump"
      end

      "the dump was taken with ruby: false"
    end

    # @return [Array<Arena>] every arena, main_arena first, in ring order
    def arenas
      build_structure unless @arenas
      @arenas
    end

    # @return [Array<Heap>] every heap and mmapped-chunk region, in file order
    def heaps
      build_structure unless @heaps
      @heaps
    end

    # Yields every chunk (heap by heap, by address within a heap).
    #
    # @yieldparam chunk [Chunk]
    # @return [Enumerator] without a block
    def each_chunk(&block)
      return enum_for(:each_chunk) { chunk_count } unless block

      _each_chunk(heaps, arenas, &block)
      self
    end

    # @param address [Integer] a chunk address (not the user pointer)
    # @return [Chunk, nil] the chunk that starts exactly there
    def chunk_at(address)
      _find_chunk(address, false, heaps, arenas)
    end

    # @param address [Integer] any address
    # @return [Chunk, nil] the chunk whose bytes include the address
    def chunk_containing(address)
      _find_chunk(address, true, heaps, arenas)
    end

    # @param index [Integer] a chunk's position in file order (heap by heap, by address in a heap)
    # @return [Chunk, nil]
    def chunk_by_index(index)
      _chunk_by_index(index, heaps, arenas)
    end

    # The first chunk, in file order, whose address, size or state differs from the other dump's
    # chunk at the same position (two dumps of one frozen heap have none).
    #
    # @param other [Dump]
    # @return [Integer, nil] its index, the shorter dump's chunk count when one is a prefix of the
    #   other, or nil when both hold the same chunks
    def first_difference(other)
      _first_difference(other)
    end

    # Allocated chunks (in use and mmapped) by size class: the exact chunk size up to 1040 bytes (the
    # tcache's range), then the next power of two.
    #
    # @return [Hash{Integer=>Array(Integer, Integer)}] size class => [chunks, bytes]
    def size_classes
      @size_classes ||= _size_classes.freeze
    end

    # The chunk sizes below this have a size class each (analysis.h: PTMD_EXACT_CLASSES x 16).
    EXACT_SIZE_CLASSES_END = 66 * 16

    # @param size_class [Integer] a key of {#size_classes}
    # @return [Range] the chunk sizes the class holds: one exact size, or the powers of two's
    #   (2^(k-1), 2^k] above the exact sizes
    def self.size_class_range(size_class)
      return size_class..size_class if size_class < EXACT_SIZE_CLASSES_END

      [size_class / 2 + 1, EXACT_SIZE_CLASSES_END].max..size_class
    end

    # @return [Array<PageMap>] page residency, one per heap (same order as {#heaps})
    def pages
      @pages ||= heaps.map do |h|
        PageMap.new(h, heap_records[h.index][:page_base], header[:page_size], _pages(h.index),
                    sharing: header[:page_sharing])
      end
    end

    # @return [Array<ThreadInfo>] threads found and their tcaches
    def threads
      @threads ||= _thread_records.map { |t| ThreadInfo.new(*t.values_at(*ThreadInfo.members)) }
    end

    # Where glibc keeps a free chunk: for a tcache chunk, the thread whose tcache lists it (the dump
    # records each tcache list's chunks), its tcache bin and place in the list; for a fastbin, small or
    # large bin chunk, the bin its size belongs to (a chunk found on another bin is named by a
    # `wrong_bin` anomaly) and the sizes that bin holds.
    #
    # @param chunk [Chunk] a chunk of this dump
    # @return [Bin, nil] nil for a chunk in use, top, mmapped or metadata
    def bin_of(chunk)
      size = chunk.size
      case chunk.state
      when :tcache then tcache_bin(chunk)
      when :fastbin then Bin.new(:fastbin, (size >> 4) - 2, size, size)
      when :unsorted then Bin.new(:unsorted, 1)
      when :smallbin, :largebin
        index = Bin.index_for(size)
        Bin.new(chunk.state, index, *Bin.size_range(index))
      end
    end

    # @return [Array<Anomaly>] what the walk found broken, if anything
    def anomalies
      @anomalies ||= _anomaly_records.map { |a| Anomaly.new(*a.values_at(*Anomaly.members)) }
    end

    # Figures computed from the chunk records (never copied from glibc's counters): mallinfo2's
    # fields (:arena, :ordblks, :smblks, :hblks, :hblkhd, :usmblks, :fsmblks, :uordblks, :fordblks,
    # :keepcost), :tcache_count/:tcache_bytes, :in_use_bytes, :resident_bytes, :swapped_bytes,
    # :absent_bytes, :free_resident_bytes (free but still resident: the bloat), :largest_free,
    # per-state figures under :states and the same per arena under :arenas.
    #
    # With Ruby data, :ruby holds {RubyHeap#summary}. :rss holds {#rss}. :owners (see {#owners}) says who
    # keeps the allocated chunks alive; nil for dumps taken with `references: false` or by older versions.
    #
    # @return [Hash{Symbol=>Object}]
    def summary
      @summary ||= begin
        s = _summary
        s[:ruby] = ruby.summary if ruby
        s[:rss] = rss
        s[:owners] = owners
        s.freeze
      end
    end

    # The headline figures, each defined once here, as the text summary, the report's cards and bars,
    # the JSON summary and the explorer print them:
    #
    # - :malloc_heap, all that glibc's malloc manages: the arenas' memory (:arena_bytes, mallinfo2's
    #   arena) and the mmapped chunks' mappings (:mmapped_chunks, mallinfo2's hblkhd, in
    #   :mmapped_chunk_count chunks);
    # - :in_use, what the program holds: the in-use chunks of the arenas (:in_use_arenas, in
    #   :in_use_arena_count chunks; free chunks in a tcache, which glibc's uordblks counts, and the
    #   allocator's metadata are not in use) and the mmapped chunks; :in_use_share is its share of
    #   :malloc_heap (0.0 for an empty heap);
    # - :free_resident, free chunks' bytes still in RAM (what trimming could give back).
    #
    # The RSS bar's malloc parts ({#rss}) are the resident bytes of these and say so.
    #
    # @return [Hash{Symbol=>Numeric}]
    def figures
      @figures ||= begin
        s = summary
        heap = s[:arena] + s[:hblkhd]
        in_use = s[:in_use_bytes] + s[:mmapped_bytes]
        { malloc_heap: heap, arena_bytes: s[:arena], mmapped_chunks: s[:hblkhd], mmapped_chunk_count: s[:hblks],
          in_use: in_use, in_use_arenas: s[:in_use_bytes], in_use_arena_count: s[:in_use_count],
          in_use_share: heap.zero? ? 0.0 : in_use.fdiv(heap), free_resident: s[:free_resident_bytes] }.freeze
      end
    end

    # The process's whole RSS at the capture, every resident byte in one part: :malloc_in_use,
    # :malloc_free_resident, :malloc_metadata (heap_info, arenas, tcache structs, fenceposts),
    # :mmapped_chunks, :ruby_pages (Ruby's object pages outside malloc), :stacks (thread and fiber
    # stacks), :file_backed, :other_anonymous, :allocation_tracking (the allocation tracker's own tables,
    # under ptmalloc-dump --track), :dump_scratch (the in-process dump's own scratch mappings, which
    # exist only while it runs: the walk's records, the Ruby pass's tables, its buffers; 0 in a fork
    # snapshot, whose mappings are its parent's, and from outside); :total (their sum), :vm_rss (the
    # kernel's VmRSS read with the mappings), :files ([{ path:, bytes: }], file-backed bytes by path,
    # largest first) and :error: nil when smaps and VmRSS agreed, or bytes (the figures are then
    # approximate by that much: the process's memory moved while its smaps was read, three times, see
    # {#mappings_info}; or pages the heaps' residency counted were gone from smaps' Rss when it was read,
    # as when a fork snapshot's parent gives heap pages back between the fork and the read).
    #
    # @return [Hash{Symbol=>Object}, nil] nil for a dump without mappings (written before they were
    #   recorded)
    def rss
      return @rss if defined?(@rss)

      @rss = _rss&.then do |r|
        error = mappings_info&.dig(:approximate) ? mappings_info[:error] : nil
        error = (error || 0) + r[:overshoot] if r[:overshoot].positive?
        files = r[:files].sort_by { |f| [-f[:bytes], f[:path]] }.map(&:freeze).freeze
        r.reject { |k, _| k == :overshoot }.merge(files: files, error: error).freeze
      end
    end

    # The mappings recorded with the dump (/proc/PID/smaps at the capture; a fork snapshot's are its
    # parent's, read by the snapshot as its first act).
    #
    # @return [Array<Hash>, nil] :start, :end, :rss, :private, :shared, :swap, :anonymous, :offset,
    #   :inode, :prot, :kind (:anonymous, :brk, :stack, :file, :special) and :path; nil without them
    def mappings
      @mappings ||= _mappings&.map(&:freeze)&.freeze
    end

    # @return [Hash, nil] :vm_rss, :rss_anon, :rss_file, :rss_shmem (/proc/PID/status, read right after
    #   smaps, which is read again, up to three times in all, while VmRSS moves across it or smaps' Rss
    #   sum disagrees with it by more than 64 KiB or 0.1% of VmRSS), :read_ns (reading both),
    #   :from_parent (a fork snapshot's: its parent's), :error (bytes: the kept read's disagreement) and
    #   :approximate (true when that is above the tolerance: the RSS figures are then ± :error)
    def mappings_info
      @mappings_info ||= _mappings_head&.freeze
    end

    # Allocated chunks by what keeps them alive, found conservatively (any aligned word equal to a
    # chunk's user address counts as a pointer, and in Ruby memory an Integer of one, as
    # Fiddle.malloc hands it out): :ruby (owned by a Ruby object or reachable from Ruby-owned
    # memory), :anchored (reachable from a root: a loaded object's writable data, a thread's stack,
    # TLS or the dumping thread's registers; directly or through other native chunks), :interior (held
    # through a pointer into its middle, not its start, from a root or a chunk reached so far, as
    # SQLite's page cache is: "held (interior pointer)"; see {#referrers} for the holder), :leaked
    # (reachable from none of those) and :unknown (reachable from no root in a dump without Ruby objects:
    # +ruby: false+, or a Ruby pass that was skipped; there a Ruby object may own it, so nothing says
    # it is leaked, and :leaked is empty), each { bytes:, count: }; :anchored_by, anchored bytes per
    # root name (largest first); :leaked_by_size, the 20 sizes with the most leaked bytes, each
    # { size:, count:, bytes:, samples:, heap: } (up to 5 chunk addresses; heap, the {Heap#index} of
    # the heap holding most of that size's leaked bytes).
    #
    # @return [Hash{Symbol=>Object}, nil] nil when the dump has no roots (`references: false`)
    def owners
      return @owners if defined?(@owners)

      @owners = _owners&.then do |o|
        o.merge(anchored_by: o[:anchored_by].sort_by { |name, bytes| [-bytes, name] }.to_h).freeze
      end
    end

    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [Symbol, nil] :ruby, :anchored, :interior, :leaked or :unknown for an allocated chunk (see
    #   {#owners}); nil
    #   for a chunk that is not allocated, an address where no chunk starts, or a dump without roots
    def owner_kind_of(chunk)
      _owner_of(chunk_address(chunk))&.first
    end

    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [String, nil] the name of the root an anchored chunk is reached from: the path of a
    #   loaded object whose writable data holds it (or holds the native chunk that leads to it),
    #   "stack of thread N", "TLS of thread N" or "registers of thread N"; for an :interior chunk the
    #   root its interior pointer (or the chunk holding one) is reached from; nil otherwise
    def anchor_of(chunk)
      _owner_of(chunk_address(chunk))&.at(1)
    end

    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [Hash, nil] for an anchored chunk, { name:, kind: (:data, :stack, :tls, :registers),
    #   direct: (whether a word of the root itself holds its address) }
    def anchor_details(chunk)
      kind, name, root_kind, direct = _owner_of(chunk_address(chunk))
      kind == :anchored ? { name: name, kind: root_kind, direct: direct } : nil
    end

    # What holds a chunk's user address, as the reference scan found it: the answer to "why is this
    # block Ruby's, or anchored, and not leaked". The scan is conservative: a word that equals the
    # address counts, stale data included.
    #
    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [Hash, nil] { chunks: addresses of the chunks with a word equal to it, integers:
    #   addresses of the chunks holding it as a Ruby Integer, roots: [{ name:, where: }, ...] the
    #   roots' words equal to it, objects: addresses of the Ruby objects whose slots hold it (as an
    #   address or an Integer), interior: addresses of the chunks with a word pointing into its user
    #   data past its start, interior_roots: [{ name:, where: }, ...] the roots' words doing so (one
    #   per run of such words) }; nil for an address where no chunk starts, or a dump without roots
    def referrers(chunk)
      chunks, integers, roots, objects, interior, interior_roots = _referrers(chunk_address(chunk))
      pairs = ->(list) { list.map { |name, where| { name: name, where: where } } }
      chunks && { chunks: chunks, integers: integers, roots: pairs.call(roots), objects: objects,
                  interior: interior, interior_roots: pairs.call(interior_roots) }
    end

    # The roots the dump scanned.
    #
    # @return [Array<Hash>] { start:, end:, kind:, tid:, name: } each; empty without roots
    def roots
      @roots ||= _roots.map { |s, e, k, t, n| { start: s, end: e, kind: k, tid: t, name: n }.freeze }.freeze
    end

    # Ruby's heap as recorded with the dump: pages, objects and which chunks they own.
    #
    # @return [RubyHeap, nil] nil for a dump taken with `ruby: false`
    def ruby
      return @ruby if defined?(@ruby)

      @ruby = _ruby? ? RubyHeap.new(self) : nil
    end

    # Page-level figures for the report: pages by class (per heap and in total), the 20 largest free
    # and resident runs, pages pinned by little live data, what malloc_trim(0) could release per
    # arena, and the histogram of free chunk sizes.
    #
    # @return [Hash{Symbol=>Object}]
    def analysis
      @analysis ||= _analysis.freeze
    end

    # glibc's malloc_info() output captured right after the walk, parsed.
    #
    # @return [MallocInfo, nil] nil when the dump holds no glibc counters
    def malloc_info_figures
      return @malloc_info_figures if defined?(@malloc_info_figures)

      @malloc_info_figures = header[:oracles_captured] ? MallocInfo.new(header[:malloc_info]) : nil
    end

    # Compares {#summary} with glibc's own counters captured right after the walk. A dump from outside
    # (another process, a core) holds none: glibc's mallinfo2() and malloc_info() can only be called
    # in the process itself. A program that prints them itself, at a moment when none of its threads
    # allocates until the dump (its last malloc and free done, its output going to a buffer it had
    # before), gives them here, and the walk is compared with them figure for figure: mallinfo2's
    # fields, and malloc_info's per heap (fastbins, bins, unsorted, fast and rest totals, system
    # bytes) and in total (mmapped chunks, system bytes).
    #
    # @param mallinfo2 [Hash{Symbol=>Integer}, nil] mallinfo2's fields as the process printed them
    #   (:arena, :ordblks, ...); the fields given are compared
    # @param malloc_info [String, nil] malloc_info(0, fp)'s XML as the process printed it
    # @return [Verification]
    # @raise [ArgumentError] when mallinfo2 names a field mallinfo2 does not have
    # @raise [FormatError] when malloc_info is not malloc_info() output
    def verify(mallinfo2: nil, malloc_info: nil)
      Verification.new(self, mallinfo2: mallinfo2, malloc_info: malloc_info)
    end

    def inspect
      format("#<PtmallocDump::Dump %s pid=%d glibc=%s arenas=%d chunks=%d>", path, header[:pid],
             header[:glibc_version], arenas.size, chunk_count)
    end

    private

    def chunk_address(chunk)
      chunk.is_a?(Integer) ? chunk : chunk.address
    end

    def flag?(meta, name)
      meta[:flags].anybits?(Format::META_FLAGS.fetch(name))
    end

    # Whether the pages' exclusive bits tell sharing: pagemap's (mincore cannot tell), and in a fork
    # snapshot its parent's from before the fork (an older snapshot's are the child's own: every page
    # shared with its parent).
    def page_sharing?(meta)
      RESIDENCY_SOURCES[meta[:residency_source_code]] == :pagemap &&
        (!flag?(meta, :fork_child) || flag?(meta, :sharing_before_fork))
    end

    # Dumps written before the header said it: recorded when Ruby data is present.
    def ruby_layer_status(text)
      return _ruby? ? :recorded : :off if text.nil?

      text.to_sym
    end

    def build_structure
      heap_recs = heap_records
      @arenas = _arena_records.map do |a|
        Arena.new(a[:index], a[:address], a[:main], a[:system_mem], a[:max_system_mem], a[:top], a[:top_size],
                  a[:last_remainder], a[:attached_threads], a[:noncontiguous], a[:corrupt], [])
      end
      @heaps = heap_recs.map do |h|
        arena = h[:arena] && @arenas[h[:arena]]
        heap = Heap.new(h[:index], h[:kind], arena, h[:start], h[:end], h[:reserved_end], h[:chunk_count],
                        h[:truncated])
        arena.heaps << heap if arena
        heap
      end
      @arenas.each { |a| a.heaps.freeze }
    end

    def heap_records
      @heap_records ||= _heap_records
    end

    # A tcache chunk's Bin: the thread and tcache bin the file records (TCACHE_ENTRIES), or, for a file
    # without them, the bin of a small tcache size (tidx2usize: 16 bytes apart from 32).
    def tcache_bin(chunk)
      size = chunk.size
      thread_index, index, position = _tcache_entry(chunk.address)
      if thread_index
        small = size == 32 + 16 * index
        Bin.new(:tcache, index, small ? size : nil, small ? size : nil, threads[thread_index], position)
      else
        index = size <= 1040 ? (size - 32) / 16 : nil
        Bin.new(:tcache, index, index && size, index && size)
      end
    end
  end
end
