# frozen_string_literal: true

require "json"
require_relative "spec_helper"

# Each example's target (@target, the thread Open3 waits for it with, or @orphan, a pid init reaps) is
# killed after it; fixtures in spec/fixtures/outside are built into the example's temporary directory.
# The targets share this process's libc: its symbol file (libc6-dbg's, or the one LibcFacts makes where
# that is not installed) is found through PTMALLOC_DUMP_DEBUG_DIR, as a user without libc6-dbg would
# point the gem at one; examples that pass debug_dir: override it.
RSpec.shared_context "with targets of spec/fixtures/outside" do
  include SpecHelpers

  around do |example|
    saved = ENV.fetch("PTMALLOC_DUMP_DEBUG_DIR", nil)
    ENV["PTMALLOC_DUMP_DEBUG_DIR"] = LibcFacts.debug_dir
    example.run
  ensure
    ENV["PTMALLOC_DUMP_DEBUG_DIR"] = saved
  end

  after do
    [@target&.pid, @orphan].compact.each do |pid|
      Process.kill(:KILL, pid)
    rescue Errno::ESRCH
      nil # the example killed it, and it was reaped
    end
    @target&.value
  end

  def compile(name, *flags)
    src = File.join(SpecHelpers::ROOT, "spec", "fixtures", "outside", "#{name}.c")
    out = File.join(tmpdir, "#{name}#{flags.join}")
    _o, e, s = Open3.capture3("cc", "-O1", "-Wall", "-Wextra", "-pthread", *flags, "-o", out, src)
    raise "building #{name} failed (install gcc and libc6-dev): #{e}" unless s.success?

    out
  end
end

# The ptrace memory source: every thread of another process stopped, its memory read, and the
# process let go on every path. Oracles: the bytes the target wrote and printed the address of,
# its /proc/PID/task list, the counters its spinning threads advance, /proc/PID/status.
RSpec.describe "reading another process", :ptrace do
  include_context "with targets of spec/fixtures/outside"

  THREADS_IN_TARGET = 4

  def start_target(*args)
    stdin, stdout, thread = Open3.popen2(compile("stop_target"), *args)
    stdin.close
    line = stdout.gets
    raise "the target printed nothing" unless line

    @target = thread
    fields = line.scan(/(\w+)=(\w+)/).to_h
    [thread.pid, Integer(fields["buffer"]), Integer(fields["spins"])]
  end

  def state_of(pid)
    File.read("/proc/#{pid}/status")[/^State:\s+(\S)/, 1]
  end

  def task_states(pid)
    Dir["/proc/#{pid}/task/*"].filter_map do |t|
      [File.basename(t).to_i, File.read("#{t}/stat")[/\) (\S)/, 1]]
    rescue Errno::ENOENT, Errno::ESRCH
      nil # a thread that ended while it was listed
    end.to_h
  end

  it "stops every thread, reads the bytes the target wrote and lets every thread run again" do
    pid, buffer, spins = start_target
    expected = (0...4096).map { |i| (i * 7 + 3) & 0xff }.pack("C*")
    bytes, tids, pause_ns = PtmallocDump._read_process(pid, buffer, 4096)
    expect(bytes).to eq(expected)
    expect(tids.sort).to eq(Dir["/proc/#{pid}/task/*"].map { |t| File.basename(t).to_i }.sort)
    expect(tids.size).to eq(THREADS_IN_TARGET + 1)
    expect(pause_ns).to be > 0
    puts "  target stopped for #{(pause_ns / 1e6).round(3)} ms (#{tids.size} threads, 4 KiB read)"
    task_states(pid).each { |tid, st| expect(st).not_to eq("t"), "thread #{tid} left stopped" }
    # the spinning threads advance again: nobody stayed stopped
    before, = PtmallocDump._read_process(pid, spins, 8 * THREADS_IN_TARGET)
    sleep 0.05
    after, = PtmallocDump._read_process(pid, spins, 8 * THREADS_IN_TARGET)
    before.unpack("Q*").zip(after.unpack("Q*")).each { |b, a| expect(a).to be > b }
  end

  it "answers an unreadable address with nil and still lets the target go" do
    pid, = start_target
    bytes, tids, = PtmallocDump._read_process(pid, 8, 16)
    expect(bytes).to be_nil
    expect(tids.size).to eq(THREADS_IN_TARGET + 1)
    expect(state_of(pid)).not_to eq("t")
  end

  # What a block run as nobody (uid and gid 65534) in a forked child says: its String, or the
  # PtmallocDump::Error it raised
  def as_nobody
    reader, writer = IO.pipe
    child = fork do
      reader.close
      Process::Sys.setgid(65_534)
      Process::Sys.setuid(65_534)
      begin
        writer.write(yield)
      rescue PtmallocDump::Error => e
        writer.write("#{e.class}: #{e.message}")
      end
      exit!(0)
    end
    writer.close
    Process.wait(child)
    reader.read
  end

  it "says that the target belongs to another user, and leaves it running" do
    pid, = start_target
    message = as_nobody { PtmallocDump._read_process(pid, 0x1000, 8) && "no error" }
    expect(message).to match(/\APtmallocDump::PtracePermissionError: process #{pid} belongs to uid 0/)
    expect(message).to match(/run ptmalloc-dump as that user or as root/)
    expect(state_of(pid)).not_to eq("t")
  end

  it "says that the target belongs to another user before reading its mappings, which are closed to it" do
    pid, = start_target
    out = File.join(tmpdir, "other.dump")
    File.chmod(0o777, tmpdir)
    message = as_nobody do
      File.read("/proc/#{pid}/maps")
      "maps readable"
    rescue Errno::EACCES
      PtmallocDump.dump_process(pid, out) && "no error"
    end
    expect(message).to match(/\APtmallocDump::PtracePermissionError: process #{pid} belongs to uid 0/)
    expect(File.exist?(out)).to be(false)
    expect(state_of(pid)).not_to eq("t")
  end

  it "reads the target's mappings as /proc/PID/maps lists them, its buffer in a readable one" do
    pid, buffer, = start_target
    oracle = File.readlines("/proc/#{pid}/maps").map do |line|
      range, perms = line.split
      lo, hi = range.split("-").map { |x| Integer(x, 16) }
      [lo, hi, perms]
    end
    maps = PtmallocDump._process_maps(pid)
    expect(maps).to eq(oracle)
    holder = maps.find { |lo, hi, _| buffer >= lo && buffer < hi }
    expect(holder[2]).to start_with("rw")
    expect(state_of(pid)).not_to eq("t")
  end

  it "says that a process does not exist" do
    pid = Process.spawn("true")
    Process.wait(pid)
    expect { PtmallocDump._read_process(pid, 0x1000, 8) }
      .to raise_error(PtmallocDump::TargetGoneError, /no process #{pid}/)
    expect { PtmallocDump._process_maps(pid) }.to raise_error(PtmallocDump::TargetGoneError, /no process #{pid}/)
  end

  it "refuses to stop itself" do
    expect { PtmallocDump._read_process(Process.pid, 0x1000, 8) }.to raise_error(ArgumentError, /this process/)
  end
end

# ptmalloc-dump --pid, run as a user runs it. Oracles: the target's own mallinfo2() and malloc_info()
# and the pointers malloc returned to it, with what it did with each; /proc/PID/stat for its state
# afterwards.
RSpec.describe "ptmalloc-dump --pid", :ptrace do
  include_context "with targets of spec/fixtures/outside"

  COUNTERS = %i[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost].freeze

  # Starts the heap target and reads what it printed up to "ready": its mallinfo2, its malloc_info
  # XML, its pointers. detached: started from a shell that exits at once, so that this process is not
  # its parent (init reaps it; the after hook kills it).
  def start_heap_target(detached: false)
    command = detached ? ["sh", "-c", "#{compile('heap_target')} &"] : [compile("heap_target")]
    stdin, stdout, thread = Open3.popen2(*command)
    stdin.close
    detached ? thread.value : @target = thread
    report = { pointers: [], malloc_info: +"" }
    while (line = stdout.gets)
      case line
      when /\Amallinfo2? / then report[:mallinfo2] = line.scan(/(\w+)=(\d+)/).to_h { |k, v| [k.to_sym, Integer(v)] }
      when /\A\s*</ then report[:malloc_info] << line # malloc_info XML, a tag a line
      when /\AP (\S+) (\w+)(?: (\d+))?/ then report[:pointers] << [Integer(Regexp.last_match(1)), Regexp.last_match(2).to_sym, Regexp.last_match(3)&.to_i]
      when /\Aready threads=(\d+) pid=(\d+)/
        report[:threads] = Integer(Regexp.last_match(1))
        report[:pid] = Integer(Regexp.last_match(2))
        break
      end
    end
    raise "the heap target ended before it was ready" unless report[:threads]

    @orphan = report[:pid] if detached
    [report[:pid], report]
  end

  def ptmalloc_dump(*args, env: {})
    Open3.capture3(env, "bundle", "exec", "exe/ptmalloc-dump", *args, chdir: SpecHelpers::ROOT)
  end

  # A copy of core at out whose NT_FILE notes are renamed (their type changed): the count changed.
  def without_nt_file(core, out)
    data = File.binread(core)
    phoff, phentsize, phnum = data.unpack("@32Q<@54S<S<")
    changed = 0
    phnum.times do |i|
      type, offset, filesz = data.unpack("@#{phoff + i * phentsize}L<@#{phoff + i * phentsize + 8}Q<@#{phoff + i * phentsize + 32}Q<")
      next unless type == 4 # PT_NOTE

      at = offset
      while at + 12 <= offset + filesz
        namesz, descsz, ntype = data.unpack("@#{at}L<3")
        if ntype == 0x46494c45 # NT_FILE
          data[at + 8, 4] = [0x46494c58].pack("L<")
          changed += 1
        end
        at += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
      end
    end
    File.binwrite(out, data)
    changed
  end

  def stopped_threads(pid)
    Dir["/proc/#{pid}/task/*/stat"].filter_map do |stat|
      File.read(stat)[/\) (\S)/, 1]
    rescue Errno::ENOENT, Errno::ESRCH
      nil
    end.select { |state| %w[t T].include?(state) }
  end

  # glibc's malloc_info XML as plain data (malloc/malloc.c, __malloc_info): per <heap nr=N> its
  # <size> lines in order, its <unsorted>, its fast and rest totals and current system bytes; and the
  # totals after the last heap.
  def parse_malloc_info(xml)
    figures = ->(text) { text.scan(/(\w+)="(\d+)"/).to_h { |k, v| [k.to_sym, Integer(v)] } }
    heaps = xml.scan(%r{<heap nr="(\d+)">(.*?)</heap>}m).map do |nr, body|
      { nr: Integer(nr),
        sizes: body.scan(%r{<size ([^>]*)/>}).map { |(attrs)| figures.call(attrs) },
        unsorted: body[%r{<unsorted ([^>]*)/>}, 1]&.then(&figures),
        # glibc 2.43 has no fastbins and prints no fast total
        fast: body[%r{<total type="fast" ([^>]*)/>}, 1]&.then(&figures) || { count: 0, size: 0 },
        rest: figures.call(body[%r{<total type="rest" ([^>]*)/>}, 1]),
        system: figures.call(body[%r{<system type="current" ([^>]*)/>}, 1])[:size] }
    end
    tail = xml[xml.rindex("</heap>")..]
    { heaps: heaps, mmap: figures.call(tail[%r{<total type="mmap" ([^>]*)/>}, 1]),
      system: figures.call(tail[%r{<system type="current" ([^>]*)/>}, 1])[:size] }
  end

  it "reproduces the target's mallinfo2 and malloc_info and finds every pointer it holds in its state, and leaves it running" do
    pid, report = start_heap_target
    out = File.join(tmpdir, "target.dump")
    stdout, stderr, status = ptmalloc_dump("--pid", pid.to_s, out)
    expect(status).to be_success, stderr
    expect(stdout).to match(/process #{pid} stopped for [\d.]+ ms/)
    puts "  #{stdout.strip}"
    expect(stopped_threads(pid)).to eq([])

    dump = PtmallocDump.load(out)
    summary = dump.summary
    COUNTERS.each { |f| expect([f, summary[f]]).to eq([f, report[:mallinfo2].fetch(f)]) }

    # the target's malloc_info, heap by heap in ring order (main_arena first) against the arenas
    info = parse_malloc_info(report[:malloc_info])
    arenas = summary[:arenas]
    expect(info[:heaps].map { |h| h[:nr] }).to eq((0..report[:threads]).to_a)
    expect(arenas.size).to eq(info[:heaps].size)
    info[:heaps].zip(arenas) do |heap, arena|
      scope = "heap #{heap[:nr]}"
      expect(heap[:sizes] + [heap[:unsorted]].compact).not_to be_empty, "#{scope} printed no free sizes: the target's heap is not fragmented"
      expect([scope, :fast, heap[:fast]]).to eq([scope, :fast, { count: arena[:fastbin_count], size: arena[:fastbin_bytes] }])
      expect([scope, :rest, heap[:rest]]).to eq([scope, :rest, { count: arena[:ordblks], size: arena[:malloc_info_rest_size] }])
      expect([scope, :system, heap[:system]]).to eq([scope, :system, arena[:system_mem]])
      # glibc prints a fastbin's sizes as from = size - 15 (MALLOC_ALIGNMENT - 1), to = size
      walked = arena[:fastbins].map { |b| { from: b[:to] - 15, to: b[:to], total: b[:total], count: b[:count] } } +
               arena[:bins].map { |b| b.slice(:from, :to, :total, :count) }
      expect([scope, :sizes, heap[:sizes]]).to eq([scope, :sizes, walked])
      expect([scope, :unsorted, heap[:unsorted]]).to eq([scope, :unsorted, arena[:unsorted].first&.slice(:from, :to, :total, :count)])
    end
    expect(info[:mmap]).to eq(count: summary[:hblks], size: summary[:hblkhd])
    expect(info[:system]).to eq(arenas.sum { |a| a[:system_mem] })
    puts "  malloc_info: #{info[:heaps].sum { |h| h[:sizes].size }} size lines in #{info[:heaps].size} heaps agree"
    # and the same comparison Dump#verify makes in process, with the target's own counters
    v = dump.verify(mallinfo2: report[:mallinfo2], malloc_info: report[:malloc_info])
    expect(v.compared).to eq(%w[mallinfo2 malloc_info])
    expect(v.differences.map(&:to_s)).to eq([])
    expect(v.consistent_arenas).to eq(arenas.map { |a| a[:index] })
    expect(v.to_s).to start_with("verified: the walk reproduces mallinfo2 and malloc_info exactly")
    # one count changed in the XML is one difference
    first = info[:heaps][0][:sizes][0] || info[:heaps][0][:unsorted]
    changed = report[:malloc_info].sub(/count="#{first[:count]}"/, %(count="#{first[:count] + 1}"))
    expect(dump.verify(malloc_info: changed).differences.map(&:scope)).to eq(["arena 0 (0x#{arenas[0][:address].to_s(16)})"])
    expect(dump.arenas.size).to eq(report[:threads] + 1)
    expect(dump.header[:pid]).to eq(pid)
    expect(dump.header[:source]).to eq(:pid)
    info = dump.header[:source_info]
    expect(info[:unavailable]).to include(:ruby, :references, :oracles)
    expect(info[:unavailable]).not_to include(:tls)
    expect(info[:threads]).to eq(report[:threads] + 1)
    expect(dump.anomalies).to eq([])
    # without counters given there is nothing to compare: not "verified", and every output says so
    v = dump.verify
    expect(v.status).to eq(:nothing_compared)
    expect(v).not_to be_ok
    expect(v.compared?).to be(false)
    expect(v.to_s).to start_with("nothing compared: glibc's")
    text = PtmallocDump::TextSummary.new(dump).to_s
    expect(text).to include("verify: nothing compared: ")
    expect(PtmallocDump::JsonSummary.new(dump).to_h[:verify]).to include(ok: false, status: :nothing_compared, compared: [])
    expect(File.read(PtmallocDump::Report.new(dump, tmpdir).write)).to include("Nothing compared: the dump holds no figures")
    # no pointer graph from outside: nothing is called leaked, and the findings say what an
    # in-process dump adds
    expect(dump.summary[:owners]).to be_nil
    expect(text).not_to match(/is leaked|^ *leaked /)
    unknown = PtmallocDump::Findings.new(dump).all.find { |f| f.topic == :unknown_owners }
    expect(unknown.bytes).to eq(dump.figures[:in_use])
    expect(unknown.text).to include("taken from outside the process")
    expect(unknown.step).to include("Dump in process with the Ruby pass")

    states = Hash.new(0)
    report[:pointers].each do |ptr, kind, csize|
      chunk = dump.chunk_at(ptr - 16)
      expect(chunk).not_to be_nil, "no chunk at 0x#{(ptr - 16).to_s(16)} (#{kind})"
      case kind
      when :live then expect(chunk.state).to eq(:in_use)
      when :mmapped then expect(chunk.state).to eq(:mmapped)
      else
        expect(chunk.size).to eq(csize)
        # sizes above tcache's and fastbins' go to the unsorted bin; in the threads' arenas a malloc
        # larger than all of them sorted them into their bins since
        allowed = csize > 1040 ? %i[unsorted largebin] : csize > 128 ? %i[tcache unsorted smallbin largebin] : %i[tcache fastbin]
        expect(allowed).to include(chunk.state), "0x#{ptr.to_s(16)} (#{csize} bytes) is #{chunk.state}"
      end
      states[chunk.state] += 1
    end
    puts "  #{report[:pointers].size} pointers: #{states.sort.map { |s, n| "#{n} #{s}" }.join(', ')}"
    expect(states.keys).to include(:tcache, :unsorted, :largebin, :mmapped, :in_use)
    expect(states.key?(:fastbin)).to eq(LibcFacts.glibc_version < Gem::Version.new("2.43")) # 2.43 has no fastbins
    # each thread's tcache was found through its TLS, not by structure
    tls_threads = dump.threads.count { |t| t.tcache && t.found_by == :tls }
    expect(tls_threads).to eq(report[:threads] + 1)

    # the target runs on: its threads are not stopped, and it still answers signals
    expect(File.read("/proc/#{pid}/stat")[/\) (\S)/, 1]).not_to match(/[tTZX]/)
    expect(Process.kill(0, pid)).to eq(1)
  end

  it "finds malloc's globals by structure without a symbol file: the same dump as with it" do
    pid, report = start_heap_target
    with = File.join(tmpdir, "symbols.dump")
    without = File.join(tmpdir, "structure.dump")
    PtmallocDump.dump_process(pid, with)
    _o, err, status = ptmalloc_dump("--debug-dir", tmpdir, "--pid", pid.to_s, without)
    expect(status).to be_success, err
    a = PtmallocDump.load(with)
    b = PtmallocDump.load(without)
    expect(a.header[:symbol_source]).to eq(:build_id)
    expect(b.header[:symbol_source]).to eq(:heuristic)
    expect(b.header.values_at(:main_arena, :mp)).to eq(a.header.values_at(:main_arena, :mp))
    expect(b.header[:source_info][:unavailable]).to include(:tls)
    expect(b.first_difference(a)).to be_nil
    expect(b.each_chunk.map { |c| [c.address, c.size, c.state] }).to eq(a.each_chunk.map { |c| [c.address, c.size, c.state] })
    COUNTERS.each { |f| expect([f, b.summary[f]]).to eq([f, report[:mallinfo2].fetch(f)]) }
    # every thread's tcache was found by its structure, which of them is whose unknown: the report
    # says so, and does not call them gone threads'
    expect(b.threads.count { |t| t.tcache && t.found_by == :scan }).to eq(report[:threads] + 1)
    page = File.read(PtmallocDump::Report.new(b, FileUtils.mkdir_p(File.join(tmpdir, "report")).first).write)
    expect(page).to include("#{report[:threads] + 1} tcache(s) holding", "were found by their structure")
    expect(page).not_to include("threads that are gone")
    expect(b.anomalies).to eq([])
    expect { PtmallocDump.dump_process(pid, without, debug_dir: tmpdir, symbols: :file) }
      .to raise_error(PtmallocDump::SymbolsNotFoundError, /no symbol file for glibc/)
  end

  it "reads a gcore of the same target: the same chunks in the same states as the live dump" do
    pid, report = start_heap_target
    live = File.join(tmpdir, "live.dump")
    _o, err, status = ptmalloc_dump("--pid", pid.to_s, live)
    expect(status).to be_success, err
    prefix = File.join(tmpdir, "core")
    _o, err, status = Open3.capture3("gcore", "-o", prefix, pid.to_s)
    raise "gcore failed (install gdb): #{err}" unless status.success?

    from_core = File.join(tmpdir, "core.dump")
    stdout, err, status = ptmalloc_dump("#{prefix}.#{pid}", from_core)
    expect(status).to be_success, err
    expect(stdout).to match(/core file #{Regexp.escape(prefix)}\.#{pid} \([\d.]+ MiB read\)/)
    a = PtmallocDump.load(live)
    b = PtmallocDump.load(from_core)
    expect(b.header[:source]).to eq(:core)
    expect(b.header[:source_info]).to include(pid: pid, threads: report[:threads] + 1)
    expect(b.header[:source_info][:unavailable]).to include(:ruby, :references, :oracles, :residency)
    expect(b.header[:source_info][:unavailable]).not_to include(:tls)
    expect(b.arenas.map(&:address)).to eq(a.arenas.map(&:address))
    expect(b.chunk_count).to eq(a.chunk_count)
    expect(b.first_difference(a)).to be_nil
    chunks = ->(d) { d.each_chunk.map { |c| [c.address, c.size, c.state] } }
    expect(chunks.call(b)).to eq(chunks.call(a))
    COUNTERS.each { |f| expect([f, b.summary[f]]).to eq([f, report[:mallinfo2].fetch(f)]) }
    expect(b.threads.map { |t| [t.tid, t.tcache, t.tcache_count] }.sort_by(&:first))
      .to eq(a.threads.map { |t| [t.tid, t.tcache, t.tcache_count] }.sort_by(&:first))
    expect(b.anomalies).to eq([])
    # a core tells no residency and no sharing: every page present, none of it called shared
    expect(b.summary[:resident_bytes]).to be > 0
    expect(b.summary).to include(shared_bytes: 0, sharing_unknown_bytes: b.summary[:resident_bytes])
    puts "  #{stdout.strip}"
    # without a symbol file, by structure: the same again
    by_structure = File.join(tmpdir, "core-structure.dump")
    PtmallocDump.dump_core("#{prefix}.#{pid}", by_structure, debug_dir: tmpdir)
    c = PtmallocDump.load(by_structure)
    expect(c.header[:symbol_source]).to eq(:heuristic)
    expect(chunks.call(c)).to eq(chunks.call(a))
    # a core without its NT_FILE note (qemu-user writes such cores): the files it mapped come from the
    # dynamic linker's list of loaded objects in its memory, and the dump is the same again
    no_files = File.join(tmpdir, "no-nt-file.core")
    expect(without_nt_file("#{prefix}.#{pid}", no_files)).to eq(1)
    from_list = File.join(tmpdir, "core-link-map.dump")
    PtmallocDump.dump_core(no_files, from_list)
    d = PtmallocDump.load(from_list)
    expect(d.header.values_at(:main_arena, :mp)).to eq(b.header.values_at(:main_arena, :mp))
    # the path as the dynamic linker opened it, where the kernel names the file (/lib is /usr/lib here)
    expect(File.realpath(d.header[:libc_path])).to eq(File.realpath(b.header[:libc_path]))
    expect(chunks.call(d)).to eq(chunks.call(a))
    expect(d.threads.map { |t| [t.tid, t.tcache] }.sort_by(&:first)).to eq(b.threads.map { |t| [t.tid, t.tcache] }.sort_by(&:first))
    heaps = ->(dump) { dump.heaps.map { |h| [h.start, h.kind] } }
    expect(heaps.call(d)).to eq(heaps.call(b))
  end

  it "finds the tcache of a thread a fork left behind whose struct took a chunk 16 bytes larger than it asked for" do
    # sizeof (tcache_perthread_struct): a count (char before glibc 2.30, uint16 since) and a pointer
    # for each of 64 bins (76 since 2.42); its chunk as tcache_init asks for it (request2size)
    version = LibcFacts.glibc_version
    bins = version >= Gem::Version.new("2.42") ? 76 : 64
    count_width = version >= Gem::Version.new("2.30") ? 2 : 1
    csize = (bins * (count_width + 8) + 8 + 15) & ~15
    fill = dump_and_load("probe.dump", ruby: false).header[:tcache_count]
    stdin, stdout, @target = Open3.popen2(compile("orphan_tcache_target"), csize.to_s, fill.to_s)
    stdin.close
    line = stdout.gets
    raise "the target printed nothing" unless line

    fields = line.scan(/(\w+)=(\S+)/).to_h
    @orphan = Integer(fields.fetch("pid"))
    struct = Integer(fields.fetch("struct"))
    blocks = fields.fetch("blocks").split(",").map { |b| Integer(b) }
    out = File.join(tmpdir, "child.dump")
    PtmallocDump.dump_process(@orphan, out)
    dump = PtmallocDump.load(out)

    chunk = dump.chunk_at(struct - 16)
    expect(chunk.size).to eq(csize + 16), "the thread's tcache did not take the chunk made for it: #{chunk.inspect}"
    expect(chunk).to be_tcache_struct
    left = dump.threads.find { |t| t.tcache == struct }
    expect(left).not_to be_nil, "no thread record holds the tcache at 0x#{struct.to_s(16)}: #{dump.threads.inspect}"
    expect(left).to have_attributes(tid: nil, found_by: :scan, tcache_count: blocks.size)
    blocks.each { |b| expect([b, dump.chunk_at(b - 16)&.state]).to eq([b, :tcache]) }
    expect(dump.anomalies).to eq([])
    # and the report says whose it is
    report = File.read(PtmallocDump::Report.new(dump, FileUtils.mkdir_p(File.join(tmpdir, "report")).first).write)
    expect(report).to include("1 tcache(s) holding #{PtmallocDump::FormatHelpers.human_bytes(left.tcache_bytes)} in " \
                              "#{blocks.size} chunk(s) belong to no thread of this process")
  end

  it "refuses a truncated core and a core of another architecture" do
    pid, = start_heap_target
    prefix = File.join(tmpdir, "core")
    _o, err, status = Open3.capture3("gcore", "-o", prefix, pid.to_s)
    raise "gcore failed (install gdb): #{err}" unless status.success?

    core = "#{prefix}.#{pid}"
    truncated = File.join(tmpdir, "truncated.core")
    IO.copy_stream(core, truncated, File.size(core) / 2)
    out = File.join(tmpdir, "x.dump")
    expect { PtmallocDump.dump_core(truncated, out) }
      .to raise_error(PtmallocDump::CoreFileError, /core file #{Regexp.escape(truncated)} is truncated/)
    arm = File.join(tmpdir, "arm.core")
    head = File.binread(core, 4096)
    head[18, 2] = [RbConfig::CONFIG["host_cpu"] == "aarch64" ? 62 : 183].pack("S<") # the other one of EM_X86_64, EM_AARCH64
    File.binwrite(arm, head)
    expect { PtmallocDump.dump_core(arm, out) }
      .to raise_error(PtmallocDump::CoreFileError, /core of another architecture \(ELF machine (183|62)/)
    _o, stderr, status = ptmalloc_dump(arm, out)
    expect(status.exitstatus).to eq(1)
    expect(stderr).to match(/another architecture/)
    expect { PtmallocDump.dump_core(__FILE__, out) }.to raise_error(PtmallocDump::CoreFileError, /is no core file/)
    expect { PtmallocDump.dump_core(tmpdir, out) }
      .to raise_error(PtmallocDump::CoreFileError, "#{tmpdir} is a directory, not a core file")
    expect { PtmallocDump.dump_core("/dev/zero", out) }
      .to raise_error(PtmallocDump::CoreFileError, "/dev/zero is a device, a pipe or a socket, not a core file")
    missing = File.join(tmpdir, "missing.core")
    expect { PtmallocDump.dump_core(missing, out) }
      .to raise_error(PtmallocDump::CoreFileError, "cannot open core file #{missing}: No such file or directory")
    _o, stderr, status = ptmalloc_dump(tmpdir, out)
    expect([stderr, status.exitstatus]).to eq(["ptmalloc-dump: #{tmpdir} is a directory, not a core file\n", 1])
    expect(File).not_to exist(out)
  end

  it "walks a damaged heap from outside: the damage is recorded, nothing is followed out of the copy" do
    stdin, stdout, thread = Open3.popen2(compile("damaged_target"))
    stdin.close
    @target = thread
    unsorted, tcache, oversized = stdout.gets.scan(/0x\h+/).map { |x| Integer(x) }
    path = File.join(tmpdir, "damaged.dump")
    PtmallocDump.dump_process(thread.pid, path)
    dump = PtmallocDump.load(path)
    kinds = dump.anomalies.map(&:kind)
    puts "  anomalies: #{kinds.tally.sort.map { |k, n| "#{n} #{k}" }.join(', ')}"
    # the unsorted bin's first chunk leads nowhere: the chunks behind it are free but unreached
    expect(kinds).to include(:bad_pointer, :list_not_chunk, :free_not_in_bin)
    # the walk stopped at the oversized chunk and accounted the rest of its heap as one damaged piece
    expect(dump.anomalies.map(&:address)).to include(oversized - 16)
    expect(dump.heaps.first.truncated).to be(true)
    expect(dump.chunk_at(unsorted - 16)).not_to be_nil
    expect(dump.chunk_at(tcache - 16).state).to eq(:tcache)
    expect(stopped_threads(thread.pid)).to eq([])
  end

  it "says that a process is already traced by a debugger, and leaves it to it" do
    pid, = start_heap_target
    gdb_in, gdb_out, gdb = Open3.popen2e("gdb", "-q", "-nx", "-batch", "-p", pid.to_s, "-ex", "shell sleep 3")
    gdb_in.close
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    sleep 0.05 until File.read("/proc/#{pid}/status")[/^TracerPid:\s+(\d+)/, 1].to_i.positive? ||
                     Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    tracer = File.read("/proc/#{pid}/status")[/^TracerPid:\s+(\d+)/, 1].to_i
    raise "gdb did not attach (install gdb): #{gdb_out.read_nonblock(4096, exception: false)}" unless tracer.positive?

    expect { PtmallocDump.dump_process(pid, File.join(tmpdir, "traced.dump")) }
      .to raise_error(PtmallocDump::PtracePermissionError, /process #{pid} is already traced by process #{tracer}/)
    gdb_out.read
    expect(gdb.value).to be_success
    expect(stopped_threads(pid)).to eq([])
    expect(PtmallocDump.dump_process(pid, File.join(tmpdir, "after.dump"))[:arena]).to be > 0
  end

  it "says that a process does not exist" do
    gone = Process.spawn("true")
    Process.wait(gone)
    _o, stderr, status = ptmalloc_dump("--pid", gone.to_s, File.join(tmpdir, "gone.dump"))
    expect(status.exitstatus).to eq(1)
    expect(stderr).to match(/ptmalloc-dump: no process #{gone}/)
    expect { PtmallocDump.dump_process(gone, File.join(tmpdir, "gone.dump")) }
      .to raise_error(PtmallocDump::TargetGoneError, /no process #{gone}/)
    expect(File).not_to exist(File.join(tmpdir, "gone.dump"))
  end

  # PTMALLOC_DUMP_TEST_KILL_TARGET=STEP: the dump sends the target SIGKILL at that step and waits until
  # its memory is gone, so that the steps after it meet a process that has exited, every time.
  it "says that the target exited when it dies while it is stopped or copied, and leaves no file" do
    %w[seized maps copy].each do |step|
      pid, = start_heap_target
      dir = File.join(tmpdir, step)
      Dir.mkdir(dir)
      _o, stderr, status = ptmalloc_dump("--pid", pid.to_s, File.join(dir, "gone.dump"),
                                         env: { "PTMALLOC_DUMP_TEST_KILL_TARGET" => step })
      expect([step, status.exitstatus]).to eq([step, 1])
      expect(stderr).to match(/^ptmalloc-dump: process #{pid} exited while it was being read$/)
      expect([step, Dir.children(dir)]).to eq([step, []]) # neither the dump nor its temporary file
      # it was killed, and its parent (this process) is told so
      expect([step, @target.value.termsig]).to eq([step, Signal.list.fetch("KILL")])
      @target = nil
    end
  end

  it "raises TargetGoneError for a target that dies while it is copied, reaps what it traced, and dumps again" do
    pid, = start_heap_target(detached: true)
    dir = File.join(tmpdir, "out")
    Dir.mkdir(dir)
    path = File.join(dir, "gone.dump")
    begin
      ENV["PTMALLOC_DUMP_TEST_KILL_TARGET"] = "copy"
      expect { PtmallocDump.dump_process(pid, path) }
        .to raise_error(PtmallocDump::TargetGoneError, "process #{pid} exited while it was being read")
    ensure
      ENV.delete("PTMALLOC_DUMP_TEST_KILL_TARGET")
    end
    expect(Dir.children(dir)).to eq([])
    # its threads were this process's tracees: reaped, and the leader handed to its parent (init). A
    # thread left a zombie of this process would stay listed, traced by it, and hold the leader back.
    released = lambda do
      status = File.read("/proc/#{pid}/status")
      Dir.children("/proc/#{pid}/task") == [pid.to_s] && status[/^State:\s+(\S)/, 1] == "Z" &&
        status[/^TracerPid:\s+(\d+)/, 1] == "0"
    rescue Errno::ENOENT, Errno::ESRCH
      true # reaped by init
    end
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.01 until released.call || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    expect(released.call).to be(true), "process #{pid}: #{Dir["/proc/#{pid}/task/*"].size} threads left"
    @orphan = nil
    # and this process dumps the next one as before
    pid2, report = start_heap_target
    summary = PtmallocDump.dump_process(pid2, File.join(tmpdir, "next.dump"))
    COUNTERS.each { |f| expect([f, summary[f]]).to eq([f, report[:mallinfo2].fetch(f)]) }
    expect(stopped_threads(pid2)).to eq([])
  end

  it "says that a process has exited when it is a zombie not yet reaped" do
    zombie = Process.spawn("true")
    sleep 0.01 until File.read("/proc/#{zombie}/stat")[/\) (\S)/, 1] == "Z"
    expect { PtmallocDump.dump_process(zombie, File.join(tmpdir, "zombie.dump")) }
      .to raise_error(PtmallocDump::TargetGoneError, /process #{zombie} has no memory to read: it has exited/)
  ensure
    Process.wait(zombie) if zombie
  end

  it "refuses a static binary, which has no glibc to read, and leaves it running" do
    stdin, stdout, thread = Open3.popen2(compile("stop_target", "-static"))
    stdin.close
    @target = thread
    expect(stdout.gets).to match(/buffer=/)
    path = File.join(tmpdir, "static.dump")
    expect { PtmallocDump.dump_process(thread.pid, path) }
      .to raise_error(PtmallocDump::UnsupportedPlatformError, /process #{thread.pid} has no glibc mapped .*static binary/)
    _o, stderr, status = ptmalloc_dump("--pid", thread.pid.to_s, path)
    expect(status.exitstatus).to eq(1)
    expect(stderr).to match(/has no glibc mapped/)
    expect(File).not_to exist(path)
    expect(stopped_threads(thread.pid)).to eq([])
    expect(File.read("/proc/#{thread.pid}/stat")[/\) (\S)/, 1]).not_to eq("t")
  end

  it "refuses a process whose malloc is jemalloc, and leaves it running" do
    jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    raise "#{jemalloc} is missing (apt-get install libjemalloc2)" unless File.exist?(jemalloc)

    stdin, stdout, thread = Open3.popen2({ "LD_PRELOAD" => jemalloc }, compile("stop_target"))
    stdin.close
    @target = thread
    expect(stdout.gets).to match(/buffer=/)
    expect(File.read("/proc/#{thread.pid}/maps")).to include("libjemalloc")
    path = File.join(tmpdir, "jemalloc.dump")
    expect { PtmallocDump.dump_process(thread.pid, path) }
      .to raise_error(PtmallocDump::UnsupportedAllocatorError, /glibc's malloc was never used in process #{thread.pid}/)
    expect(File).not_to exist(path)
    expect(stopped_threads(thread.pid)).to eq([])
  end

  it "asks for the process and the file", ptrace: false do
    _o, stderr, status = ptmalloc_dump(File.join(tmpdir, "x.dump"))
    expect(status.exitstatus).to eq(2)
    expect(stderr).to match(/missing argument: --pid or CORE/)
    expect(stderr).to match(/Usage: ptmalloc-dump/)
  end

  it "has --version and --help", ptrace: false do
    out, err, status = ptmalloc_dump("--version")
    expect([out, err, status.exitstatus]).to eq(["ptmalloc-dump #{PtmallocDump::VERSION}\n", "", 0])
    out, _e, status = ptmalloc_dump("--help")
    expect(status.exitstatus).to eq(0)
    expect(out).to start_with("Usage: ptmalloc-dump").and include("--pid PID", "--track", "--version")
  end
end

# An arena whose lock a thread of the target holds is never walked. Oracle: the target's main thread
# blocked in malloc_stats(), which holds main_arena's mutex while it writes to a full stderr pipe
# (/proc/PID/wchan says where it sleeps).
RSpec.describe "ptmalloc-dump --pid and a held arena lock", :ptrace do
  include_context "with targets of spec/fixtures/outside"

  def start_lock_target
    stdin, stdout, stderr, thread = Open3.popen3(compile("lock_target"))
    stdin.close
    @target = thread
    expect(stdout.gets).to eq("locking main_arena\n")
    # the main thread sleeps in the pipe's write, inside malloc_stats
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.01 until File.read("/proc/#{thread.pid}/wchan").include?("pipe_write") ||
                     Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    expect(File.read("/proc/#{thread.pid}/wchan")).to include("pipe_write")
    [thread.pid, stdout, stderr]
  end

  it "reports the locked arena after retrying, and walks it once the lock is let go" do
    pid, stdout, stderr = start_lock_target
    path = File.join(tmpdir, "locked.dump")
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    expect { PtmallocDump.dump_process(pid, path) }
      .to raise_error(PtmallocDump::ArenaLockedError, /arena (0x\h+) of process #{pid} was locked each of the 50 times/)
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    puts "  gave up after #{waited.round(2)} s"
    expect(File).not_to exist(path)
    expect(File.read("/proc/#{pid}/stat")[/\) (\S)/, 1]).not_to match(/[tTZX]/)

    # the lock is let go while the tool retries: it walks the arena then, and says how many stops it took
    drain = Thread.new do
      sleep 0.3
      stderr.read
    end
    summary = PtmallocDump.dump_process(pid, path)
    expect(stdout.gets).to eq("released\n")
    dump = PtmallocDump.load(path)
    expect(dump.header[:source_info][:attempts]).to be > 1
    expect(summary[:arena]).to eq(dump.arenas.first.system_mem)
    expect(dump.anomalies).to eq([])
    puts "  walked after #{dump.header[:source_info][:attempts]} stops"
    drain.kill
  end
end

# A Ruby process that never required the gem. Oracle: glibc's malloc_stats() it printed itself (each
# arena's system and in-use bytes, and the total in use with mmapped chunks).
RSpec.describe "ptmalloc-dump --pid of a Ruby process without the gem", :ptrace do
  include_context "with targets of spec/fixtures/outside"

  it "reproduces every arena's figures and the mmapped bytes malloc_stats printed" do
    script = File.join(SpecHelpers::ROOT, "spec", "fixtures", "outside", "ruby_target.rb")
    stdin, _stdout, stderr, thread = Open3.popen3({ "RUBYOPT" => nil }, RbConfig.ruby, script)
    stdin.close
    @target = thread
    text = +""
    text << stderr.readpartial(65_536) until text.scan("max mmap bytes").size == 2
    last = text.split("Arena 0:").last
    arenas = last.scan(/system bytes\s+=\s+(\d+)\nin use bytes\s+=\s+(\d+)/).map { |pair| pair.map(&:to_i) }
    total_in_use = arenas.pop[1]
    expect(File.read("/proc/#{thread.pid}/maps")).not_to include("ptmalloc_dump")

    out = File.join(tmpdir, "ruby.dump")
    json, err, status = Open3.capture3("bundle", "exec", "exe/ptmalloc-dump", "--json", "--pid", thread.pid.to_s, out,
                                       chdir: SpecHelpers::ROOT)
    expect(status).to be_success, err
    dump = PtmallocDump.load(out)
    summary = dump.summary
    printed = JSON.parse(json)
    expect(printed.dig("summary", "arena")).to eq(summary[:arena])
    expect(printed.dig("header", "source")).to eq("pid")
    expect(summary[:arenas].map { |a| a.values_at(:arena, :uordblks) }).to eq(arenas)
    expect(summary[:hblkhd]).to eq(total_in_use - arenas.sum(&:last))
    expect(dump.header[:strings]["program"]).to eq(RbConfig.ruby)
    expect(dump.anomalies).to eq([])
    # its Ruby pages are not known from outside: the summary says so instead of a 0 B part
    text = PtmallocDump::TextSummary.new(dump).to_s
    expect(text).to match(/^  Ruby pages\s+not recorded \(no Ruby objects\): counted in other anonymous$/)
    expect(text).to match(/^ruby owners\s+none: the dump was taken from outside the process \(pid\)/)
    expect(File.read("/proc/#{thread.pid}/stat")[/\) (\S)/, 1]).not_to match(/[tTZX]/)
  end
end
