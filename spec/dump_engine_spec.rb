# frozen_string_literal: true

require "json"
require "spec_helper"

# The walk against glibc's own oracles: mallinfo2(), malloc_info() and the pointers malloc returned.
RSpec.describe "PtmallocDump.dump on randomised heaps" do
  BIN_STATES = %i[tcache fastbin unsorted smallbin largebin].freeze

  def request2size(n)
    [(n + 8 + 15) & ~15, 32].max
  end

  def check_pointers(dump, scenario)
    scenario.live.each do |addr, size|
      chunk = dump.chunk_at(addr - 16)
      expect(chunk).not_to be_nil, "no chunk at 0x#{(addr - 16).to_s(16)} for a live block of #{size} B"
      expect(%i[in_use mmapped]).to include(chunk.state)
      expect(chunk.size).to be >= size
    end
    reused = 0
    scenario.freed.each do |addr, size|
      chunk = dump.chunk_containing(addr - 16)
      if chunk.nil?
        # only an mmapped chunk leaves no trace: its mapping is gone
        expect(size).to be >= 64 * 1024, "a freed #{size} B block at 0x#{addr.to_s(16)} vanished"
      elsif chunk.address == addr - 16 && chunk.state == :in_use && chunk.size != request2size(size)
        # the process split the freed chunk for an allocation of its own after the free (Fiddle's
        # own bookkeeping after the call that freed it does): a new chunk, not the freed one
        next
      elsif chunk.address == addr - 16 && chunk.state == :in_use && scenario.freed_by[addr] == -1
        # the calling thread, the only one running Ruby between the frees and the dump, took a chunk
        # of the same size back from its own tcache: a few at most
        reused += 1
      elsif chunk.address == addr - 16
        expect(BIN_STATES + [:top]).to include(chunk.state), "freed block 0x#{addr.to_s(16)} is #{chunk.state}"
      else
        expect(chunk).to be_free, "freed block 0x#{addr.to_s(16)} lies inside #{chunk.inspect}"
      end
    end
    expect(reused).to be <= 4
  end

  # 50 seeds: threads cycle through 0, 1 and 4 extra threads (so 1, 2 and up to 5 arenas).
  (1..50).each do |seed|
    threads = [0, 1, 4][seed % 3]
    it "reproduces mallinfo2 and malloc_info exactly and finds every pointer (seed #{seed}, #{threads} threads)" do
      scenario = HeapScenario.new(seed, threads: threads)
      path = File.join(tmpdir, "heap.dump")
      GC.disable # a GC run mallocs and frees on its own, and could reuse the chunks just freed
      begin
        PtmallocDump.dump(path, ruby: false) # Ruby fills its method caches on a first call: not between frees and dump
        scenario.build
        PtmallocDump.dump(path, ruby: false)
        dump = PtmallocDump.load(path)
        expect_valid_dump(dump)
        expect(dump.arenas.size).to be >= (threads.positive? ? 2 : 1)
        check_pointers(dump, scenario)
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
      PtmallocDump.dump(path, ruby: false) # warm Ruby's method caches for this call
      free_blocks.call
      PtmallocDump.dump(path, ruby: false)
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

  it "classifies fastbin chunks, which look in use, by walking the fastbin lists" do
    path = File.join(tmpdir, "heap.dump")
    NativeThreads.start(0)
    blocks = NativeThreads.malloc(0, [40] * 20)
    guard = NativeThreads.malloc(0, [40])
    begin
      NativeThreads.prepare_free(0, blocks).call
      PtmallocDump.dump(path, ruby: false)
      dump = PtmallocDump.load(path)
      states = blocks.map { |b| dump.chunk_at(b - 16)&.state }
      # a new thread: the first ones fill its tcache bin (7 slots, fewer when the thread's start-up
      # freed a chunk of that size), the others are fastbin chunks whose next chunk still says "in use"
      cached = states.index { |s| s != :tcache } || states.size
      arena = dump.chunk_containing(blocks.first - 16).arena
      if arena.attached_threads == 1
        expect(cached).to be_between(5, 7)
        expect(states.drop(cached)).to all(eq(:fastbin))
        expect(dump.summary[:fsmblks]).to be >= 13 * 48
      else
        # glibc gave the thread an arena another thread is attached to: that thread's mallocs may
        # have moved some fastbin chunks into its own tcache, or consolidated them into a free chunk
        expect(blocks.map { |b| dump.chunk_containing(b - 16) }).to all(be_free)
      end
      expect(dump.summary[:smblks]).to eq(dump.header[:mallinfo2][:smblks])
      expect_valid_dump(dump)
    ensure
      NativeThreads.prepare_free(0, guard).call
      NativeThreads.stop(0)
    end
  end
end
