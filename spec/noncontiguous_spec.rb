# frozen_string_literal: true

require "json"
require "spec_helper"

# A main arena that is not one brk region: when sbrk fails (here a page mapped right above the
# break), glibc's sysmalloc continues the main arena in mmapped regions, marks it non-contiguous and
# closes each old top with a pair of fenceposts. The heap is built in a child process (blocking the
# break of this one would change every later example), dumped there in process and in fork
# snapshots, with symbols and by structure, and checked here.
RSpec.describe "a non-contiguous main arena" do
  NONCONTIGUOUS_SEED = 1313
  NONCONTIGUOUS_DUMPS = {
    in_process: { ruby: false },
    in_process_by_structure: { ruby: false, symbols: :heuristic },
    snapshot: { ruby: false, fork: true, wait: true },
    snapshot_by_structure: { ruby: false, fork: true, wait: true, symbols: :heuristic }
  }.freeze

  def self.child_code(dir, fixture, debug_dir)
    support = File.join(SpecHelpers::ROOT, "spec", "support")
    <<~RUBY
      require "fiddle"
      require "fileutils"
      require "json"
      %w[helpers native_threads heap_scenario].each { |f| require File.join(#{support.inspect}, f) }
      lib = Fiddle.dlopen(#{fixture.inspect})
      block_brk = Fiddle::Function.new(lib["bb_block_brk"], [], Fiddle::TYPE_INT)
      dir = #{dir.inspect}
      # some allocations in the brk region first (the interpreter's own), then the break is blocked
      blocked = block_brk.call == 1
      scenario = HeapScenario.new(#{NONCONTIGUOUS_SEED}, threads: 4, allocations: 20_000, max: 32 * 1024)
      GC.disable
      PtmallocDump.dump(File.join(dir, "warm.dump"), ruby: false)
      scenario.build { PtmallocDump.dump(File.join(dir, "before.dump"), ruby: false) }
      #{NONCONTIGUOUS_DUMPS.map { |name, opts| "PtmallocDump.dump(File.join(dir, #{"#{name}.dump".inspect}), debug_dir: #{debug_dir.inspect}, **#{opts.inspect})" }.join("\n")}
      Dir.mkdir(File.join(dir, "check"))
      check = PtmallocDump.check_symbol_free(File.join(dir, "check"), debug_dir: #{debug_dir.inspect})
      puts JSON.generate(blocked: blocked, live: scenario.live.to_a, freed: scenario.freed.to_a,
                         freed_by: scenario.freed_by.to_a, check: check)
      scenario.cleanup
    RUBY
  end

  before(:all) do
    @dir = Dir.mktmpdir("ptmd-noncontiguous")
    fixture = build_fixture("brk_block")
    stdout, stderr, status = run_ruby(self.class.child_code(@dir, fixture, LibcFacts.debug_dir))
    raise "the child failed: #{stderr}" unless status.success?

    @result = JSON.parse(stdout, symbolize_names: true)
    @before = PtmallocDump.load(File.join(@dir, "before.dump"))
    @dumps = NONCONTIGUOUS_DUMPS.keys.to_h { |name| [name, PtmallocDump.load(File.join(@dir, "#{name}.dump"))] }
  end

  after(:all) { FileUtils.rm_rf(@dir) if @dir }

  def request2size(n)
    [(n + 8 + 15) & ~15, 32].max
  end

  # Every block malloc returned, in its state: a live one in use, a freed one in a tcache, a bin or
  # top (or merged into a free chunk), unless the child's own thread took it back before the capture:
  # a few times before the first dump (a block it freed itself, or one a worker freed past its full
  # tcache into the main arena's bins, where the child's thread takes it as readily, whole or merged
  # with its neighbours and split again: Ruby 3.4's interpreter allocates more between the last free
  # and the dump), and for dumps after it, where the chunk that holds it was free in the first one
  # (the Ruby code of the dumps in between allocates).
  def check_pointers(dump, first)
    @result[:live].each do |addr, size|
      chunk = dump.chunk_at(addr - 16)
      expect(chunk).not_to be_nil, "no chunk at 0x#{(addr - 16).to_s(16)} for a live block of #{size} B"
      expect(%i[in_use mmapped]).to include(chunk.state)
      expect(chunk.size).to be >= size
    end
    reused = []
    since_first = []
    @result[:freed].each do |addr, size|
      chunk = dump.chunk_containing(addr - 16)
      if chunk.nil?
        # only an mmapped chunk's mapping goes away: the main arena's regions are never unmapped
        expect(@before.chunk_at(addr - 16)&.state).to eq(:mmapped), "a freed #{size} B block at 0x#{addr.to_s(16)} vanished"
      elsif chunk.address == addr - 16 && chunk.state == :in_use && chunk.size != request2size(size)
        next # split again for an allocation of the child's own after the free
      elsif chunk.state == :in_use && !dump.equal?(first) && first.chunk_containing(addr - 16)&.free?
        since_first << chunk.address
      elsif chunk.state == :in_use
        # a tcache chunk is never merged: a freed block inside a larger chunk went through the bins
        reused << chunk.address
      elsif chunk.address == addr - 16
        expect(%i[tcache fastbin unsorted smallbin largebin top]).to include(chunk.state),
                                                                     "freed block 0x#{addr.to_s(16)} is #{chunk.state}"
      else
        expect(chunk).to be_free, "freed block 0x#{addr.to_s(16)} lies inside #{chunk.inspect}"
      end
    end
    expect(reused.uniq.size).to be <= 4
    note = "#{since_first.uniq.size} chunks free in the first dump were allocated by the child since"
    puts note unless since_first.empty?
  end

  it "blocked the break, so that the main arena went on in mmapped regions" do
    expect(@result[:blocked]).to be(true)
    main = @dumps[:in_process].arenas.first
    expect(main).to be_main
    expect(main.noncontiguous).to be(true)
  end

  NONCONTIGUOUS_DUMPS.each_key do |name|
    describe "dumped #{name.to_s.tr('_', ' ')}" do
      let(:dump) { @dumps[name] }
      let(:main) { dump.arenas.first }

      it "walks every region of the main arena: glibc's counters reproduced exactly, no anomaly" do
        expect_valid_dump(dump)
        expect(dump.header[:symbol_source] == :heuristic).to eq(NONCONTIGUOUS_DUMPS[name][:symbols] == :heuristic)
        expect(dump.header[:fork_snapshot]).to eq(NONCONTIGUOUS_DUMPS[name][:fork] == true)
        expect(dump.header[:oracles_captured]).to be(true)
      end

      it "lists each region as a heap of the main arena, together system_mem bytes" do
        expect(main.heaps.size).to be > 10
        # the brk region the interpreter's start used, then the mmapped ones; under qemu-user the break
        # never grows, so the main arena is mmapped regions from its start
        kinds = SpecHelpers.qemu_user? ? %i[main_mmap] : %i[main_mmap sbrk]
        expect(main.heaps.map(&:kind).uniq.sort).to eq(kinds)
        expect(main.heaps.sum(&:size)).to eq(main.system_mem)
        expect(main.heaps.count { |h| h.range.cover?(main.top) }).to eq(1)
        main.heaps.each_cons(2) { |a, b| expect(b.start).to be >= a.end }
        # every region but top's ends in glibc's two fenceposts
        main.heaps.reject { |h| h.range.cover?(main.top) }.each do |h|
          last = dump.chunk_containing(h.end - 1)
          expect([last.size, last.state]).to eq([16, :meta]), "#{h.inspect} ends in #{last.inspect}"
        end
      end

      it "finds main-arena chunks other threads freed in their tcaches (the case where an unwalked region misled the walk)" do
        freed_by = @result[:freed_by].to_h
        cached = @result[:freed].count do |addr, _|
          chunk = dump.chunk_at(addr - 16)
          freed_by[addr] >= 0 && chunk&.state == :tcache && chunk.heap.kind == :main_mmap
        end
        expect(cached).to be > 0
      end

      it "finds every pointer malloc returned in its right state" do
        check_pointers(dump, @dumps[:in_process])
      end
    end
  end

  it "draws each region in the report, where each region's own addresses are found" do
    dump = @dumps[:in_process]
    out = File.join(@dir, "report")
    Dir.mkdir(out)
    report = PtmallocDump::Report.new(dump, out)
    report.write
    geometry = PtmallocDump::Geometry.new(dump, report.images)
    dump.arenas.first.heaps.each do |h|
      expect(report.images.count { |im| im[:group] == h.index && im[:kind] == :page_map }).to eq(1), h.inspect
      %i[page_map byte_map].each do |kind|
        image, = geometry.pixel_for(h.end - 1, kind)
        expect(image[:group]).to eq(h.index)
        expect(File).to exist(File.join(out, image[:file]))
      end
    end
    expect(File.read(File.join(out, "index.html")).scan(/<h3>Heap \d+:/).size).to eq(dump.heaps.count { |h| h.kind != :mmapped_chunk })
  end

  it "passes check_symbol_free: one snapshot dumped with symbols and by structure, the same chunk by chunk" do
    expect(@result[:check][:differences]).to eq([])
    expect(@result[:check][:agree]).to be(true)
    a, b = %w[symbols structure].map { |n| PtmallocDump.load(File.join(@dir, "check", "#{n}.dump")) }
    expect(b.header[:symbol_source]).to eq(:heuristic)
    expect(b.arenas.first.heaps.map(&:range)).to eq(a.arenas.first.heaps.map(&:range))
    expect(b.arenas.first.heaps.size).to be > 10
    [a, b].each { |d| expect_valid_dump(d) }
  end

  it "finds malloc's globals by structure as with symbols" do
    %i[main_arena mp sbrk_base].each do |k|
      expect(@dumps[:in_process_by_structure].header[k]).to eq(@dumps[:in_process].header[k])
    end
    expect(@dumps[:in_process].header[:mp]).to be_positive
  end
end
