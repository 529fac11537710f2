# frozen_string_literal: true

require "spec_helper"

RSpec.describe "page residency", :quiescent do
  it "shows the interior pages of a block released by malloc_trim(0) as absent, live written pages as present" do
    NativeThreads.start(0)
    big, guard = NativeThreads.malloc(0, [96 * 1024, 64]) # below the mmap threshold: an arena chunk
    live = NativeThreads.malloc(0, Array.new(16, 4000))
    live.each { |a| Fiddle::Pointer.new(a)[0, 4000] = "x" * 4000 }
    Fiddle::Pointer.new(big)[0, 96 * 1024] = "y" * (96 * 1024) # every page of it resident first
    path = File.join(tmpdir, "trim.dump")
    GC.disable
    begin
      PtmallocDump.dump(path, ruby: false) # warm the call path
      NativeThreads.prepare_free(0, [big]).call
      SpecHelpers::Libc.malloc_trim(0)
      PtmallocDump.dump(path, ruby: false)
      dump = PtmallocDump.load(path)
      chunk = dump.chunk_containing(big)
      expect(chunk).to be_free
      map = dump.pages[chunk.heap.index]
      page = dump.header[:page_size]
      first = (big + 2 * page) & ~(page - 1) # past the chunk header and its free-list words
      last = big + 96 * 1024 - page
      interior = (first...last).step(page).to_a
      expect(interior.size).to be >= 20
      expect(interior.map { |a| map.state_at(a) }.uniq).to eq([:absent])
      live.each { |a| expect(map.state_at(a)).to eq(:present) }
      expect(dump.summary[:free_released_bytes]).to be >= interior.size * page
      expect(dump.header[:residency_source]).to eq(:pagemap)
    ensure
      GC.enable
      NativeThreads.prepare_free(0, live + [guard]).call
      NativeThreads.stop(0)
    end
  end

  it "marks private pages as exclusive and pages still shared with a parent as not" do
    block = NativeThreads.malloc(-1, [64 * 1024]).first
    Fiddle::Pointer.new(block)[0, 64 * 1024] = "z" * (64 * 1024)
    path = File.join(tmpdir, "child.dump")
    pid = fork do
      # nothing written since the fork: the block's pages are still shared copy-on-write
      PtmallocDump.dump(path, ruby: false)
      exit!(0)
    end
    _, status = Process.wait2(pid)
    expect(status.success?).to be(true)
    dump = PtmallocDump.load(path)
    chunk = dump.chunk_containing(block)
    map = dump.pages[chunk.heap.index]
    page = dump.header[:page_size]
    pages = ((block + page) & ~(page - 1)).step(block + 60 * 1024, page).to_a
    expect(pages.map { |a| map.state_at(a) }.uniq).to eq([:present])
    expect(pages.map { |a| map.exclusive?(a) }.uniq).to eq([false])
    expect(dump.summary[:shared_bytes]).to be > 0
    NativeThreads.prepare_free(-1, [block]).call
  end
end

RSpec.describe "the mincore fallback", :quiescent do
  it "records residency from mincore when pagemap is not used, and says so" do
    path = File.join(tmpdir, "mincore.dump")
    _out, err, status = run_ruby("PtmallocDump.dump(#{path.inspect})", env: { "PTMALLOC_DUMP_RESIDENCY" => "mincore" })
    expect(status).to be_success, err
    dump = PtmallocDump.load(path)
    expect(dump.header[:residency_source]).to eq(:mincore)
    expect(dump.pages.first.state_at(dump.arenas.first.top)).to eq(:present)
    expect(dump.summary[:resident_bytes]).to be > 0
    expect(dump.summary[:shared_bytes]).to eq(0) # mincore cannot tell sharing
    expect_valid_dump(dump)
  end
end
