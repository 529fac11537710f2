# frozen_string_literal: true

require "json"
require "spec_helper"
require_relative "../script/glibc_layouts"

# glibc's allocator called directly, on the calling thread.
module GlibcCalls
  MALLOC = Fiddle::Function.new(Fiddle::Handle::DEFAULT["malloc"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_VOIDP)
  REALLOC = Fiddle::Function.new(Fiddle::Handle::DEFAULT["realloc"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T],
                                 Fiddle::TYPE_VOIDP)
  FREE = Fiddle::Function.new(Fiddle::Handle::DEFAULT["free"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOID)
  # Far above DEFAULT_MMAP_THRESHOLD_MAX (32 MiB), the most the dynamic threshold grows to, and
  # above any top or free chunk the earlier examples can have left (trimming starts at 64 MiB at
  # most): mmapped.
  BIG = 256 << 20
end

# Rules that changed between glibc versions, each asserted on every version with what that version
# does: mmapped chunks' layout and accounting, threads without a tcache, mmapped chunks in a tcache.
RSpec.describe "the walk under this glibc's own rules", :quiescent do
  def glibc_at_least?(version)
    LibcFacts.glibc_version >= Gem::Version.new(version)
  end

  # [prev_size, size] of the chunk whose user pointer is mem
  def header(mem)
    Fiddle::Pointer.new(mem - 16)[0, 16].unpack("Q<2")
  end

  it "finds an mmapped chunk where its mapping starts, sized as its header says" do
    mem = GlibcCalls::MALLOC.call(GlibcCalls::BIG).to_i
    begin
      prev_size, size = header(mem)
      expect(size & 7).to eq(2) # IS_MMAPPED alone
      dump = dump_and_load(ruby: false)
      chunk = dump.chunk_at(mem - 16)
      expect(chunk.state).to eq(:mmapped)
      expect(chunk.size).to eq(size & ~7)
      expect(chunk.heap.kind).to eq(:mmapped_chunk)
      # glibc 2.43 (mmap_set_chunk) keeps bit 0 of prev_size for MMAP_HP and ends the mapping with a
      # 16-byte next-chunk header slot; before, prev_size is the offset and the chunk ends the mapping
      offset = glibc_at_least?("2.43") ? prev_size & ~1 : prev_size
      slot = glibc_at_least?("2.43") ? 16 : 0
      expect(chunk.heap.start).to eq(mem - 16 - offset)
      expect(chunk.heap.end).to eq(chunk.end_address + slot)
      expect(chunk.heap.size % 4096).to eq(0)
      expect(dump.chunk_at(chunk.end_address)).to have_attributes(state: :meta, size: 16) if slot.positive?
      expect_valid_dump(dump)
    ensure
      GlibcCalls::FREE.call(mem)
    end
  end

  it "reconciles glibc's mmapped byte count after mremap, or says what glibc miscounted" do
    mem = GlibcCalls::MALLOC.call(GlibcCalls::BIG).to_i
    begin
      mem = GlibcCalls::REALLOC.call(mem, GlibcCalls::BIG + (8 << 20)).to_i # mremap_chunk
      mem = GlibcCalls::REALLOC.call(mem, GlibcCalls::BIG + (16 << 20)).to_i
      dump = dump_and_load(ruby: false)
      expect(dump.chunk_at(mem - 16).state).to eq(:mmapped)
      glibc = dump.header[:mallinfo2][:hblkhd]
      verification = dump.verify
      expect(dump.header[:mremap_overcounts]).to be(glibc_at_least?("2.43"))
      if glibc_at_least?("2.43")
        # mremap_chunk adds 16 bytes (CHUNK_HDR_SZ) too many to mp_.mmapped_mem per remap, for good:
        # the two above, and whatever this process remapped before
        expect(glibc - dump.summary[:hblkhd]).to be >= 32
        expect((glibc - dump.summary[:hblkhd]) % 16).to eq(0)
        expect(verification.notes.join).to include("mremap_chunk counted")
      else
        expect(glibc).to eq(dump.summary[:hblkhd])
        expect(verification.notes).to eq([])
      end
      expect_valid_dump(dump)
    ensure
      GlibcCalls::FREE.call(mem)
    end
  end

  it "reports no tcache for a thread that has none, whatever glibc's `tcache` holds then" do
    tid = NativeThreads.start(0)
    begin
      # an mmapped request: glibc before 2.42 makes the thread's tcache on any malloc; 2.42 only for
      # tcache sizes; 2.43 only on a free or when _int_malloc stashes, and until then points `tcache`
      # at __tcache_dummy, an all-zero struct in libc's read-only data
      big = NativeThreads.malloc(0, [GlibcCalls::BIG])
      dump = dump_and_load(ruby: false)
      thread = dump.threads.find { |t| t.tid == tid }
      expect(thread).not_to be_nil
      if glibc_at_least?("2.42")
        expect(thread.tcache).to be_nil
        expect(thread.tcache_count).to eq(0)
      elsif dump.header[:symbol_source] != :heuristic
        expect(thread.tcache).not_to be_nil
        expect(dump.chunk_at(thread.tcache - 16)).to be_tcache_struct
      end
      expect_valid_dump(dump)

      # a small block freed by the thread: every version caches it in a tcache of the thread's own
      small = NativeThreads.malloc(0, [24])
      NativeThreads.prepare_free(0, small).call
      dump = dump_and_load(ruby: false)
      thread = dump.threads.find { |t| t.tid == tid }
      expect(thread.tcache).not_to be_nil
      expect(dump.chunk_at(thread.tcache - 16)).to be_tcache_struct
      expect(dump.chunk_at(small.first - 16).state).to eq(:tcache)
      expect_valid_dump(dump)
      NativeThreads.prepare_free(0, big).call
    ensure
      NativeThreads.stop(0)
    end
  end

  it "leaves out what heap_trim gives back: a block freed into a thread's top, past the shrunk heap's end" do
    # A fresh process, so the worker's arena is new and its blocks come from top in order; a fixed
    # trim threshold, so no earlier free of an mmapped chunk has raised it
    support = File.join(SpecHelpers::ROOT, "spec", "support")
    path = File.join(tmpdir, "trim.dump")
    out, err, status = run_ruby(<<~RUBY, env: { "MALLOC_TRIM_THRESHOLD_" => "131072" })
      require "fiddle"
      require "json"
      require "rspec"
      require #{File.join(support, 'helpers').inspect}
      require #{File.join(support, 'native_threads').inspect}
      NativeThreads.start(0)
      # glibc 2.43 makes a thread's tcache on its first free, from top: before the blocks, not after
      NativeThreads.prepare_free(0, NativeThreads.malloc(0, [8])).call
      PtmallocDump.dump(#{path.inspect}, ruby: false)
      fill = PtmallocDump.load(#{path.inspect}).header[:tcache_count]
      small = NativeThreads.malloc(0, [300] * fill)
      big = NativeThreads.malloc(0, [64 << 10] * 40)
      last = NativeThreads.malloc(0, [300]).first
      PtmallocDump.dump(#{path.inspect}, ruby: false)
      before = PtmallocDump.load(#{path.inspect})
      b = before.chunk_at(last - 16)
      NativeThreads.prepare_free(0, small).call # the thread's tcache bin for 320-byte chunks is full now
      NativeThreads.prepare_free(0, big + [last]).call # to the arena: merged with each other and with top
      PtmallocDump.dump(#{path.inspect}, ruby: false)
      after = PtmallocDump.load(#{path.inspect})
      heap = after.heaps.find { |h| h.start == b.heap.start }
      top = after.chunk_containing(heap.end - 1)
      v = after.verify
      puts JSON.generate(
        before: { kind: b.heap.kind, state: b.state, next: before.chunk_at(b.address + b.size)&.state,
                  big: big.map { |m| before.chunk_at(m - 16)&.state }.uniq, end: b.heap.end },
        after: { last: after.chunk_containing(last - 16)&.address, covered: after.heaps.any? { |h| h.range.cover?(last) },
                 end: heap.end, top: top.state, top_start: top.address, small: small.map { |m| after.chunk_at(m - 16)&.state }.uniq,
                 top_pad: after.header[:top_pad], page: after.header[:page_size],
                 problems: v.differences.map(&:to_s) + v.anomalies.map(&:to_s) },
        first_big: big.first - 16, last: last - 16)
      NativeThreads.stop(0)
    RUBY
    expect(status).to be_success, out + err
    r = JSON.parse(out.lines.last, symbolize_names: true)
    # before the frees: the last block is the thread heap's last chunk before top, the big ones in use
    expect(r[:before].values_at(:kind, :state, :next, :big)).to eq(["mmap_heap", "in_use", "top", ["in_use"]])
    a = r[:after]
    expect(a[:small]).to eq(["tcache"])
    # after them: top starts at or before the first big block, and heap_trim cut the heap down to
    # top's pad, so the last block's address is past the heap's end, in no chunk and no region
    expect(a[:top]).to eq("top")
    expect(a[:top_start]).to be <= r[:first_big]
    expect(a[:end]).to be < r[:last]
    expect(a[:end]).to be < r[:before][:end]
    expect(a[:end] - a[:top_start]).to be <= a[:top_pad] + 2 * a[:page]
    expect(a[:last]).to be_nil
    expect(a[:covered]).to be(false)
    expect(a[:problems]).to eq([]) # mallinfo2 and malloc_info agree with the smaller heap
  end

  it "classifies an mmapped chunk that glibc keeps in a large tcache bin" do
    # A fixed mmap threshold from the start keeps a 3 MB block mmapped; glibc.malloc.tcache_max
    # raises tcache_max_bytes into the large tcache bins (2.42+: the block goes to the 2-4 MiB bin,
    # which Ruby itself hardly fills; above 1032 the tunable means nothing before, and is not set)
    env = { "MALLOC_MMAP_THRESHOLD_" => "131072" }
    env["GLIBC_TUNABLES"] = "glibc.malloc.tcache_max=4000000" if glibc_at_least?("2.42")
    path = File.join(tmpdir, "tcache_mmapped.dump")
    out, err, status = run_ruby(<<~RUBY, env: env)
      require "fiddle"
      require "json"
      f = Fiddle::Handle::DEFAULT
      malloc = Fiddle::Function.new(f["malloc"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_VOIDP)
      free = Fiddle::Function.new(f["free"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOID)
      mem = malloc.call(3_000_000).to_i
      flags = Fiddle::Pointer.new(mem - 8)[0, 8].unpack1("Q<") & 7
      PtmallocDump.dump(#{path.inspect}, ruby: false)
      free.call(mem)
      PtmallocDump.dump(#{path.inspect}, ruby: false)
      d = PtmallocDump.load(#{path.inspect})
      c = d.chunk_at(mem - 16)
      v = d.verify
      puts JSON.generate(flags: flags, state: c&.state, kind: c&.heap&.kind,
                         problems: v.differences.map(&:to_s) + v.anomalies.map(&:to_s))
    RUBY
    expect(status).to be_success, out + err
    result = JSON.parse(out.lines.last, symbolize_names: true)
    expect(result[:flags]).to eq(2) # mmapped
    if glibc_at_least?("2.43")
      # __libc_free no longer keeps mmapped chunks out of the tcache: the mapping stays, cached
      expect(result.values_at(:state, :kind)).to eq(%w[tcache mmapped_chunk])
    else
      # munmap_chunk: the mapping is gone
      expect(result[:state]).to be_nil
    end
    expect(result[:problems]).to eq([])
  end
end

# The layout table (capture/layout.c, capture/arch.h) against the running libc's own debug info: every
# offset and size the walker reads for this glibc on this CPU, as gdb reads them from the DWARF
# (script/glibc_layouts.rb does the same for any libc6-dbg package, of any architecture).
RSpec.describe "the layout table for this glibc" do
  it "has every offset and size of malloc's structures and struct pthread as this libc's DWARF says" do
    missing = GdbOracle.missing
    raise "the gdb oracle needs #{missing}" if missing

    dir = GdbOracle.debug_dir || "/usr/lib/debug"
    file = File.join(dir, ".build-id", LibcFacts.build_id[0, 2], "#{LibcFacts.build_id[2..]}.debug")
    expect(File).to exist(file)
    arch = GlibcLayouts.machine(file)
    expect(arch).to eq(RbConfig::CONFIG["host_cpu"] == "aarch64" ? "aarch64" : "x86-64")
    want = GlibcLayouts::LayoutTable.load.for(LibcFacts.glibc_version.segments[1], arch)
    got = GlibcLayouts.measure(file, want.keys, gdb: "gdb")
    expect(got.compact.size).to be > 30 # gdb read the structs, not only the members a version lacks
    expect(got).to eq(want)
  end
end
