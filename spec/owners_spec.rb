# frozen_string_literal: true

require "json"
require "spec_helper"

# Ruby-owned, anchored or leaked (Dump#owners): the native memory of spec/fixtures/ext/owners_fixture.c,
# kept alive in each way, checked against the addresses the fixture malloc'd (written to a file, so
# that the process itself keeps no copy).
RSpec.describe "owners: Ruby-owned, anchored or leaked" do
  size_t = Fiddle::TYPE_SIZE_T
  int = Fiddle::TYPE_INT

  def fn(name, args, ret)
    @fixture ||= Fiddle.dlopen(build_fixture("owners_fixture", extra_flags: ["-lpthread"]))
    Fiddle::Function.new(@fixture[name], args, ret)
  end

  # Calls a fixture function with a file descriptor to write its addresses to; returns [result, file].
  # The file is read after the dump ({addresses}): as Ruby Integers in this process they would keep
  # the blocks Ruby-owned.
  def with_addresses(dir)
    path = File.join(dir, "addresses-#{rand(1 << 30)}")
    File.open(path, "wb") { |f| [yield(f.fileno), path] }
  end

  def addresses(path)
    File.binread(path).unpack("Q*")
  end

  def chunk_of(address)
    address - 16
  end

  # A copy of this process's memory as a dump taken first thing in the block sees it: a child forked
  # just before, asleep until the block returns. GC is off; from entering dump to its capture nothing
  # is allocated or freed (zero_alloc_spec), while what Ruby does after the capture (writing and loading
  # the dump) would overwrite what the memory held, stale copies of addresses among it. Yields its pid.
  def with_memory_copy
    pid = fork { sleep }
    yield pid
  ensure
    if pid
      Process.kill(:KILL, pid)
      Process.wait(pid)
    end
  end

  # What holds a copy of a held block's address, which makes the block :ruby: one of the dump's
  # referrers, a Ruby object's slot or a Ruby-owned chunk, whose memory in the copy `mem_pid` holds the
  # address or its Integer (read through /proc/PID/mem, which answers an unmapped address with an
  # error, not a fault); a fork snapshot's referrers are read in a copy taken just before it forked.
  def ruby_copy_of(dump, address, mem_pid)
    refs = dump.referrers(chunk_of(address))
    File.open("/proc/#{mem_pid}/mem", "rb") do |mem|
      holds = lambda do |at, size|
        mem.pread(size, at).unpack("Q*").any? { |w| w == address || w == (address << 1) | 1 }
      rescue Errno::EIO, Errno::EFAULT
        false
      end
      slot_size = ->(o) { dump.ruby.pages.find { |pg| o >= pg.start && o < pg.end }.stride }
      refs[:objects].find { |o| holds.call(o, slot_size.call(o)) } ||
        (refs[:chunks] + refs[:integers]).find { |from| dump.owner_kind_of(from) == :ruby && holds.call(from + 16, usable(dump.chunk_at(from))) }
    end
  end

  # malloc_usable_size: an arena chunk's bytes up to and including the next chunk's prev_size field,
  # an mmapped chunk's up to its end
  def usable(chunk)
    chunk.state == :mmapped ? chunk.size - 16 : chunk.size - 8
  end

  # Every held block not anchored by `anchor` holds its place through another copy of its address:
  # the scan is conservative (stale data counts), and Ruby's reach comes first. Such a block is
  # either :ruby, and a Ruby object or Ruby-owned chunk holds a copy of its address in memory; or
  # anchored directly by another root (a stale word in a stack frame or another object's data),
  # which the dump's referrers name with the word's address. Never :leaked.
  def expect_held_anchored(dump, held, anchor, mem_pid)
    held.each do |a|
      c = chunk_of(a)
      kind = dump.owner_kind_of(c)
      next if kind == :anchored && dump.anchor_of(c) == anchor

      if kind == :anchored
        details = dump.anchor_details(c)
        roots = dump.referrers(c)[:roots]
        expect(details[:direct]).to be(true), "0x#{a.to_s(16)} is anchored by #{details.inspect}, not directly"
        expect(roots.map { |r| r[:name] }).to include(details[:name]),
                                              "0x#{a.to_s(16)} is anchored by #{details[:name]}, which the referrers (#{roots}) do not name"
      else
        expect(kind).to eq(:ruby), "0x#{a.to_s(16)} is #{kind.inspect}"
        expect(ruby_copy_of(dump, a, mem_pid)).not_to be_nil,
                                                      "0x#{a.to_s(16)} is :ruby, and no Ruby-owned chunk holds its address " \
                                                      "(the dump's referrers: #{dump.referrers(c)}, the chunks' owners: " \
                                                      "#{dump.referrers(c)[:chunks].map { |x| dump.ruby.owner_of(dump.chunk_at(x)).inspect }})"
      end
    end
  end

  # Blocks held only on another thread's stack: each dump of `copies` (path => the pid of its memory
  # copy) anchors them by that stack, but for a stale copy of an address elsewhere.
  def expect_stack_held(file, tid, copies)
    held = addresses(file)
    expect(held.size).to eq(20)
    copies.each do |path, copy|
      dump = PtmallocDump.load(path)
      # as with the global array: a stale copy of an address elsewhere makes a block :ruby or
      # anchored there (never :leaked); the others are anchored by the thread's stack
      expect_held_anchored(dump, held, "stack of thread #{tid}", copy)
      by_stack = held.select { |a| dump.anchor_of(chunk_of(a)) == "stack of thread #{tid}" }
      expect(by_stack.size).to be >= 18
      stack = dump.roots.find { |r| r[:name] == "stack of thread #{tid}" }
      expect(stack).to include(kind: :stack, tid: tid)
      expect(dump.threads.map(&:tid)).to include(tid)
    end
  end

  def fixture_path
    File.join(SpecHelpers::ROOT, "spec", "fixtures", "ext", "build", "owners_fixture.so")
  end

  # In a process of its own: this one's history (hundreds of examples' threads and garbage) leaves
  # stale words in thread stacks and old blocks that point into memory the new blocks reuse, and
  # how many depends on what ran before.
  it "finds at least 95% of 50,000 forgotten blocks of 1,040 bytes leaked, in the diff and in the dump" do
    Dir.mktmpdir do |dir|
      before = File.join(dir, "before.dump")
      after = File.join(dir, "after.dump")
      file = File.join(dir, "addresses")
      _o, err, status = run_ruby(<<~RUBY)
        require "fiddle"
        lib = Fiddle.dlopen(#{build_fixture('owners_fixture', extra_flags: ['-lpthread']).dump})
        leak = Fiddle::Function.new(lib["ow_leak"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT],
                                    Fiddle::TYPE_SIZE_T)
        PtmallocDump.dump(#{before.dump})
        made = File.open(#{file.dump}, "wb") { |f| leak.call(50_000, 1024, f.fileno) }
        PtmallocDump.dump(#{after.dump})
        exit(made == 50_000)
      RUBY
      expect(status).to be_success, err
      forgotten = addresses(file)
      expect(forgotten.size).to eq(50_000)

      dump = PtmallocDump.load(after)
      kinds = forgotten.map { |a| dump.owner_kind_of(chunk_of(a)) }.tally
      puts "    forgotten blocks by owner kind: #{kinds}"
      expect(kinds.fetch(:leaked, 0)).to be >= 47_500
      # malloc(1024) is a chunk of 1,040 bytes, or 1,056 where splitting a free chunk would have left
      # less than MINSIZE behind
      sizes = forgotten.map { |a| dump.chunk_at(chunk_of(a))&.size }.tally
      expect(sizes.keys).to all(be_between(1040, 1056))

      owners = dump.summary[:owners]
      by_size = owners[:leaked_by_size].select { |e| sizes.key?(e[:size]) }
      expect(by_size.sum { |e| e[:count] }).to be >= 47_500
      by_size.each do |e|
        expect(e[:bytes]).to eq(e[:count] * e[:size])
        expect(e[:samples].map { |s| dump.owner_kind_of(s) }.uniq).to eq([:leaked])
      end
      # 95% of the blocks of 1,040 bytes, which most are (a stale copy of an address in Ruby-owned
      # memory makes a block :ruby; the few of 1,056 bytes lie where freed chunks were split, and
      # stale copies of those reused addresses are likelier)
      expect(by_size.find { |e| e[:size] == 1040 }[:count]).to be >= sizes.fetch(1040) * 95 / 100
      expect(owners[:leaked][:count]).to be >= by_size.sum { |e| e[:count] }

      growth = PtmallocDump.diff(before, after).owners
      puts "    diff: leaked #{growth[:leaked]}, anchored #{growth[:anchored]}"
      expect(growth[:leaked][:count]).to be >= 47_500
      expect(growth[:leaked][:bytes]).to be >= 47_500 * 1040
    end
  end

  it "tells blocks in a C global array anchored by the fixture's .so, and a block behind another native block too" do
    global = fn("ow_anchor_global", [size_t, size_t, int], size_t)
    chain = fn("ow_anchor_chain", [size_t, int], int)
    GC.disable
    Dir.mktmpdir do |dir|
      _, held_file = with_addresses(dir) { |fd| global.call(100, 1024, fd) }
      _, chain_file = with_addresses(dir) { |fd| chain.call(512, fd) }
      path = File.join(dir, "a.dump")
      with_memory_copy do |copy|
        PtmallocDump.dump(path)
        dump = PtmallocDump.load(path)
        held = addresses(held_file)
        inner, outer = addresses(chain_file)

        expect(held.size).to eq(100)
        # The scan is conservative: a Ruby-owned table or another root can hold a stale copy of a
        # block's address (data left in memory malloc handed out again, a dead value in a live stack
        # frame), and Ruby's reach comes first. Such a block is :ruby or anchored elsewhere, never
        # :leaked; the rest are anchored by the fixture's data.
        expect_held_anchored(dump, held, fixture_path, copy)
        anchored = held.select { |a| dump.owner_kind_of(chunk_of(a)) == :anchored }
        by_fixture = anchored.select { |a| dump.anchor_of(chunk_of(a)) == fixture_path }
        puts "    #{by_fixture.size} of 100 anchored by the fixture, #{100 - by_fixture.size} held by a stale copy elsewhere"
        # each of the others was checked above to be held through a copy of its address; how many there
        # are depends on the suite's history before this example (12 in trixie's whole row)
        expect(by_fixture.size).to be >= 80
        expect(dump.referrers(chunk_of(by_fixture.first))[:roots].map { |r| r[:name] }).to include(fixture_path)
        expect(by_fixture.map { |a| dump.anchor_details(chunk_of(a))[:kind] }.uniq).to eq([:data])
        expect(dump.anchor_details(chunk_of(by_fixture.first))).to eq(name: fixture_path, kind: :data, direct: true)

        # the outer block too may hold its place through a stale copy of its address (as checked for
        # the held blocks), and the inner one is then reached through it; neither is ever leaked.
        # Otherwise the chain is the fixture's.
        expect_held_anchored(dump, [outer], fixture_path, copy)
        chain_anchored = dump.anchor_of(chunk_of(outer)) == fixture_path
        if chain_anchored
          expect(dump.anchor_details(chunk_of(outer))).to include(name: fixture_path, direct: true)
          if dump.owner_kind_of(chunk_of(inner)) == :ruby
            # Ruby's reach comes first: a stale copy of the inner block's address in Ruby's memory
            expect(ruby_copy_of(dump, inner, copy)).not_to be_nil
          else
            expect(dump.owner_kind_of(chunk_of(inner))).to eq(:anchored)
            details = dump.anchor_details(chunk_of(inner))
            if details[:name] == fixture_path
              expect(details).to eq(name: fixture_path, kind: :data, direct: false)
            else
              # reached first from another root through a stale copy of its address (breadth first:
              # the nearer path wins); the edge from the outer block is recorded all the same (below)
              puts "    the inner block is anchored by #{details[:name]} through a stale copy"
            end
          end
        else
          puts "    the outer block is #{dump.owner_kind_of(chunk_of(outer))} by a stale copy elsewhere"
          expect(%i[ruby anchored]).to include(dump.owner_kind_of(chunk_of(inner)))
        end

        owners = dump.summary[:owners]
        chain = [outer, inner].select { |a| dump.anchor_of(chunk_of(a)) == fixture_path }.sum { |a| dump.chunk_at(chunk_of(a)).size }
        expect(owners[:anchored_by][fixture_path]).to be >= (by_fixture.size * 1040) + chain
        expect(dump.roots.select { |r| r[:name] == fixture_path }.map { |r| r[:kind] }.uniq).to eq([:data])
        # the inner block is held by a word of the outer one, which the scan recorded
        expect(dump.referrers(chunk_of(inner))[:chunks]).to include(chunk_of(outer))
      end
    end
  ensure
    GC.enable
  end

  it "tells blocks held only on another thread's stack anchored by that thread's stack, in process and in a fork snapshot" do
    start = fn("ow_stack_start", [size_t, size_t, int], int)
    stop = fn("ow_stack_stop", [], Fiddle::TYPE_VOID)
    GC.disable
    Dir.mktmpdir do |dir|
      tid, file = with_addresses(dir) { |fd| start.call(20, 1024, fd) }
      expect(tid).to be > 0
      inproc = File.join(dir, "in.dump")
      snap = File.join(dir, "snap.dump")
      with_memory_copy do |copy_in|
        PtmallocDump.dump(inproc)
        with_memory_copy do |copy_snap|
          PtmallocDump.dump(snap, fork: true, wait: true)
          expect_stack_held(file, tid, { inproc => copy_in, snap => copy_snap })
        end
      end
    ensure
      stop.call if tid&.positive?
    end
  ensure
    GC.enable
  end

  # glibc keeps a thread's DTV through the word after tcb at its thread pointer, one dtv_t into the
  # block; an ended thread's descriptor stays with its cached stack, and fork leaves the parent's other
  # threads' descriptors in the child's cache.
  it "anchors each thread's DTV through its descriptor: a running thread's, ended threads' and, in a fork child, the parent's other threads'" do
    start = fn("ow_stack_start", [size_t, size_t, int], int)
    stop = fn("ow_stack_stop", [], Fiddle::TYPE_VOID)
    holder_dtv = fn("ow_holder_dtv_to", [int], int)
    finished = fn("ow_finished_threads", [size_t, int], int)
    not_running = "TLS of threads not running (glibc's stack cache)"
    GC.disable
    Dir.mktmpdir do |dir|
      result, ended_file = with_addresses(dir) { |fd| finished.call(4, fd) }
      expect(result).to eq(0)
      tid, = with_addresses(dir) { |fd| start.call(1, 64, fd) }
      expect(tid).to be > 0
      _, holder_file = with_addresses(dir) { |fd| holder_dtv.call(fd) }
      inproc = File.join(dir, "in.dump")
      child = File.join(dir, "child.dump")
      with_memory_copy do |copy|
        PtmallocDump.dump(inproc)
        # a fork child, where the holder is gone too (its descriptor is in the child's cache), makes a
        # copy of its own memory before its dump; the addresses are read after both dumps, so that no
        # Ruby object holds them there
        ready, done = IO.pipe
        pid = fork do
          ready.close
          child_copy = fork { sleep }
          PtmallocDump.dump(child)
          done.write([child_copy].pack("L"))
          sleep
        end
        done.close
        child_copy = ready.read(4)&.unpack1("L")
        begin
          expect(child_copy).to be_a(Integer)
          ended = addresses(ended_file)
          holder = addresses(holder_file)
          expect(ended.size).to eq(4)
          dump = PtmallocDump.load(inproc)
          expect_held_anchored(dump, holder, "TLS of thread #{tid}", copy)
          expect_held_anchored(dump, ended, not_running, copy)
          cached = ended.select { |a| dump.anchor_of(chunk_of(a)) == not_running }
          expect(cached).not_to be_empty
          where = dump.referrers(chunk_of(cached.first))[:roots].find { |r| r[:name] == not_running }
          expect(where).not_to be_nil
          dump = PtmallocDump.load(child)
          expect_held_anchored(dump, holder + ended, not_running, child_copy)
          expect((holder + ended).count { |a| dump.anchor_of(chunk_of(a)) == not_running }).to be >= 2
          expect(dump.summary[:owners][:leaked_by_size].map { |g| g[:samples] }.flatten & (holder + ended).map { |a| chunk_of(a) }).to eq([])
        ensure
          # the child's copy is its own child: killed first, it is reaped with the child's end
          Process.kill(:KILL, child_copy) if child_copy
          Process.kill(:KILL, pid)
          Process.wait(pid)
        end
      end
    ensure
      stop.call if tid&.positive?
    end
  ensure
    GC.enable
  end

  it "does not call a Fiddle.malloc'd block that a Ruby Integer holds leaked" do
    holder = Struct.new(:pointer)
    Dir.mktmpdir do |dir|
      in_struct = holder.new(Fiddle.malloc(200))         # a member in the struct's slot
      in_ivar = Object.new.tap { |o| o.instance_variable_set(:@pointer, Fiddle.malloc(300)) } # in the object's slot
      many = Array.new(1000) { Fiddle.malloc(48) }       # in the array's malloc'd buffer
      path = File.join(dir, "a.dump")
      PtmallocDump.dump(path)
      dump = PtmallocDump.load(path)
      expect(dump.owner_kind_of(chunk_of(in_struct.pointer))).to eq(:ruby)
      expect(dump.owner_kind_of(chunk_of(in_ivar.instance_variable_get(:@pointer)))).to eq(:ruby)
      # and the dump says which slots hold them
      expect(dump.referrers(chunk_of(in_ivar.instance_variable_get(:@pointer)))[:objects]).to eq([Fiddle.dlwrap(in_ivar)])
      expect(dump.referrers(chunk_of(in_struct.pointer))[:objects]).to eq([Fiddle.dlwrap(in_struct)])
      kinds = many.map { |a| dump.owner_kind_of(chunk_of(a)) }.tally
      expect(kinds).to eq(ruby: 1000)
    ensure
      Fiddle.free(in_struct.pointer) if in_struct
      Fiddle.free(in_ivar.instance_variable_get(:@pointer)) if in_ivar
      many&.each { |a| Fiddle.free(a) }
    end
  end

  # In a process of its own, as the forgotten blocks: this one's history holds some buffers by stale words.
  it "calls no memory leaked in a ruby: false dump: what no root reaches has no known owner, and the outputs say so" do
    Dir.mktmpdir do |dir|
      off = File.join(dir, "off.dump")
      on = File.join(dir, "on.dump")
      out, err, status = run_ruby(<<~RUBY)
        require "fiddle"
        require "json"
        strings = Array.new(20_000) { |i| format("%05d", i) * 400 } # 2,000 bytes each, a malloc'd buffer each
        PtmallocDump.dump(#{off.dump}, ruby: false)
        PtmallocDump.dump(#{on.dump})
        # the buffers' addresses, read after both dumps (RSTRING_PTR, as Fiddle::Pointer takes a String's)
        puts JSON.generate(buffers: strings.map { |str| Fiddle::Pointer[str].to_i }, first: Fiddle.dlwrap(strings.first))
      RUBY
      expect(status).to be_success, err
      r = JSON.parse(out.lines.last, symbolize_names: true)
      buffers = r[:buffers].map { |a| chunk_of(a) }
      dump = PtmallocDump.load(off)
      expect(dump.ruby).to be_nil
      o = dump.summary[:owners]
      expect(o[:leaked]).to eq(bytes: 0, count: 0)
      expect(o[:leaked_by_size]).to eq([])
      allocated = dump.each_chunk.select { |c| %i[in_use mmapped].include?(c.state) }
      expect(%i[ruby anchored interior leaked unknown].sum { |k| o[k][:bytes] }).to eq(allocated.sum(&:size))
      expect(o[:ruby][:count]).to eq(0)
      kinds = buffers.map { |c| dump.owner_kind_of(c) }.tally
      puts "    the Strings' buffers in the ruby: false dump: #{kinds}"
      # a stale copy of an address (or of one into a buffer) on a stack, in a library's data or in a live
      # block can hold a few; none is leaked
      expect(kinds.keys - %i[unknown anchored interior]).to eq([])
      with = PtmallocDump.load(on)
      page = with.chunk_containing(r[:first])
      if page
        # Ruby 2.7 and 3.0 take their object pages from malloc: each buffer is held by the chunk its
        # String's slot is in, which the roots reach through its middle (any VALUE a library keeps)
        expect(dump.referrers(buffers.first)[:chunks]).to include(page.address)
        expect(%i[interior anchored]).to include(dump.owner_kind_of(page.address))
        expect(kinds.fetch(:interior, 0) + kinds.fetch(:anchored, 0)).to be >= 19_000
        next
      end
      expect(kinds.fetch(:unknown, 0)).to be >= 19_000
      expect(o[:unknown][:bytes]).to be >= buffers.sum { |c| dump.chunk_at(c).size } * 95 / 100

      text = PtmallocDump::TextSummary.new(dump).to_s
      # nothing is called leaked (the words that say what an in-process dump adds may name leaks)
      expect(text).not_to match(/is leaked|^ *leaked /)
      expect(text).to match(/no known owner +#{Regexp.escape(PtmallocDump::FormatHelpers.human_bytes(o[:unknown][:bytes]))}/)
      finding = PtmallocDump::Findings.new(dump).all.find { |f| f.topic == :unknown_owners }
      expect(finding.bytes).to eq(o[:unknown][:bytes])
      expect(finding.text).to include("ruby: false")
      expect(finding.step).to include("Dump in process with the Ruby pass")
      expect(PtmallocDump::Findings.new(dump).all.map(&:topic)).not_to include(:leaked)
      expect(PtmallocDump::Advice.new(dump).lines.map(&:topic)).not_to include(:leak)
      expect(PtmallocDump::Explanation.new(dump, buffers.find { |c| dump.owner_kind_of(c) == :unknown } + 16).to_s)
        .to match(/holder +not known: no root reaches it/)

      # the same Strings in the dump with the Ruby pass are Ruby's
      expect(buffers.map { |c| with.owner_kind_of(c) }.tally).to eq(ruby: 20_000)
      expect(with.summary[:owners][:unknown]).to eq(bytes: 0, count: 0)
    end
  end

  # SQLite's page cache and the like: blocks reached only through pointers into their middle are held,
  # not leaked, and the dump says what holds them. In a process of its own, as the forgotten blocks
  # above: stale words of this one's history point into the lone blocks' 17 MB too.
  it "calls blocks reached only through a pointer into their middle held (interior pointer), and blocks nothing reaches leaked" do
    Dir.mktmpdir do |dir|
      by_global, by_ruby, path = %w[by_global by_ruby a.dump].map { |n| File.join(dir, n) }
      # held by a malloc'd block the fixture's global points at, and by one a Ruby constant's
      # Fiddle::Pointer owns
      _o, err, status = run_ruby(<<~RUBY)
        require "fiddle"
        lib = Fiddle.dlopen(#{build_fixture('owners_fixture', extra_flags: ['-lpthread']).dump})
        interior = Fiddle::Function.new(lib["ow_interior"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T,
                                                             Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
        GC.disable
        File.open(#{by_global.dump}, "wb") { |f| interior.call(nil, 200, 4096, f.fileno) }
        OwnersInteriorHolder = Fiddle::Pointer.malloc(200 * 8, Fiddle::RUBY_FREE)
        File.open(#{by_ruby.dump}, "wb") { |f| interior.call(OwnersInteriorHolder, 200, 87_216, f.fileno) }
        PtmallocDump.dump(#{path.dump})
      RUBY
      expect(status).to be_success, err
      dump = PtmallocDump.load(path)
      { by_global => :anchored, by_ruby => :ruby }.each do |file, holder_kind|
        all = addresses(file)
        held = all.first(200)
        lone = all[200, 200]
        holder_chunk = chunk_of(all.last)
        # the global's block is anchored, or Ruby's where a chunk a Ruby object owns holds a stale copy
        # of its start (seen in 1 run of 10)
        expect(dump.owner_kind_of(holder_chunk)).to eq(holder_kind).or eq(:ruby)
        kinds = held.map { |a| dump.owner_kind_of(chunk_of(a)) }.tally
        lone_kinds = lone.map { |a| dump.owner_kind_of(chunk_of(a)) }.tally
        puts "    held through their middle (holder #{holder_kind}): #{kinds}; the others: #{lone_kinds}"
        # none is leaked; a stale copy of a start address elsewhere may make a few Ruby's or anchored
        expect(kinds.keys - %i[interior ruby anchored]).to eq([])
        expect(kinds.fetch(:interior, 0)).to be >= 180
        expect(lone_kinds.fetch(:leaked, 0)).to be >= 180
        held.select { |a| dump.owner_kind_of(chunk_of(a)) == :interior }.first(20).each do |a|
          refs = dump.referrers(chunk_of(a))
          # the holder's word into its middle, which this test planted, or a root's
          expect(refs[:interior].include?(holder_chunk) || refs[:interior_roots].any?).to be(true), refs.inspect
          # no Ruby object holds its start (it would be Ruby's), and a chunk that does is one whose
          # words do not count as pointers, or the block would be that chunk's: owned by no one (a
          # stale copy in a block nothing reaches), a String's buffer (bytes), an Array's or object's
          # buffer (VALUEs), or one of Ruby 2.7's and 3.0's object pages (a stale word in a free slot)
          expect(refs[:integers] + refs[:objects]).to eq([])
          stale = refs[:chunks].reject do |c|
            %i[leaked unknown].include?(dump.owner_kind_of(c)) ||
              %i[string array object ruby_page].include?(dump.ruby.category_of(c)) ||
              dump.ruby.pages.any? { |pg| (c...(c + dump.chunk_at(c).size)).cover?(pg.start) }
          end
          expect(stale).to eq([])
        end
        sample = held.find { |a| dump.referrers(chunk_of(a))[:interior] == [holder_chunk] }
        text = PtmallocDump::Explanation.new(dump, sample).to_s
        expect(text[/^holder +(.*)$/, 1]).to start_with("held (interior pointer) by the chunk at 0x#{holder_chunk.to_s(16)}")
        expect(text[/^pointed at by +(.*)$/, 1]).to include("into its middle from 1 chunk(s): 0x#{holder_chunk.to_s(16)}")
      end
      o = dump.summary[:owners]
      expect(o[:interior][:count]).to be >= 360
      expect(o[:interior][:bytes]).to be >= 180 * 4096 + 180 * 87_216
      allocated = dump.each_chunk.select { |c| %i[in_use mmapped].include?(c.state) }
      expect(%i[ruby anchored interior leaked unknown].sum { |k| o[k][:bytes] }).to eq(allocated.sum(&:size))
      expect(PtmallocDump::TextSummary.new(dump).to_s)
        .to match(/held \(interior\) +#{Regexp.escape(PtmallocDump::FormatHelpers.human_bytes(o[:interior][:bytes]))}/)
    end
  end

  it "explains a block a thread's stack and a Ruby Integer both hold as Dump#referrers and #owner_kind_of say" do
    start = fn("ow_stack_start", [size_t, size_t, int], int)
    stop = fn("ow_stack_stop", [], Fiddle::TYPE_VOID)
    GC.disable
    Dir.mktmpdir do |dir|
      tid, file = with_addresses(dir) { |fd| start.call(4, 1024, fd) }
      expect(tid).to be > 0
      block = addresses(file).first
      kept = [block] # an Array of one, in its slot: the Integer of the block's address
      path = File.join(dir, "a.dump")
      PtmallocDump.dump(path)
      dump = PtmallocDump.load(path)
      chunk = chunk_of(block)
      refs = dump.referrers(chunk)
      array = dump.ruby.object_at(Fiddle.dlwrap(kept))
      array_text = "#{array.type} #{array.class_name} at 0x#{array.address.to_s(16)}"
      # the oracles: the thread's stack word and the Array's slot, which this test planted
      expect(refs[:roots].map { |r| r[:name] }).to include("stack of thread #{tid}")
      expect(refs[:objects]).to include(array.address)
      expect(dump.owner_kind_of(chunk)).to eq(:ruby) # Ruby's reach comes first

      explanation = PtmallocDump::Explanation.new(dump, block)
      h = explanation.to_h[:references]
      expect(h[:pointed_at_by]).to eq(refs[:chunks].map { |a| "0x#{a.to_s(16)}" })
      expect(h[:integers]).to eq(refs[:integers].map { |a| "0x#{a.to_s(16)}" })
      expect(h[:roots]).to eq(refs[:roots].map { |r| { name: r[:name], where: "0x#{r[:where].to_s(16)}" } })
      expect(h[:objects].size).to eq(refs[:objects].size)
      expect(h[:objects]).to include(array_text)
      text = explanation.to_s
      pointed = text[/^pointed at by +(.*)$/, 1]
      stack_word = refs[:roots].find { |r| r[:name] == "stack of thread #{tid}" }[:where]
      expect(pointed).to include("stack of thread #{tid} (the word at 0x#{stack_word.to_s(16)})",
                                 "the slot of #{array_text}")
      holder = text[/^holder +(.*)$/, 1]
      if dump.ruby.owner_of(chunk)
        expect(holder).to start_with("a Ruby object: ")
      else
        # no slot points at its start, so its owner category stays the explorer's "native"; the holder
        # says which Ruby memory keeps it alive
        expect(text[/^owner +(.*)$/, 1]).to eq("native")
        expect(holder).to start_with("a Ruby object: the slot of ").and include(" holds its address")
      end
      # the command line prints the same
      out, err, status = Open3.capture3("bundle", "exec", "exe/ptmalloc-visualize", "--explain",
                                        "0x#{block.to_s(16)}", path, chdir: SpecHelpers::ROOT)
      expect(status).to be_success, err
      expect(out).to include(text.lines.grep(/^pointed at by/).first.chomp, text.lines.grep(/^holder/).first.chomp)
      kept.clear
    ensure
      stop.call if tid&.positive?
    end
  ensure
    GC.enable
  end

  it "adds up: Ruby-owned, anchored, interior-held and leaked bytes are the allocated bytes; references: false records no owners" do
    Dir.mktmpdir do |dir|
      path = File.join(dir, "a.dump")
      off = File.join(dir, "off.dump")
      PtmallocDump.dump(path)
      PtmallocDump.dump(off, references: false)
      dump = PtmallocDump.load(path)
      o = dump.summary[:owners]
      allocated = dump.each_chunk.select { |c| %i[in_use mmapped].include?(c.state) }
      kinds = %i[ruby anchored interior leaked]
      expect(kinds.sum { |k| o[k][:bytes] }).to eq(allocated.sum(&:size))
      expect(kinds.sum { |k| o[k][:count] }).to eq(allocated.size)
      expect(o[:unknown]).to eq(bytes: 0, count: 0)
      expect(o[:anchored_by].values.sum).to eq(o[:anchored][:bytes])
      expect(dump.owner_kind_of(dump.each_chunk.find { |c| c.state == :top }.address)).to be_nil
      expect(dump.roots.map { |r| r[:kind] }.uniq).to include(:data, :stack, :tls, :registers)
      expect(dump.roots.map { |r| r[:name] }).to include(a_string_ending_with("ptmalloc_dump.so"))

      without = PtmallocDump.load(off)
      expect(without.summary[:owners]).to be_nil
      expect(without.roots).to eq([])
      expect(without.owner_kind_of(allocated.first.address)).to be_nil
      expect(without.ruby.meta[:references]).to be(false)
    end
  end
end
