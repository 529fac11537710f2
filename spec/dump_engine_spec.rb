# frozen_string_literal: true

require "json"
require "spec_helper"

# The walk against glibc's own oracles: mallinfo2(), malloc_info() (asked for with oracles: true, whatever the
# length of the spec process's free lists) and the pointers malloc returned.
RSpec.describe "PtmallocDump.dump on randomised heaps", :quiescent do
  BIN_STATES = %i[tcache fastbin unsorted smallbin largebin].freeze

  def request2size(n)
    [(n + 8 + 15) & ~15, 32].max
  end

  # @param before [PtmallocDump::Dump] dumped after the mallocs, before the frees
  def check_pointers(dump, scenario, before)
    scenario.live.each do |addr, size|
      chunk = dump.chunk_at(addr - 16)
      expect(chunk).not_to be_nil, "no chunk at 0x#{(addr - 16).to_s(16)} for a live block of #{size} B"
      expect(%i[in_use mmapped]).to include(chunk.state)
      expect(chunk.size).to be >= size
    end
    reused = [] # chunks the calling thread allocated again
    scenario.freed.each do |addr, size|
      chunk = dump.chunk_containing(addr - 16)
      if chunk.nil?
        # glibc gave the memory back: an mmapped chunk's mapping is gone, or the free merged the
        # chunk into top and then trimmed it (systrim lowers the break, heap_trim shrinks or deletes
        # a thread's heap). The block lay in a region before the frees and in none now
        expect(before.heaps.find { |h| h.range.cover?(addr) }).not_to be_nil
        expect(dump.heaps.find { |h| h.range.cover?(addr) }).to be_nil, "a freed #{size} B block at 0x#{addr.to_s(16)} vanished"
      elsif chunk.address == addr - 16 && chunk.state == :in_use && chunk.size != request2size(size)
        # the process split the freed chunk for an allocation of its own after the free (Fiddle's
        # own bookkeeping after the call that freed it does): a new chunk, not the freed one
        next
      elsif chunk.state == :in_use && scenario.freed_by[addr] == -1
        # the calling thread, the only one running Ruby between the frees and the dump, took the
        # chunk back (from its tcache, or split from the free chunk it had merged into): a few at most
        reused << chunk.address
      elsif chunk.address == addr - 16
        expect(BIN_STATES + [:top]).to include(chunk.state), "freed block 0x#{addr.to_s(16)} is #{chunk.state}"
      else
        expect(chunk).to be_free, "freed block 0x#{addr.to_s(16)} lies inside #{chunk.inspect}"
      end
    end
    expect(reused.uniq.size).to be <= 4
  end

  # 50 seeds: threads cycle through 0, 1 and 4 extra threads (so 1, 2 and up to 5 arenas).
  (1..50).each do |seed|
    threads = [0, 1, 4][seed % 3]
    it "reproduces mallinfo2 and malloc_info exactly and finds every pointer (seed #{seed}, #{threads} threads)" do
      scenario = HeapScenario.new(seed, threads: threads)
      path = File.join(tmpdir, "heap.dump")
      GC.disable # a GC run mallocs and frees on its own, and could reuse the chunks just freed
      begin
        before_path = File.join(tmpdir, "before.dump")
        PtmallocDump.dump(path, ruby: false, oracles: true) # Ruby fills its method caches on a first call: not between frees and dump
        scenario.build { PtmallocDump.dump(before_path, ruby: false, oracles: true) }
        PtmallocDump.dump(path, ruby: false, oracles: true)
        dump = PtmallocDump.load(path)
        expect_valid_dump(dump)
        expect(dump.arenas.size).to be >= (threads.positive? ? 2 : 1)
        check_pointers(dump, scenario, PtmallocDump.load(before_path))
      ensure
        GC.enable
        scenario.cleanup
      end
    end
  end

  it "finds pointers freed by another thread in that thread's tcache" do
    tid = NativeThreads.start(0)
    path = File.join(tmpdir, "cross.dump")
    begin
      NativeThreads.prepare_free(0, NativeThreads.malloc(0, [8])).call # the thread's tcache exists now
      blocks = NativeThreads.malloc(-1, [40] * 5)
      free_blocks = NativeThreads.prepare_free(0, blocks)
      PtmallocDump.dump(path, ruby: false, oracles: true) # warm Ruby's method caches for this call
      free_blocks.call
      PtmallocDump.dump(path, ruby: false, oracles: true)
      dump = PtmallocDump.load(path)
      blocks.each { |b| expect(dump.chunk_at(b - 16).state).to eq(:tcache) }
      info = dump.threads.find { |t| t.tid == tid }
      expect(info).not_to be_nil
      expect(info.found_by).to eq(:tls)
      expect(info.tcache_count).to be >= 6 # the 8-byte block, the five (and whatever thread start-up freed)
      expect(dump.chunk_at(info.tcache - 16)).to be_tcache_struct
      expect_valid_dump(dump)
    ensure
      NativeThreads.stop(0)
    end
  end

  it "classifies the chunks freed past a full tcache bin: fastbin chunks (which look in use) by their lists, " \
     "or without fastbins (glibc 2.43) the bin chunks they merge into" do
    path = File.join(tmpdir, "heap.dump")
    NativeThreads.start(0)
    # mp_.tcache_count: TCACHE_FILL_COUNT, 7 until glibc 2.42 and 16 since 2.43
    fill = dump_and_load("fill.dump", ruby: false).header[:tcache_count]
    fastbins = LibcFacts.glibc_version < Gem::Version.new("2.43")
    expect(fill).to eq(fastbins ? 7 : 16)
    blocks = NativeThreads.malloc(0, [40] * (fill + 13))
    guard = NativeThreads.malloc(0, [40])
    begin
      # an arena an earlier thread used may hand out a recycled chunk a size class up
      sizes = dump_and_load("before.dump", ruby: false).then { |d| blocks.map { |b| d.chunk_at(b - 16).size } }
      NativeThreads.prepare_free(0, blocks).call
      PtmallocDump.dump(path, ruby: false, oracles: true)
      dump = PtmallocDump.load(path)
      states = blocks.map { |b| dump.chunk_at(b - 16)&.state }
      if fastbins
        # a new thread: the first ones fill its tcache bin (`fill` slots, fewer when the thread's
        # start-up freed a chunk of that size), the others are fastbin chunks whose next chunk still
        # says "in use"; per size class, as an arena an earlier thread used may hand out a recycled
        # chunk a size class up
        arena = dump.chunk_containing(blocks.first - 16).arena
        if arena.attached_threads == 1
          blocks.each_index.group_by { |i| sizes[i] }.each_value do |same|
            in_class = states.values_at(*same)
            cached = in_class.index { |s| s != :tcache } || in_class.size
            expect(cached).to be <= fill
            expect(in_class.drop(cached)).to all(eq(:fastbin))
          end
          expect(states.count(:fastbin)).to be >= 13 - fill
          expect(dump.summary[:fsmblks]).to be >= states.count(:fastbin) * 48
        else
          # glibc gave the thread an arena another thread is attached to: that thread's mallocs may
          # have moved some fastbin chunks into its own tcache, or consolidated them into a free chunk
          expect(blocks.map { |b| dump.chunk_containing(b - 16) }).to all(be_free)
        end
        expect(dump.summary[:smblks]).to eq(dump.header[:mallinfo2][:smblks])
      else
        expect(states.first(fill)).to eq([:tcache] * fill)
        # per size class, the chunks past a full bin go to _int_free_chunk, which merges neighbours:
        # each lies in a free bin chunk
        past = blocks.zip(sizes).group_by(&:last).values.flat_map { |same| same.drop(fill).map(&:first) }
        expect(past).not_to be_empty
        past.each do |b|
          chunk = dump.chunk_containing(b - 16)
          expect(%i[unsorted smallbin largebin]).to include(chunk.state), "0x#{b.to_s(16)} lies in #{chunk.inspect}"
        end
        expect(states.count(:tcache)).to eq(blocks.size - past.size)
        expect(dump.summary.values_at(:fastbin_count, :smblks, :fsmblks)).to eq([0, 0, 0])
        expect(dump.header[:mallinfo2].values_at(:smblks, :fsmblks)).to eq([0, 0])
      end
      expect_valid_dump(dump)
    ensure
      NativeThreads.prepare_free(0, guard).call
      NativeThreads.stop(0)
    end
  end

  # mp_.sbrk_base is not 16-byte aligned where the break moved before malloc's first sbrk (glibc before
  # 2.33 copies GLIBC_TUNABLES with sbrk; here a preloaded constructor moves it by 7 bytes): sysmalloc
  # aligns the first chunk past it and counts the correction in system_mem. Oracles: glibc's counters
  # and the break the process reports.
  it "walks a main heap whose sbrk_base is not 16-byte aligned and reproduces glibc's counters" do
    path = File.join(tmpdir, "shifted.dump")
    code = <<~RUBY
      keep = Array.new(3000) { |i| "x" * (100 + i % 700) }
      PtmallocDump.dump(#{path.inspect}, ruby: false, oracles: true)
      puts keep.size
    RUBY
    _out, err, status = run_ruby(code, env: { "LD_PRELOAD" => build_fixture("brk_shift") })
    expect(status).to be_success, err
    dump = PtmallocDump.load(path)
    expect(dump.header[:sbrk_base] % 16).not_to eq(0)
    main = dump.heaps.find { |h| h.kind == :sbrk }
    expect(main.start).to eq(dump.header[:sbrk_base] & ~15)
    first = dump.each_chunk.find { |c| c.state != :meta }
    expect((first.address + 16) % 16).to eq(0)
    expect(first.address).to be > dump.header[:sbrk_base]
    expect_valid_dump(dump)
    expect(dump.verify.compared).to eq([LibcFacts.mallinfo_name, "malloc_info"])
  end

  # Above the mmap threshold, _int_memalign moves the chunk's header to just before the aligned
  # address and leaves malloc's header at the mapping's start, stale. The blocks are made in a child
  # whose mmap threshold is fixed at 128 KiB (this process's has grown with the suite's frees).
  it "finds aligned mmapped chunks at their own header, not at the stale one, and reproduces glibc" do
    path = File.join(tmpdir, "aligned.dump")
    code = <<~RUBY
      require "etc"
      require "fiddle"
      require "json"
      P, S = Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T
      fn = ->(name, args, ret = P) { Fiddle::Function.new(Fiddle::Handle::DEFAULT[name], args, ret) }
      out = Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
      blocks = Array.new(20) do |i|
        alignment = 4096 << (i % 5) # 4 KiB .. 64 KiB
        fn.("posix_memalign", [P, S, S], Fiddle::TYPE_INT).call(out, alignment, 300 * 1024)
        [out[0, 8].unpack1("Q"), alignment, 300 * 1024]
      end
      page = Etc.sysconf(Etc::SC_PAGESIZE)
      blocks << [fn.("aligned_alloc", [S, S]).call(8192, 256 * 1024).to_i, 8192, 256 * 1024]
      blocks << [fn.("memalign", [S, S]).call(64, 200 * 1024).to_i, 64, 200 * 1024]
      blocks << [fn.("memalign", [S, S]).call(1 << 20, 400 * 1024).to_i, 1 << 20, 400 * 1024]
      blocks << [fn.("valloc", [S]).call(500 * 1024).to_i, page, 500 * 1024]
      blocks << [fn.("pvalloc", [S]).call(600 * 1024 + 1).to_i, page, 600 * 1024 + 1]
      # the chunk's own IS_MMAPPED bit, as glibc set it: from glibc 2.38 an aligned request may be served
      # by a free heap chunk that fits (_int_memalign searches the bins first)
      blocks.each { |b| b << Fiddle::Pointer.new(b[0] - 8)[0, 8].unpack1("Q").anybits?(2) }
      GC.disable
      PtmallocDump.dump(#{path.inspect}, ruby: false, oracles: true)
      puts JSON.generate(blocks)
    RUBY
    stdout, stderr, status = run_ruby(code, env: { "GLIBC_TUNABLES" => "glibc.malloc.mmap_threshold=131072" })
    expect(status).to be_success, stderr
    dump = PtmallocDump.load(path)
    expect_valid_dump(dump)
    blocks = JSON.parse(stdout)
    expect(blocks.size).to eq(25)
    expect(blocks.count { |b| b[3] }).to be >= 20
    blocks.each do |addr, alignment, bytes, mmapped|
      expect(addr % alignment).to eq(0)
      chunk = dump.chunk_at(addr - 16)
      expect(chunk).not_to be_nil, "no chunk at 0x#{(addr - 16).to_s(16)} (aligned to #{alignment})"
      expect(chunk.state).to eq(mmapped ? :mmapped : :in_use)
      expect(chunk.size).to be >= bytes
      next unless mmapped

      # the mapping starts with the stale header: the lead before the chunk is allocator metadata
      heap = chunk.heap
      expect(heap.kind).to eq(:mmapped_chunk)
      expect(dump.chunk_at(heap.start).state).to eq(:meta) if heap.start < chunk.address
      expect(chunk.address - heap.start).to be < alignment + 32
    end
    expect(dump.summary[:hblks]).to be >= blocks.count { |b| b[3] }
  end

  it "finds aligned mmapped chunks that realloc resized or moved (mremap_chunk) at their own header" do
    path = File.join(tmpdir, "aligned_realloc.dump")
    code = <<~RUBY
      require "fiddle"
      require "json"
      P, S = Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T
      fn = ->(name, args, ret = P) { Fiddle::Function.new(Fiddle::Handle::DEFAULT[name], args, ret) }
      memalign, realloc, malloc = fn.("memalign", [S, S]), fn.("realloc", [P, S]), fn.("malloc", [S])
      # neighbours in a row: the kernel maps each below the last, so a chunk grown cannot stay in place
      blocks = Array.new(24) do |i|
        malloc.call(160 * 1024) if i.odd?
        [memalign.call(4096 << (i % 5), 300 * 1024).to_i, 4096 << (i % 5)]
      end
      sizes = [500 * 1024, 200 * 1024, 1 << 20, 1000, 310 * 1024, 150 * 1024]
      blocks = blocks.each_with_index.map do |(ptr, alignment), i|
        bytes = sizes[i % sizes.size]
        moved = realloc.call(ptr, bytes).to_i
        # glibc's own header of the chunk: prev_size (its offset in the mapping) and size
        prev_size, size = Fiddle::Pointer.new(moved - 16)[0, 16].unpack("QQ")
        [moved, bytes, alignment, moved != ptr, prev_size, size & ~7]
      end
      GC.disable
      PtmallocDump.dump(#{path.inspect}, ruby: false, oracles: true)
      puts JSON.generate(blocks)
    RUBY
    stdout, stderr, status = run_ruby(code, env: { "GLIBC_TUNABLES" => "glibc.malloc.mmap_threshold=131072" })
    expect(status).to be_success, stderr
    dump = PtmallocDump.load(path)
    blocks = JSON.parse(stdout)
    expect(blocks.size).to eq(24)
    # the example is only worth its name if some chunks moved and some kept an offset above a page
    expect(blocks.count { |b| b[3] }).to be >= 4
    expect(blocks.count { |b| b[4] > 4096 && b[3] }).to be >= 2
    # from 2.43 prev_size's bit 0 says huge pages, and the mapping ends with a spare chunk header
    layout_243 = LibcFacts.glibc_version >= Gem::Version.new("2.43")
    blocks.each do |addr, bytes, alignment, _moved, prev_size, size|
      offset = layout_243 ? prev_size & ~1 : prev_size
      chunk = dump.chunk_at(addr - 16)
      expect(chunk).not_to be_nil, "no chunk at 0x#{(addr - 16).to_s(16)} (aligned to #{alignment}, realloc'd to #{bytes} B)"
      expect(chunk.state).to eq(:mmapped)
      expect(chunk.size).to be >= bytes
      heap = chunk.heap
      expect(heap.kind).to eq(:mmapped_chunk)
      expect(heap.start).to eq(chunk.address - offset)
      expect(heap.end - heap.start).to eq(offset + size + (layout_243 ? 16 : 0))
    end
    expect_valid_dump(dump)
  end

  # With mmap_threshold=4096, blocks of one page and more are mmapped one by one; the kernel merges
  # neighbouring mappings, also with the few pages where ld.so put the main thread's struct pthread
  # and static TLS. A chunk is found there too: glibc's invariants say where its mapping starts
  # (chunk - prev_size) and how long it is (prev_size + size), whatever VMA holds it.
  it "finds every small mmapped chunk, also those merged with the main thread's TLS pages" do
    # The kernel puts a mapping beside those pages now and then: blocks malloc'd before Ruby starts
    # (spec/fixtures/ext/early_mmap.c) make it likelier, and the seeds go on until it happened (at
    # most 24 runs, at least 4)
    early = build_fixture("early_mmap")
    merged_with_tls = 0
    24.times do |seed|
      break if seed >= 4 && merged_with_tls.positive?

      path = File.join(tmpdir, "small-mmapped-#{seed}.dump")
      code = <<~RUBY
        require "fiddle"
        require "json"
        P, S = Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T
        fn = ->(name, args, ret = P) { Fiddle::Function.new(Fiddle::Handle::DEFAULT[name], args, ret) }
        malloc, free = fn.("malloc", [S]), fn.("free", [P], Fiddle::TYPE_VOID)
        realloc = fn.("realloc", [P, S])
        self_thread = fn.("pthread_self", [], Fiddle::TYPE_UINTPTR_T).call
        srand(#{seed})
        GC.disable
        ptrs = Array.new(300) { malloc.call(4096 + rand(60 * 1024)).to_i }
        ptrs = ptrs.each_with_index.filter_map { |p, i| i % 7 == 0 ? free.call(p) && nil : p }
        ptrs = ptrs.each_with_index.map { |p, i| i % 5 == 0 ? realloc.call(p, 4096 + rand(60 * 1024)).to_i : p }
        ptrs += Fiddle::Pointer.new(Fiddle::Handle::DEFAULT["em_blocks"])[0, 8 * 8].unpack("Q*")
        # from glibc 2.43 prev_size's low bit is MMAP_HP and the mapping ends with one more header
        layout_243 = #{LibcFacts.glibc_version >= Gem::Version.new('2.43')}
        blocks = ptrs.filter_map do |p|
          prev_size, size = Fiddle::Pointer.new(p - 16)[0, 16].unpack("QQ")
          offset = layout_243 ? prev_size & ~1 : prev_size
          [p - 16 - offset, offset + (size & ~7) + (layout_243 ? 16 : 0)] if size & 2 != 0
        end
        vmas = File.readlines("/proc/self/maps").map { |l| l.split[0].split("-").map { |x| x.to_i(16) } }
        PtmallocDump.dump(#{path.inspect}, ruby: false, oracles: true)
        puts JSON.generate(blocks: blocks, vmas: vmas, self: self_thread)
      RUBY
      stdout, stderr, status = run_ruby(code, env: { "GLIBC_TUNABLES" => "glibc.malloc.mmap_threshold=4096", "LD_PRELOAD" => early })
      expect(status).to be_success, stderr
      r = JSON.parse(stdout, symbolize_names: true)
      dump = PtmallocDump.load(path)
      expect(dump.verify.differences.map(&:to_s)).to eq([])
      found = dump.heaps.select { |h| h.kind == :mmapped_chunk }.to_h { |h| [h.start, h.end - h.start] }
      expect(r[:blocks].size).to be > 200
      r[:blocks].each do |block, length|
        expect(found[block]).to eq(length), format("the mapping of %d bytes at %#x was not found", length, block)
      end
      tls = r[:vmas].find { |lo, hi| r[:self] >= lo && r[:self] < hi }
      # chunks Ruby itself mmapped early lie among ld.so's pages: glibc's hblks above counts them
      merged_with_tls += found.count { |block, _| block >= tls[0] && block < tls[1] } if tls
    end
    # the case this example is about did occur
    puts "    chunks found in the VMA of the main thread's TLS pages: #{merged_with_tls}"
    expect(merged_with_tls).to be > 0
  end

  # Ruby mmaps its object pages itself, and a String embedded in its slot holds any bytes: at an OS page
  # start inside an object page they can read as an mmapped chunk's header (prev_size 0, size 12,288
  # with IS_MMAPPED). Without the Ruby pass too, the scan must know where the object pages are.
  it "takes no Ruby object for an mmapped chunk header, also without the Ruby pass" do
    paths = %w[plain snapshot with_ruby].to_h { |n| [n, File.join(tmpdir, "lookalike-#{n}.dump")] }
    code = <<~RUBY
      GC.disable
      lookalike = ("\\0" * 8 + [0x3002].pack("Q") + "\\0" * 7).freeze
      held = Array.new(100_000) { lookalike.b }
      PtmallocDump.dump(#{paths['plain'].inspect}, ruby: false, oracles: true)
      PtmallocDump.dump(#{paths['snapshot'].inspect}, ruby: false, fork: true, wait: true, oracles: true)
      PtmallocDump.dump(#{paths['with_ruby'].inspect}, oracles: true)
      # how many OS page starts in the object pages read as a header
      starts = 0
      ObjectSpace.each_object(String) do |s|
        next unless s.equal?(held[0]) || (s.bytesize == 23 && s == lookalike)
        a = Fiddle.dlwrap(s) + 16
        starts += 1 if (a & 4095).zero?
      end
      puts starts
    RUBY
    stdout, stderr, status = run_ruby("require 'fiddle'\n#{code}")
    expect(status).to be_success, stderr
    expect(stdout.to_i).to be > 10
    paths.each_value do |path|
      dump = PtmallocDump.load(path)
      expect(dump.verify.differences.map(&:to_s)).to eq([])
      expect(dump.anomalies.map(&:kind)).not_to include(:mmapped_mismatch)
    end
  end

  # Any two words can sit at the start of a page: here a size of 2^63 with IS_MMAPPED, in a mapping
  # of three pages. The scan must reject it in bounded time, in process and in a snapshot.
  it "passes over a page start that reads as an mmapped chunk of an absurd size" do
    paths = %w[plain snapshot].to_h { |n| [n, File.join(tmpdir, "absurd-#{n}.dump")] }
    code = <<~RUBY
      require "fiddle"
      mmap = Fiddle::Function.new(Fiddle::Handle::DEFAULT["mmap"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT,
                                  Fiddle::TYPE_INT, Fiddle::TYPE_INT, Fiddle::TYPE_LONG], Fiddle::TYPE_VOIDP)
      region = mmap.call(nil, 3 * 4096, 3, 0x22, -1, 0) # PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
      region[0, 16] = [0, (1 << 63) | 2].pack("Q<Q<")
      region[4096, 16] = [0, (1 << 63) | 0x1002].pack("Q<Q<")
      PtmallocDump.dump(#{paths['plain'].inspect}, ruby: false, oracles: true)
      PtmallocDump.dump(#{paths['snapshot'].inspect}, ruby: false, fork: true, wait: true, oracles: true)
      puts region.to_i
    RUBY
    stdout, stderr, status = run_ruby(code, timeout: 60)
    expect(status).to be_success, stderr
    region = stdout.to_i
    paths.each_value do |path|
      dump = PtmallocDump.load(path)
      expect(dump.verify.differences.map(&:to_s)).to eq([])
      expect(dump.heaps.select { |h| h.start < region + 3 * 4096 && h.end > region }).to eq([])
    end
  end
end
