# frozen_string_literal: true

require "spec_helper"
require "zlib"

RSpec.describe PtmallocDump do
  it "returns the summary from dump, computed from the chunk records" do
    path = File.join(tmpdir, "a.dump")
    summary = described_class.dump(path)
    expect(summary[:path]).to eq(path)
    %i[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost tcache_count tcache_bytes
       in_use_bytes resident_bytes swapped_bytes absent_bytes free_resident_bytes largest_free arenas].each do |k|
      expect(summary).to have_key(k)
    end
    expect(summary[:arena]).to eq(summary[:uordblks] + summary[:fordblks])
  end

  it "works from any directory with a relative path" do
    Dir.chdir(tmpdir) { described_class.dump("rel.dump") }
    expect(File.exist?(File.join(tmpdir, "rel.dump"))).to be(true)
  end

  it "leaves glibc's malloc_info() and mallinfo2() out with oracles: false, and verify says so" do
    path = File.join(tmpdir, "no-oracles.dump")
    described_class.dump(path, oracles: false)
    dump = described_class.load(path)
    expect(dump.header).to include(oracles_captured: false, oracles_off: true, oracles_outgrown: false, malloc_info: "")
    expect(dump.header[:mallinfo2].values).to all(eq(0))
    v = dump.verify
    expect(v.differences).to eq([])
    mallinfo = LibcFacts.mallinfo_name
    expect(v.notes).to eq(["glibc's #{mallinfo} and malloc_info were not called (oracles: false): nothing to compare the walk with"])
    expect(v.status).to eq(:nothing_compared)
    expect(v).not_to be_ok
    expect(PtmallocDump::TextSummary.new(dump).to_s).to include("verify: nothing compared: glibc's #{mallinfo} and malloc_info were not called (oracles: false)")
    report = File.read(PtmallocDump::Report.new(dump, tmpdir).write)
    expect(report).to include("Dumped with oracles: false: glibc&#39;s counters were not called")
    described_class.dump(path)
    expect(described_class.load(path).header).to include(oracles_captured: true, oracles_off: false, oracles_skipped: false)
  end

  it "leaves glibc's counters out by default when the free lists hold more chunks than oracles: :auto follows, and says so" do
    out, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      require "json"
      # every other block freed: its neighbours in use, so each stays a chunk of its own on a bin
      blocks = Array.new(2 * (PtmallocDump::ORACLES_AUTO_MAX_ENTRIES + 20_000)) { Fiddle.malloc(200) }
      blocks.each_with_index { |b, i| Fiddle.free(b) if i.even? }
      dir = #{tmpdir.dump}
      PtmallocDump.dump(File.join(dir, "auto.dump"))
      PtmallocDump.dump(File.join(dir, "always.dump"), oracles: true)
      PtmallocDump.dump(File.join(dir, "fork.dump"), fork: true, wait: true)
      auto, always, forked = %w[auto always fork].map { |n| PtmallocDump.load(File.join(dir, n + ".dump")) }
      mi = always.header[:mallinfo2]
      puts JSON.dump(auto: auto.header.slice(:oracles_captured, :oracles_skipped, :oracles_off, :malloc_info),
                     auto_entries: PtmallocDump::Verification.list_entries(auto), auto_notes: auto.verify.notes,
                     auto_compared: auto.verify.compared, report: File.read(PtmallocDump::Report.new(auto, dir).write),
                     always: always.header.slice(:oracles_captured, :oracles_skipped), always_ok: always.verify.ok?,
                     always_compared: always.verify.compared,
                     glibc_entries: mi[:ordblks] - always.arenas.size + mi[:smblks],
                     always_entries: PtmallocDump::Verification.list_entries(always),
                     forked: forked.header.slice(:oracles_captured, :oracles_skipped), forked_compared: forked.verify.compared)
    RUBY
    expect(status).to be_success, err
    r = JSON.parse(out.lines.last, symbolize_names: true)
    limit = PtmallocDump::ORACLES_AUTO_MAX_ENTRIES
    # glibc's own count of its list entries (ordblks less one top per arena, plus smblks) says the
    # lists were long: the walk's count matches it, and the default dump left the counters out
    expect(r[:glibc_entries]).to be > limit + 10_000
    expect(r[:always_entries]).to eq(r[:glibc_entries])
    expect(r[:auto_entries]).to be_within(1000).of(r[:glibc_entries])
    expect(r[:auto]).to eq(oracles_captured: false, oracles_skipped: true, oracles_off: false, malloc_info: "")
    expect(r[:auto_compared]).to eq([])
    expect(r[:auto_notes]).to eq(["glibc's #{LibcFacts.mallinfo_name} and malloc_info were not called: the free " \
                                  "lists held #{r[:auto_entries]} chunks, more than the #{limit} oracles: :auto has " \
                                  "glibc follow again (oracles: true calls them always): nothing to compare the walk " \
                                  "with"])
    expect(r[:report]).to include("glibc&#39;s counters were not called: the free lists held #{r[:auto_entries]} chunks")
    # oracles: true calls them on the same heap, and the walk reproduces them
    expect(r[:always]).to eq(oracles_captured: true, oracles_skipped: false)
    expect(r[:always_ok]).to be(true)
    expect(r[:always_compared]).to eq([LibcFacts.mallinfo_name, "malloc_info"])
    # a fork snapshot's child calls them: its time is no pause of the process
    expect(r[:forked]).to eq(oracles_captured: true, oracles_skipped: false)
    expect(r[:forked_compared]).to eq([LibcFacts.mallinfo_name, "malloc_info"])
  end

  it "refuses an oracles: value other than true, false or :auto" do
    expect { described_class.dump(File.join(tmpdir, "x.dump"), oracles: :always) }
      .to raise_error(ArgumentError, "oracles: must be true, false or :auto, not :always")
    expect(File.exist?(File.join(tmpdir, "x.dump"))).to be(false)
  end

  # its examples check the dump against glibc's counters: taken with no native thread of a finished
  # Ruby thread exiting (and emptying its tcache) meanwhile
  describe PtmallocDump::Dump, :quiescent do
    subject(:dump) { dump_and_load }

    it "has the header fields" do
      h = dump.header
      expect(h).to include(format_version: 1, pid: Process.pid, page_size: 4096, glibc_version: PtmallocDump.libc_info[:glibc_version])
      expect(h[:time]).to be_within(60).of(Time.now)
      expect(h[:main_arena]).to eq(LibcFacts.main_arena)
      # libc6-dbg's file where it is installed, else found by structure
      expect(h[:symbol_source]).to eq(LibcFacts.symbols_installed? ? :build_id : :heuristic)
      expect(h[:mallinfo2].keys).to eq(%i[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost])
      expect(h[:malloc_info]).to start_with('<malloc version="1">')
    end

    it "lists arenas with their heaps, main first" do
      expect(dump.arenas.first).to be_main
      expect(dump.arenas.drop(1)).to all(satisfy { |a| !a.main? })
      dump.arenas.each do |a|
        expect(a.heaps).not_to be_empty
        expect(a.heaps.sum(&:size)).to eq(a.system_mem)
        expect(a.top).to be_between(a.heaps.last.start, a.heaps.last.end)
      end
    end

    it "enumerates chunks, with an Enumerator without a block" do
      enum = dump.each_chunk
      expect(enum).to be_a(Enumerator)
      expect(enum.size).to eq(dump.chunk_count)
      chunks = enum.to_a
      expect(chunks.size).to eq(dump.chunk_count)
      expect(chunks.map(&:state).uniq - PtmallocDump::STATES).to eq([])
      expect(chunks.count { |c| c.state == :top }).to eq(dump.arenas.size)
      c = chunks.find { |x| x.state == :in_use }
      expect(c.arena).to be_a(PtmallocDump::Arena)
      expect(c.heap.range).to cover(c.address)
      expect(dump.chunk_at(c.address)).to eq(c)
      expect(dump.chunk_containing(c.address + c.size - 1)).to eq(c)
    end

    it "gives residency per heap" do
      expect(dump.pages.size).to eq(dump.heaps.size)
      ps = dump.header[:page_size]
      dump.pages.zip(dump.heaps).each do |map, heap|
        expect(map.heap).to equal(heap)
        expect(map.size).to eq(((heap.end - map.page_base) + ps - 1) / ps)
      end
      # main_arena's top, in whichever heap holds it (the kernel's layout puts the break first here,
      # qemu-user's need not)
      top = dump.arenas.first.top
      expect(dump.pages[dump.chunk_containing(top).heap.index].state_at(top)).to eq(:present)
    end

    it "verifies against glibc's counters" do
      v = dump.verify
      expect(v).to be_ok
      expect(v.consistent_arenas).to eq(dump.arenas.map(&:index))
      expect(v.to_s).to include("reproduces #{LibcFacts.mallinfo_name} and malloc_info exactly")
    end

    it "reports a difference when the captured counters disagree" do
      bytes = File.binread(dump.path).b
      arena = dump.header[:mallinfo2][:arena]
      at = bytes.index([3, 0, 1, 80].pack("VVQ<Q<")) + 24 # the MALLINFO2 section's payload: arena first
      expect(bytes[at, 8].unpack1("Q<")).to eq(arena)
      bytes[at, 8] = [arena + 4096].pack("Q<")
      body = bytes.size - 56
      bytes[body + 24 + 24, 4] = [Zlib.crc32(bytes[0, body])].pack("V") # a valid file again
      File.binwrite(dump.path, bytes)
      v = PtmallocDump.load(dump.path).verify
      expect(v).not_to be_ok
      expect(v.differences.map(&:to_s)).to eq(["#{v.mallinfo_name} arena: glibc says #{arena + 4096}, the walk found #{arena}"])
    end
  end
end
