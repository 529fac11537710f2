# frozen_string_literal: true

require "json"
require "set"
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

RSpec.describe "pages the process never touched", :quiescent do
  # mmapped chunks stacked one below the other (the kernel maps top-down), each written on its first
  # page only: below every header but a Ruby-page-aligned one lies the untouched end of the chunk
  # mapped after it, where the structural check for a Ruby object page would look. The oracle is the
  # kernel: pagemap bit 63 of those pages before and after dumps in process and in a fork snapshot.
  it "stay untouched through dumps in process and in a fork snapshot, and are recorded absent" do
    paths = %w[self.dump snap.dump].map { |n| File.join(tmpdir, n) }
    out, err, status = run_ruby(<<~RUBY)
      require "etc"
      require "fiddle"
      require "json"
      PS = Etc.sysconf(Etc::SC_PAGESIZE)
      # Ruby 2.7 does not say; its gc.c aligns its pages to 1 << HEAP_PAGE_ALIGN_LOG, 16 KiB
      RPS = GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE] || 16 * 1024
      # mmapped chunks, fresh from the kernel: with a fixed threshold (glibc raises its own past a
      # freed mmapped chunk's size), once the free chunks large enough that Ruby's start left behind,
      # whose pages it touched, are used up (malloc serves those before it thinks of mmap)
      mallopt = Fiddle::Function.new(Fiddle::Handle::DEFAULT["mallopt"], [Fiddle::TYPE_INT, Fiddle::TYPE_INT],
                                     Fiddle::TYPE_INT)
      raise "mallopt failed" unless mallopt.call(-3, 128 * 1024) == 1 # M_MMAP_THRESHOLD
      mmapped = ->(a) { Fiddle::Pointer.new(a - 8)[0, 8].unpack1("Q")[1] == 1 } # IS_MMAPPED
      taken = Array.new(200) { Fiddle.malloc(297 * 1024) }.partition(&mmapped)
      blocks = taken[0].first(8)
      raise "8 mmapped chunks were not had in 200 blocks" unless blocks.size == 8
      blocks.each { |a| Fiddle::Pointer.new(a)[0, 64] = "t" * 64 }
      untouched = blocks.flat_map { |a| (((a + 64) / PS + 1)...((a + 297 * 1024) / PS)).map { |p| p * PS } }
      present = lambda do
        File.open("/proc/self/pagemap", "rb") do |f|
          untouched.select { |p| f.seek(p / PS * 8); f.read(8).unpack1("Q")[63] == 1 }
        end
      end
      headers = blocks.map { |a| a & ~(PS - 1) }
      looked_at = headers.map { |h| h & ~(RPS - 1) }.select { |b| untouched.include?(b) }
      before = present.call
      PtmallocDump.dump(#{paths[0].inspect}, ruby: false)
      after_self = present.call
      PtmallocDump.dump(#{paths[1].inspect}, ruby: false, fork: true, wait: true)
      puts JSON.generate(untouched: untouched, looked_at: looked_at, before: before, after_self: after_self,
                         after_snapshot: present.call)
    RUBY
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    expect(r[:untouched].size).to be >= 8 * 70
    # the setup is what it means to be: the pages untouched, and some the Ruby-page check would read
    expect(r[:before]).to eq([])
    expect(r[:looked_at]).not_to be_empty
    expect(r[:after_self]).to eq([])
    expect(r[:after_snapshot]).to eq([])
    paths.each do |path|
      dump = PtmallocDump.load(path)
      r[:untouched].each do |p|
        chunk = dump.chunk_containing(p)
        expect(chunk&.state).to eq(:mmapped), format("page 0x%x in %s", p, path)
        expect(dump.pages[chunk.heap.index].state_at(p)).to eq(:absent), format("page 0x%x in %s", p, path)
      end
    end
    expect(PtmallocDump.load(paths[1]).summary[:sharing_unknown_bytes]).to eq(0)
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
    expect(dump.summary[:sharing_unknown_bytes]).to eq(dump.summary[:resident_bytes])
    expect(dump.header[:page_sharing]).to be(false)
    expect(dump.pages.first.sharing_at(dump.arenas.first.top)).to eq(:unknown)
    expect_valid_dump(dump)
  end
end

# A fork snapshot's child maps every page of the process it copies, so its own pagemap calls none
# exclusive: the sharing it records is what the dumped process itself saw, read by it before the fork.
# The oracle is the kernel: /proc/self/pagemap bit 56, read by the dumped process just before its
# snapshot, for the interior pages of blocks it allocated (their edges hold other chunks' headers).
RSpec.describe "sharing in a fork snapshot" do
  # Ruby code for the dumped process: BLOCKS (64 KiB: arena chunks) and one 2 MiB block (an mmapped
  # chunk), every byte written; `pagemap_bits` reads bit 56 of pages and their presence (bit 63).
  setup = <<~RUBY
    require "fiddle"
    require "json"
    PS = Etc.sysconf(Etc::SC_PAGESIZE)
    BLOCKS = Array.new(24) { Fiddle.malloc(64 * 1024) } + [Fiddle.malloc(2 * 1024 * 1024)]
    SIZES = Array.new(24, 64 * 1024) + [2 * 1024 * 1024]
    BLOCKS.zip(SIZES).each { |a, n| Fiddle::Pointer.new(a)[0, n] = "s" * n }
    def interior(a, n)
      ((a + PS - 1) / PS + 1).upto((a + n) / PS - 2).map { |p| p * PS }
    end
    def pagemap_bits(pages)
      File.open("/proc/self/pagemap", "rb") do |f|
        pages.to_h do |p|
          f.seek(p / PS * 8)
          e = f.read(8).unpack1("Q")
          [p, { present: e[63] == 1, exclusive: e[56] == 1 }]
        end
      end
    end
  RUBY

  def sharing_of(dump, page)
    chunk = dump.chunk_containing(page)
    dump.pages[chunk.heap.index].sharing_at(page)
  end

  # Shared bytes as the explorer paints them: its packed page bytes (bit 2 shared), over each heap's
  # bounds, as the summary counts chunks' bytes.
  def explorer_shared_bytes(dump)
    data = PtmallocDump::Explorer.new(dump).data
    pages = data[:pages].unpack1("m0").bytes
    ps = data[:pageSize]
    data[:heaps].sum do |h|
      (0...h[:pages]).sum do |i|
        next 0 unless pages[h[:firstPage] + i].allbits?(1 | 4)

        lo = [h[:pageBase] + i * ps, h[:start]].max
        hi = [h[:pageBase] + (i + 1) * ps, h[:end]].min
        hi > lo ? hi - lo : 0
      end
    end
  end

  it "records a never-forked process's private pages as exclusive, and every figure agrees" do
    path = File.join(tmpdir, "private.dump")
    out, err, status = run_ruby(<<~RUBY)
      require "etc"
      #{setup}
      pages = BLOCKS.zip(SIZES).flat_map { |a, n| interior(a, n) }
      bits = pagemap_bits(pages)
      PtmallocDump.dump(#{path.inspect}, fork: true, wait: true, ruby: false)
      puts JSON.generate(bits.map { |p, b| [p, b[:present], b[:exclusive]] })
    RUBY
    expect(status).to be_success, err
    kernel = JSON.parse(out)
    expect(kernel.size).to be >= 24 * 13 + 500
    # the setup is what it means to be: every one of those pages present and the process's alone
    expect(kernel.map { |_, present, excl| [present, excl] }.uniq).to eq([[true, true]])
    dump = PtmallocDump.load(path)
    expect(dump.header).to include(fork_snapshot: true, page_sharing: true, residency_source: :pagemap)
    expect(kernel.map { |p, _, _| sharing_of(dump, p) }.uniq).to eq([:exclusive])
    expect(dump.heaps.map(&:kind)).to include(:mmapped_chunk)

    visualize = ->(*args) { run_command({}, RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, *args) }
    explained, err, status = visualize.call("--explain", format("0x%x", kernel.first.first + 100), path)
    expect(status).to be_success, err
    page_line = explained.lines.grep(/^\s*page\b/).first
    expect(page_line).to match(/present/)
    expect(page_line).not_to match(/shared|unknown/)

    summary = dump.summary
    json, err, status = visualize.call("--json", path)
    expect(status).to be_success, err
    from_json = JSON.parse(json, symbolize_names: true)[:summary]
    expect(from_json).to include(shared_bytes: summary[:shared_bytes], sharing_unknown_bytes: 0)
    expect(explorer_shared_bytes(dump)).to eq(summary[:shared_bytes])
    text, err, status = visualize.call("--summary", path)
    expect(status).to be_success, err
    expect(text).to include("(#{PtmallocDump::FormatHelpers.human_bytes(summary[:shared_bytes])} still shared " \
                            "with another process)")
    # what else the process shares (pages of the interpreter it has not written since the exec) is
    # little beside the planted megabytes, which are all its own
    expect(summary[:shared_bytes]).to be < kernel.size * dump.header[:page_size] / 4
  end

  it "records pages a forked process still shares with its parent as shared, and those it wrote as exclusive" do
    path = File.join(tmpdir, "forked.dump")
    out, err, status = run_ruby(<<~RUBY)
      require "etc"
      #{setup}
      r, w = IO.pipe
      pid = fork do
        r.close
        # half of the blocks written since the fork: their pages are this process's own now
        written = BLOCKS.zip(SIZES).each_with_index.select { |_, i| i.even? }.map(&:first)
        written.each { |a, n| Fiddle::Pointer.new(a)[0, n] = "c" * n }
        pages = BLOCKS.zip(SIZES).flat_map { |a, n| interior(a, n) }
        mine = written.flat_map { |a, n| interior(a, n) }
        bits = pagemap_bits(pages)
        PtmallocDump.dump(#{path.inspect}, fork: true, wait: true, ruby: false)
        w.write(JSON.generate(pages: bits.map { |p, b| [p, b[:present], b[:exclusive]] }, written: mine))
        w.close
        exit!(0)
      end
      w.close
      result = r.read
      _, st = Process.wait2(pid)
      abort "the forked process failed" unless st.success?
      puts result
    RUBY
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    written = r[:written].to_set
    kernel = r[:pages].to_h { |p, present, excl| [p, [present, excl]] }
    expect(kernel.values.map(&:first).uniq).to eq([true])
    # the kernel's view: written pages the process's own, the rest still shared with the parent
    expect(kernel.slice(*written).values.map(&:last).uniq).to eq([true])
    expect(kernel.reject { |p, _| written.include?(p) }.values.map(&:last).uniq).to eq([false])
    dump = PtmallocDump.load(path)
    expect(dump.header).to include(fork_snapshot: true, page_sharing: true)
    kernel.each do |p, (_, excl)|
      expect(sharing_of(dump, p)).to eq(excl ? :exclusive : :shared), format("page 0x%x", p)
    end
    shared = kernel.count { |_, (_, excl)| !excl } * dump.header[:page_size]
    summary = dump.summary
    expect(summary[:shared_bytes]).to be >= shared
    expect(explorer_shared_bytes(dump)).to eq(summary[:shared_bytes])
    expect(summary[:sharing_unknown_bytes]).to eq(0)
    explained = PtmallocDump::Explanation.new(dump, kernel.keys.find { |p| !written.include?(p) }).to_s
    expect(explained.lines.grep(/^\s*page\b/).first).to match(/present, shared with another process/)
  end
end
