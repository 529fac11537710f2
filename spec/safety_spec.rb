# frozen_string_literal: true

require "json"
require "zlib"
require "spec_helper"

RSpec.describe "safety in a production worker" do
  SUPPORT = File.join(__dir__, "support")

  # Runs Ruby code in a child with the spec helpers loaded; a watchdog kills it after `timeout` s.
  def child(code, timeout: 240, env: {})
    script = <<~RUBY
      require "fiddle"
      require "json"
      require "rspec"
      require #{File.join(SUPPORT, 'helpers').inspect}
      require #{File.join(SUPPORT, 'native_threads').inspect}
      #{code}
    RUBY
    out = +""
    err = +""
    status = nil
    Open3.popen3(env, RbConfig.ruby, "-I", SpecHelpers::LIB, "-rptmalloc_dump", "-e", script) do |i, o, e, t|
      i.close
      reader = Thread.new { out << o.read }
      ereader = Thread.new { err << e.read }
      unless t.join(timeout)
        Process.kill("KILL", t.pid)
        raise "watchdog: the child did not finish in #{timeout} s (deadlock?)\n#{err}"
      end
      reader.join
      ereader.join
      status = t.value
    end
    [out, err, status]
  end

  describe "native threads calling malloc throughout" do
    # dumps of each kind: 150 in the suite, more with SAFETY_CHURN (`rake spec:churn` takes 500)
    churn = Integer(ENV.fetch("SAFETY_CHURN", "150"))

    it "takes #{churn} in-process dumps and #{churn} fork snapshots without crash or deadlock, each arena consistent" do
      # every other dump with the Ruby pass, the pointer graph and the roots (what a default dump
      # does), the others with neither: both shapes of the walk run half the time in each mode. A
      # dump takes about half a second here on a quiet machine: the watchdog allows 4 s each, for a
      # machine busy with other work
      out, err, status = child(<<~RUBY, timeout: 60 + (churn * 2 * 4))
        dir = #{tmpdir.inspect}
        NativeThreads.churn_start(4)
        sleep 0.01 until NativeThreads.churn_ops > 10_000 # every thread has its arena by now
        stats = { inproc: 0, fork: 0, arena_anomalies: [], other_anomalies: [], fork_differences: [], in_transit: [],
                  tcache_anomalies: 0, arenas: [], ops: 0 }
        # glibc counts an mmapped chunk outside any lock: munmap_chunk lowers n_mmaps and mmapped_mem
        # before its munmap, sysmalloc raises them after its mmap and the chunk's header. A fork that
        # catches a thread in between copies a mapping the counters no longer (or do not yet) count:
        # then the walk finds exactly one chunk more than they, of one of its mapped chunks' sizes
        mmap_fields = %i[hblks hblkhd mmap_count mmap_size]
        in_transit = lambda do |d, diffs|
          count = diffs.find { |x| x.field == :hblks }
          bytes = diffs.find { |x| x.field == :hblkhd }
          sizes = d.heaps.select { |h| h.kind == :mmapped_chunk }.map { |h| h.end - h.start }
          diffs.all? { |x| mmap_fields.include?(x.field) } && count && bytes && count.walk - count.glibc == 1 &&
            sizes.include?(bytes.walk - bytes.glibc)
        end
        #{churn}.times do |i|
          path = File.join(dir, "in.dump")
          PtmallocDump.dump(path, ruby: i.even?, references: i.even?)
          v = PtmallocDump.load(path).verify
          stats[:inproc] += 1
          stats[:arena_anomalies].concat(v.arena_anomalies.map(&:to_s))
          stats[:tcache_anomalies] += v.tcache_anomalies.size
          stats[:other_anomalies].concat(SpecHelpers.locked_anomalies(v))
          stats[:arenas] << v.arenas.size if v.arenas.all? { |a| a.key?(:consistent) && a[:anomalies].zero? }
        end
        #{churn}.times do |i|
          path = File.join(dir, "fork.dump")
          PtmallocDump.dump(path, fork: true, wait: true, ruby: i.even?, references: i.even?)
          d = PtmallocDump.load(path)
          v = d.verify
          raise "not a snapshot" unless d.header[:fork_snapshot]
          stats[:fork] += 1
          stats[:arena_anomalies].concat(v.arena_anomalies.map(&:to_s))
          stats[:other_anomalies].concat(SpecHelpers.locked_anomalies(v))
          if !v.differences.empty? && in_transit.call(d, v.differences)
            stats[:in_transit] << v.differences.map(&:to_s)
          else
            stats[:fork_differences].concat(v.differences.map(&:to_s))
          end
        end
        stats[:ops] = NativeThreads.churn_ops
        NativeThreads.churn_stop
        puts JSON.dump(stats)
      RUBY
      expect(status).to be_success, err
      s = JSON.parse(out, symbolize_names: true)
      expect(s[:inproc]).to eq(churn)
      expect(s[:fork]).to eq(churn)
      expect(s[:ops]).to be > 100_000 # the threads really ran meanwhile
      # every arena, walked under its own lock, was consistent in itself in every dump
      expect(s[:arena_anomalies]).to eq([])
      # outside the arenas, only what threads change without a lock (a fork copies it as it was): the
      # ring led to every arena every time, though arenas were made and heaps grew meanwhile
      expect(s[:other_anomalies]).to eq([])
      expect(s[:arenas].size).to eq(churn)
      expect(s[:arenas].min).to be >= 2
      # a fork snapshot is one frozen heap: glibc's counters and the walk agree exactly, but for a
      # thread caught between an mmapped chunk's mapping and glibc's count of it (rare: a few
      # instructions each way)
      expect(s[:fork_differences]).to eq([])
      expect(s[:in_transit].size).to be <= [5, churn / 100].max
      unless s[:in_transit].empty?
        puts "    fork snapshots with an mmapped chunk in transit: #{s[:in_transit].size} of #{churn}"
      end
    end
  end

  describe "threads making arenas and growing heaps during dumps" do
    it "follows the ring to every arena and never refuses the layout, in ten fresh processes" do
      results = Array.new(10) do
        out, err, status = child(<<~RUBY, timeout: 120)
          path = File.join(#{tmpdir.inspect}, "ring-\#{Process.pid}.dump")
          PtmallocDump.dump(path, ruby: false)
          NativeThreads.churn_start(4) # new threads: new arenas, whose first heaps grow from here on
          stats = { other_anomalies: [], arenas: [], errors: [] }
          30.times do
            PtmallocDump.dump(path, ruby: false)
            d = PtmallocDump.load(path)
            stats[:other_anomalies].concat(SpecHelpers.locked_anomalies(d.verify))
            stats[:arenas] << d.arenas.size
          rescue PtmallocDump::Error => e
            stats[:errors] << e.message
          end
          NativeThreads.churn_stop
          PtmallocDump.dump(path, ruby: false)
          stats[:arenas_after] = PtmallocDump.load(path).arenas.size
          puts JSON.dump(stats)
        RUBY
        expect(status).to be_success, err
        JSON.parse(out, symbolize_names: true)
      end
      expect(results.flat_map { |r| r[:errors] }).to eq([])
      expect(results.flat_map { |r| r[:other_anomalies] }).to eq([])
      results.each do |r|
        # arenas are never freed: the count only grows, up to the main arena and one per churning thread
        expect(r[:arenas]).to eq(r[:arenas].sort)
        expect(r[:arenas_after]).to be >= 5
        expect(r[:arenas].max).to be <= r[:arenas_after]
      end
    end
  end

  describe "threads exiting during dumps" do
    it "marks a thread that empties its tcache on exit as exiting and records no anomaly for it" do
      out, err, status = child(<<~RUBY, timeout: 300)
        path = File.join(#{tmpdir.inspect}, "exit.dump")
        PtmallocDump.dump(path, ruby: false)
        stats = { dumps: 0, anomalies: [], exiting: 0, exiting_tcache_bytes: 0, threads: 0 }
        rounds = 0
        until (stats[:exiting] >= 5 && rounds >= 10) || rounds == 200
          NativeThreads.exiters_start(16) # each fills its tcache, before any dump of this round
          NativeThreads.exiters_release(200, 3000)
          until NativeThreads.exiters_done?
            PtmallocDump.dump(path, ruby: false)
            d = PtmallocDump.load(path)
            stats[:dumps] += 1
            stats[:anomalies].concat(d.anomalies.map(&:to_s))
            stats[:threads] = [stats[:threads], d.threads.size].max
            d.threads.select(&:exiting).each do |t|
              stats[:exiting] += 1
              stats[:exiting_tcache_bytes] += t.tcache_bytes
            end
          end
          rounds += 1
        end
        puts JSON.dump(stats)
      RUBY
      expect(status).to be_success, err
      s = JSON.parse(out, symbolize_names: true)
      expect(s[:threads]).to be > 10 # the filled threads were seen
      expect(s[:anomalies]).to eq([])
      expect(s[:exiting]).to be >= 5 # threads were caught emptying their tcache
    end
  end

  describe "the signal handler" do
    it "dumps on each USR2, chains the previous handler, and the worker keeps running" do
      dir = File.join(tmpdir, "dumps")
      Dir.mkdir(dir)
      code = <<~RUBY
        $stdout.sync = true
        # syswrite: a handler that runs while the main thread is inside IO#write (Ruby 3.3 runs traps
        # there) must not take the IO's write lock again
        Signal.trap("USR2") { $stdout.syswrite("previous handler\n") }
        PtmallocDump.install_signal_handler("USR2", dir: #{dir.inspect}, fork: false)
        PtmallocDump.install_signal_handler("USR2", dir: #{dir.inspect}, fork: false) # idempotent
        $stdout.syswrite("ready\n")
        keep = []
        loop do
          keep << ("x" * rand(2000))
          keep.shift(500) if keep.size > 5000
          sleep 0.001
        end
      RUBY
      Open3.popen3(RbConfig.ruby, "-I", SpecHelpers::LIB, "-rptmalloc_dump", "-e", code) do |i, o, e, t|
        i.close
        expect(o.gets).to eq("ready\n")
        3.times do |n|
          Process.kill("USR2", t.pid)
          deadline = Time.now + 30
          sleep 0.05 until Dir.children(dir).count { |f| f.end_with?(".dump") } > n || Time.now > deadline
          expect(o.gets).to eq("previous handler\n")
        end
        expect(Process.kill(0, t.pid)).to eq(1) # still running
        Process.kill("KILL", t.pid)
        log = e.read
        expect(log.scan(/ptmalloc_dump: wrote (\S+): heap/).size).to eq(3)
      end
      dumps = Dir[File.join(dir, "ptmalloc-*.dump")]
      expect(dumps.size).to eq(3)
      dumps.each do |f|
        expect(File.basename(f)).to match(/\Aptmalloc-\d+-\d{8}-\d{6}-\d{6}\.dump\z/)
        expect(File.stat(f).mode & 0o777).to eq(0o600)
        expect(PtmallocDump.load(f).arenas).not_to be_empty
      end
    end

    it "logs from the handler while the worker itself is writing to the same log" do
      log = File.join(tmpdir, "worker.log")
      out, err, status = child(<<~RUBY)
        log = File.open(#{log.inspect}, "a")
        log.sync = true
        PtmallocDump.install_signal_handler("USR2", dir: #{tmpdir.inspect}, fork: false, log: log)
        signaller = Thread.new do
          3.times do |n|
            Process.kill("USR2", Process.pid)
            sleep 0.01 until Dir[File.join(#{tmpdir.inspect}, "*.dump")].size > n
          end
        end
        # the trap handler runs on this thread, here mostly inside IO#write
        log.write("worker line " * 20 + "\n") while signaller.alive?
        puts "alive"
      RUBY
      expect(status).to be_success, err
      expect(out).to eq("alive\n")
      expect(File.read(log).scan(/^ptmalloc_dump: wrote /).size).to eq(3)
    end

    it "uses fork snapshots when asked" do
      dir = File.join(tmpdir, "snaps")
      Dir.mkdir(dir)
      out, err, status = child(<<~RUBY)
        PtmallocDump.install_signal_handler("USR1", dir: #{dir.inspect}, fork: true)
        Process.kill("USR1", Process.pid)
        deadline = Time.now + 30
        sleep 0.05 until Dir.children(#{dir.inspect}).any? { |f| f.end_with?(".dump") } || Time.now > deadline
        sleep 0.2
        puts "alive"
      RUBY
      expect(status).to be_success, err
      expect(out).to eq("alive\n")
      expect(err).to match(/snapshot process \d+ is writing/)
      f = Dir[File.join(dir, "*.dump")].first
      expect(PtmallocDump.load(f).header[:fork_snapshot]).to be(true)
    end

    it "says why a snapshot nobody waits for failed" do
      out, err, status = child(<<~RUBY)
        pid = PtmallocDump.dump(#{File.join(tmpdir, 'missing', 'x.dump').inspect}, fork: true)
        Process.wait(pid)
        puts $?.exitstatus, Thread.list.size # no thread of the gem's waits on the child
      RUBY
      expect(status).to be_success, err
      expect(out).to eq("1\n1\n")
      expect(without_gem_notices(err))
        .to match(%r{\Aptmalloc_dump: snapshot process \d+ did not write \S+/missing/x\.dump: No such file or directory - .+\n\z})
    end

    it "logs a signal that arrives while the previous snapshot is still being written" do
      dir = File.join(tmpdir, "busy")
      Dir.mkdir(dir)
      out, err, status = child(<<~RUBY)
        keep = Array.new(600_000) { |i| "x" * (100 + i % 50) }     # a heap that takes a while to write
        PtmallocDump.install_signal_handler("USR1", dir: #{dir.inspect}, fork: true, references: true)
        5.times { Process.kill("USR1", Process.pid); sleep 0.05 }
        # until the snapshots are done: dumps there, none being written, and no new one for a second
        deadline = Time.now + 60
        seen = -1
        until Time.now > deadline
          names = Dir.children(#{dir.inspect})
          done = names.count { |f| f.end_with?(".dump") }
          break if done.positive? && done == seen && names.none? { |f| f.include?(".tmp-") }
          seen = done
          sleep 1
        end
        puts keep.size
      RUBY
      expect(status).to be_success, err
      expect(out).to eq("600000\n")
      started = err.scan(/snapshot process (\d+) is writing/).flatten
      expect(started.size).to eq(Dir.children(dir).count { |f| f.end_with?(".dump") })
      expect(err).to match(/USR1 arrived while snapshot process (\d+) was still writing; starting another/)
      busy = err.scan(/while snapshot process (\d+) was still writing/).flatten
      expect(busy - started).to eq([])
    end
  end

  describe "a fork snapshot while another thread holds the dynamic loader's lock" do
    it "completes: the child takes no lock that a thread of the parent may hold at the fork" do
      so = build_fixture("loader_lock", extra_flags: ["-lpthread"])
      out, err, status = child(<<~RUBY, timeout: 120)
        lib = Fiddle.dlopen(#{so.inspect})
        arm = Fiddle::Function.new(lib["ll_arm"], [], Fiddle::TYPE_INT)
        held = Fiddle::Function.new(lib["ll_held_at_fork"], [], Fiddle::TYPE_INT)
        release = Fiddle::Function.new(lib["ll_release"], [], Fiddle::TYPE_VOID)
        results = [true, false].map do |references|
          raise "the holder thread did not start" unless arm.call == 1
          path = File.join(#{tmpdir.inspect}, "held-\#{references}.dump")
          pid = PtmallocDump.dump(path, fork: true, references: references)
          held_then = held.call == 1
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
          st = nil
          until (st = Process.waitpid2(pid, Process::WNOHANG)&.last)
            if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
              Process.kill("KILL", pid)
              Process.waitpid(pid)
              break
            end
            sleep 0.05
          end
          release.call
          ok = st&.success? || false
          d = ok ? PtmallocDump.load(path) : nil
          { references: references, held: held_then, finished: !st.nil?, ok: ok,
            snapshot: d && d.header[:fork_snapshot],
            data_roots: d ? d.roots.count { |r| r[:kind] == :data } : 0,
            differences: d ? d.verify.differences.map(&:to_s) : nil }
        end
        puts JSON.generate(results)
      RUBY
      expect(status.success?).to be(true), err
      with_refs, without = JSON.parse(out.lines.last, symbolize_names: true)
      [with_refs, without].each do |r|
        expect(r[:held]).to be(true), "the loader's lock was not held at the fork"
        expect(r[:finished]).to be(true), "the snapshot child hung (references: #{r[:references]})"
        expect(r[:ok]).to be(true), err
        expect(r[:snapshot]).to be(true)
        expect(r[:differences]).to eq([])
      end
      # the loaded objects' writable segments were still listed (by the parent, before the fork)
      expect(with_refs[:data_roots]).to be > 3
    end
  end

  describe "a fork snapshot's residency" do
    it "records what was resident in the parent at the fork, and which pages the parent mapped alone" do
      NativeThreads.start(0)
      live, guard, gone, guard2 = NativeThreads.malloc(0, [64 * 1024, 64, 200 * 1024, 64])
      Fiddle::Pointer.new(live)[0, 64 * 1024] = "l" * (64 * 1024)
      Fiddle::Pointer.new(gone)[0, 100 * 1024] = "g" * (100 * 1024)
      begin
        NativeThreads.prepare_free(0, [gone]).call
        SpecHelpers::Libc.malloc_trim(0)
        # the freed block's inner pages this process's pagemap says are gone just before the dump
        # (malloc_trim released them; another thread of the process may take a few back meanwhile)
        inner = (1..40).map { |k| gone + k * 4096 }
        released = File.open("/proc/self/pagemap", "rb") do |f|
          inner.select { |a| f.seek(a / 4096 * 8) && f.read(8).unpack1("Q<").nobits?(3 << 62) }
        end
        expect(released.size).to be >= 8 # enough of them for the check below to mean something
        # and the live block's pages: this process's alone (bit 56), as the kernel says before the dump
        kept = (1..14).map { |k| live + k * 4096 }
        exclusive = File.open("/proc/self/pagemap", "rb") do |f|
          kept.to_h { |a| f.seek(a / 4096 * 8) && [a, f.read(8).unpack1("Q<")[56] == 1] }
        end
        path = File.join(tmpdir, "snap.dump")
        PtmallocDump.dump(path, fork: true, wait: true)
        dump = PtmallocDump.load(path)
        expect(dump.header[:fork_snapshot]).to be(true)
        expect(dump.header[:pid]).to eq(Process.pid) # the heap dumped is this process's
        expect(dump.header[:ppid]).to eq(0)
        map = dump.pages[dump.chunk_containing(live).heap.index]
        expect(map.state_at(live + 8192)).to eq(:present)
        expect(released.map { |a| map.state_at(a) }).to all(eq(:absent))
        # the child maps every page too (its own pagemap calls none exclusive): the parent's reading
        # from before the fork is what the dump holds
        expect(dump.header[:page_sharing]).to be(true)
        expect(kept.map { |a| map.sharing_at(a) }).to eq(kept.map { |a| exclusive[a] ? :exclusive : :shared })
        expect(exclusive.values).to include(true)
        expect(dump.verify.differences).to eq([])
      ensure
        NativeThreads.prepare_free(0, [live, guard, guard2]).call
        NativeThreads.stop(0)
      end
    end
  end

  describe "a corrupted heap" do
    SETUP = <<~RUBY
      NativeThreads.start(0)
      a, g1, b, g2, t1, t2, g3 = NativeThreads.malloc(0, [2000, 64, 3000, 64, 40, 40, 64])
      # t1, t2: the thread's tcache; b: unsorted bin. The tcache first: glibc 2.43 makes it on the
      # thread's first free, and would carve it out of b were b free by then
      NativeThreads.prepare_free(0, [t1, t2, b]).call
      PtmallocDump.dump(#{File.join(Dir.tmpdir, 'ptmd-warm.dump').inspect}, ruby: false)
    RUBY

    # The thread's tcache struct: the one whose entries hold t2 (the head of its bin), and the
    # address of that bin's count (uint16 from glibc 2.30 on, a byte before; bin 1 holds 48-byte
    # chunks, malloc(40)'s).
    TCACHE_OF_T2 = <<~RUBY
      d = PtmallocDump.load(#{File.join(Dir.tmpdir, 'ptmd-warm.dump').inspect})
      tcache = d.threads.map(&:tcache).compact.find { |tc| Fiddle::Pointer.new(tc)[0, 1216].unpack("Q<*").include?(t2) }
      wide = Gem::Version.new(d.header[:glibc_version]) >= Gem::Version.new("2.30")
      count_at = tcache + (wide ? 2 : 1)
      mangle = ->(field, ptr) { Gem::Version.new(d.header[:glibc_version]) >= Gem::Version.new("2.32") ? (field >> 12) ^ ptr : ptr }
    RUBY

    # The thread's arena (ar_ptr of the heap_info below its chunks) made to point at itself:
    # main_arena -> it -> it -> ... (next sits after the bins: 2072 from glibc 2.43, 2160 before)
    RING_SELF_LOOP = "h = a & ~((64 << 20) - 1); ar = Fiddle::Pointer.new(h)[0, 8].unpack1('Q<'); " \
                     "nx = Gem::Version.new(d.header[:glibc_version]) >= Gem::Version.new('2.43') ? 2072 : 2160; " \
                     "Fiddle::Pointer.new(ar + nx)[0, 8] = [ar].pack('Q<')"

    # Damages the heap as `how` says, dumps it (in process, or a fork snapshot) and reports.
    def corrupt(how, fork: false)
      path = File.join(tmpdir, "corrupt.dump")
      out, err, status = child(<<~RUBY)
        #{SETUP}
        #{TCACHE_OF_T2}
        #{how}
        refused = nil
        begin
          PtmallocDump.dump(#{path.inspect}, ruby: false, fork: #{fork}, wait: #{fork})
        rescue PtmallocDump::HeapDamagedError => e
          refused = "\#{e.class}: \#{e.message}"
          PtmallocDump.dump(#{path.inspect}, ruby: false)
        end
        d = PtmallocDump.load(#{path.inspect})
        puts JSON.dump(kinds: d.anomalies.map { |x| x.kind.to_s }, ok: d.verify.ok?, oracles: d.header[:oracles_captured],
                       refused: refused, arenas: d.arenas.size,
                       b: b, t1: t1, t2: t2, addresses: d.anomalies.map(&:address),
                       t_states: [t1, t2].map { |t| d.chunk_at(t - 16)&.state.to_s })
        $stdout.flush
        exit!(0) # no finalizers: the heap is broken
      RUBY
      expect(status).to be_success, err
      JSON.parse(out, symbolize_names: true)
    end

    [false, true].each do |fork|
      context(fork ? "in a fork snapshot" : "in process") do
        it "records a free chunk whose size was overwritten, and carries on" do
          r = corrupt("Fiddle::Pointer.new(b - 8)[0, 8] = [0x4141414141414149].pack('Q<')", fork: fork)
          expect(r[:kinds]).to include("bad_size")
          expect(r[:addresses]).to include(r[:b] - 16)
          expect(r[:kinds]).to include("list_not_chunk") # the bin entry no longer matches a chunk
          expect(r[:ok]).to be(false)
        end

        it "records a bin whose fd was overwritten, and does not let glibc read it" do
          r = corrupt("Fiddle::Pointer.new(b)[0, 8] = [0x4141414141414140].pack('Q<')", fork: fork)
          expect(r[:kinds]).to include("bad_pointer")
          expect(r[:oracles]).to be(false)
          expect(r[:ok]).to be(false)
        end

        # More damage each of which the walk must report (and carry on): [how, anomaly kinds, one of which]
        {
          "a bin chunk whose bk was overwritten" => ["Fiddle::Pointer.new(b + 8)[0, 8] = [0x4141414141414140].pack('Q<')", %w[list_link bad_pointer]],
          "an in-use chunk whose size was overwritten" => ["Fiddle::Pointer.new(g1 - 8)[0, 8] = [0x4141414141414141].pack('Q<')", %w[bad_size past_end]],
          "an in-use chunk that claims to be free" =>
            ["Fiddle::Pointer.new(b - 8)[0, 8] = [Fiddle::Pointer.new(b - 8)[0, 8].unpack1('Q<') & ~1].pack('Q<')", %w[free_not_in_bin list_in_use]],
          "a free chunk whose size puts it in another bin" =>
            ["Fiddle::Pointer.new(b - 8)[0, 8] = [(Fiddle::Pointer.new(b - 8)[0, 8].unpack1('Q<') & 7) | 1024].pack('Q<')", %w[wrong_bin bad_size list_not_chunk]],
          "a main-arena chunk marked as another arena's" =>
            ["m = Fiddle.malloc(200); Fiddle::Pointer.new(m - 8)[0, 8] = [Fiddle::Pointer.new(m - 8)[0, 8].unpack1('Q<') | 4].pack('Q<')",
             %w[wrong_arena]],
          "a tcache entry whose key was overwritten" => ["Fiddle::Pointer.new(t2 + 8)[0, 8] = [0x4242424242424242].pack('Q<')", %w[tcache_key]],
          # the thread's own arena: its heap_info sits at the 64 MiB boundary below its chunks
          "a heap_info whose prev points at itself" =>
            ["h = a & ~((64 << 20) - 1); Fiddle::Pointer.new(h + 8)[0, 8] = [h].pack('Q<')", %w[heap_info]],
          "a heap_info whose size was overwritten" =>
            ["h = a & ~((64 << 20) - 1); Fiddle::Pointer.new(h + 16)[0, 8] = [0x4141414141414000].pack('Q<')", %w[heap_info]]
        }.each do |what, (how, kinds)|
          it "records #{what}" do
            r = corrupt(how, fork: fork)
            expect(r[:kinds] & kinds).not_to be_empty, "anomalies: #{r[:kinds].inspect}"
            expect(r[:oracles]).to be(false) if kinds == %w[heap_info] # glibc would loop forever
            expect(r[:arenas]).to eq(2) if kinds == %w[heap_info] # the damaged arena is listed, main_arena walked
            expect(r[:ok]).to be(false)
          end
        end

        it "records an arena ring that never returns to main_arena#{fork ? ', in process, as fork would hang' : ''}" do
          r = corrupt(RING_SELF_LOOP, fork: fork)
          expect(r[:kinds]).to include("arena_ring")
          expect(r[:oracles]).to be(false) # glibc's malloc_info would go round for ever
          expect(r[:ok]).to be(false)
          expect(r[:arenas]).to eq(2) # main_arena and the thread's, each once
          if fork
            expect(r[:refused]).to match(/HeapDamagedError: the heap is damaged: arena 0x\h+'s next \(0x\h+\) leads back to an arena already on the ring/)
          end
        end

        if fork
          it "dumps in process from the signal handler when a broken arena ring rules out the snapshot" do
            dir = File.join(tmpdir, "ring")
            Dir.mkdir(dir)
            out, err, status = child(<<~RUBY)
              #{SETUP}
              #{TCACHE_OF_T2}
              #{RING_SELF_LOOP}
              PtmallocDump.install_signal_handler("USR1", dir: #{dir.inspect}, fork: true, ruby: false)
              Process.kill("USR1", Process.pid)
              sleep 0.05 until Dir.children(#{dir.inspect}).any? { |f| f.end_with?(".dump") }
              d = PtmallocDump.load(Dir[File.join(#{dir.inspect}, "*.dump")].first)
              puts d.anomalies.map(&:kind).uniq.inspect, d.header[:fork_snapshot]
              $stdout.flush
              exit!(0)
            RUBY
            expect(status).to be_success, err
            expect(out).to eq("[:arena_ring]\nfalse\n")
            expect(err).to match(/ptmalloc_dump: no snapshot \(the heap is damaged: .+\); dumping in process\n/)
            expect(err).to match(/ptmalloc_dump: wrote \S+: heap /)
          end
        end

        it "records a large bin whose fd_nextsize or bk_nextsize was overwritten" do
          %w[0 8].each do |off|
            r = corrupt(<<~RUBY, fork: fork)
              NativeThreads.malloc(0, [8000]) # sorts b out of the unsorted bin into its large bin
              Fiddle::Pointer.new(b + 16 + #{off})[0, 8] = [0x4141414141414140].pack('Q<')
            RUBY
            expect(r[:kinds]).to include("nextsize")
            expect(r[:ok]).to be(false)
          end
        end

        # The bin holds t2 then t1. What the list still reaches stays tcache; a chunk it no longer
        # reaches (t1 behind a damaged t2) looks in use, as nothing says otherwise.
        {
          "a next pointer to unmapped memory" => ["Fiddle::Pointer.new(t2)[0, 8] = [0x4141414141414140].pack('Q<')", %w[tcache]],
          "a next pointer to itself" => ["Fiddle::Pointer.new(t2)[0, 8] = [mangle.(t2, t2)].pack('Q<')", %w[tcache]],
          "a cycle" => ["Fiddle::Pointer.new(t1)[0, 8] = [mangle.(t1, t2)].pack('Q<')", %w[tcache tcache]],
          "a count of 60,000" => ["Fiddle::Pointer.new(count_at)[0, 2] = [60_000].pack('S<')", %w[tcache tcache]]
        }.each do |what, (how, reached)|
          it "records a thread's tcache with #{what}, and keeps what it reaches tcache" do
            r = corrupt(how, fork: fork)
            expect(r[:kinds] & %w[list_not_chunk tcache_count list_cycle duplicate bad_pointer]).not_to be_empty
            expect(r[:t_states].reverse.first(reached.size)).to eq(reached)
            expect(r[:ok]).to be(false)
          end
        end
      end
    end
  end

  describe "a malloc that is not glibc's" do
    multiarch = "/usr/lib/#{RbConfig::CONFIG['host_cpu']}-linux-gnu"
    { "jemalloc" => "#{multiarch}/libjemalloc.so.2", "tcmalloc" => "#{multiarch}/libtcmalloc_minimal.so.4" }.each do |name, lib|
      it "refuses #{name} before any walk, naming it" do
        expect(File).to exist(lib), "#{lib} is missing: bin/setup installs it"

        target = File.join(tmpdir, "#{name}.dump")
        out, err, status = run_ruby(<<~RUBY, env: { "LD_PRELOAD" => lib })
          begin
            PtmallocDump.dump(#{target.inspect})
          rescue PtmallocDump::UnsupportedAllocatorError => e
            puts e.message
          end
        RUBY
        expect(status).to be_success, err
        expect(out).to include("not glibc's ptmalloc2", File.basename(lib))
        expect(File.exist?(target)).to be(false)
      end
    end
  end

  describe "files" do
    it "fails clearly in an unwritable directory, leaves nothing, and the process runs on" do
      File.chmod(0o755, tmpdir) # nobody may reach the directory, not write into it
      dir = File.join(tmpdir, "locked")
      Dir.mkdir(dir, 0o755)
      out, err, status = child(<<~RUBY)
        Process::Sys.setuid(65534) # nobody: the directory is root's
        # setuid leaves the process not dumpable, which makes its /proc/self/mem root's: where
        # process_vm_readv is missing (qemu-user) the dump reads its memory there
        Fiddle::Function.new(Fiddle::Handle::DEFAULT["prctl"], [Fiddle::TYPE_INT, Fiddle::TYPE_LONG], Fiddle::TYPE_INT)
                        .call(4, 1) # PR_SET_DUMPABLE
        begin
          PtmallocDump.dump(#{File.join(dir, 'x.dump').inspect})
        rescue SystemCallError => e
          puts e.class, e.message
        end
        puts Dir.children(#{dir.inspect}).size
        puts "alive"
      RUBY
      expect(status).to be_success, err
      expect(out.lines.map(&:chomp)).to eq(["Errno::EACCES", "Permission denied - cannot create the dump file in #{dir}", "0", "alive"])
    end

    it "fails clearly on a full disk (a tiny RLIMIT_FSIZE), leaves no partial file, and runs on" do
      if SpecHelpers.qemu_user?
        skip "qemu-user writes the guest's /proc/self/maps into a file of its own, which the limit ends with SIGXFSZ"
      end

      path = File.join(tmpdir, "full.dump")
      out, err, status = child(<<~RUBY)
        Process.setrlimit(:FSIZE, 8192)
        begin
          PtmallocDump.dump(#{path.inspect})
        rescue SystemCallError => e
          puts e.class
        end
        puts Dir.children(#{tmpdir.inspect}).size
        puts "alive"
      RUBY
      expect(status).to be_success, err
      expect(out.lines.map(&:chomp)).to eq(%w[Errno::EFBIG 0 alive])
      expect(File.exist?(path)).to be(false)
    end
  end

  describe "damaged dump files" do
    it "names a malloc_info section whose elements lost a figure, even under a valid checksum" do
      base = File.join(tmpdir, "base.dump")
      PtmallocDump.dump(base)
      bytes = File.binread(base).b
      # within the malloc_info section: a chunk's words elsewhere in the file may hold the same text
      _, _, payload, length = FieldSweep.sections(bytes).find { |type, *| type == 4 }
      at = bytes.index('<size from="'.b, payload)
      expect(at).to be < payload + length
      at = bytes.index(' to="'.b, at)
      bytes[at, 5] = ' tx="'.b
      bytes[-56 + 24 + 24, 4] = [Zlib.crc32(bytes[0, bytes.size - 56])].pack("V")
      File.binwrite(base, bytes)
      expect { PtmallocDump.load(base) }
        .to raise_error(PtmallocDump::FormatError, /#{Regexp.escape(base)}: damaged malloc_info section \(malloc_info heap 0: <size .*lacks to\)/)
    end

    it "loads each of 1,000 mutated or truncated dumps or raises FormatError, and never crashes on what loads" do
      base = File.join(tmpdir, "base.dump")
      PtmallocDump.dump(base, references: true)
      good = File.binread(base).b
      rng = Random.new(2024)
      loaded = 0
      1000.times do |i|
        bytes = good.dup
        case i % 4
        when 0 then bytes = bytes[0, rng.rand(bytes.size)]
        else
          (1 + rng.rand(8)).times do
            at = rng.rand(bytes.size - 56)
            bytes.setbyte(at, rng.rand(256))
          end
          # most of the time give it a valid checksum, so the structure checks are what is tested
          bytes[-56 + 24 + 24, 4] = [Zlib.crc32(bytes[0, bytes.size - 56])].pack("V") unless (i % 4) == 3
        end
        f = File.join(tmpdir, "m.dump")
        File.binwrite(f, bytes)
        begin
          d = PtmallocDump.load(f)
        rescue PtmallocDump::FormatError
          next
        end
        loaded += 1
        d.summary
        d.analysis
        d.verify
        d.each_chunk.count
        d.ruby&.summary
        PtmallocDump::TextSummary.new(d).to_s
        JSON.generate(PtmallocDump::JsonSummary.new(d).to_h)
        next unless (loaded % 25) == 1

        out = File.join(tmpdir, "render#{i}")
        Dir.mkdir(out)
        PtmallocDump::Report.new(d, out).write
      end
      expect(loaded).to be > 0
    end
  end
end
