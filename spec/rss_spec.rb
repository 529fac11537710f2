# frozen_string_literal: true

require "json"
require "stringio"
require "zlib"
require "ptmalloc_dump/visualize_cli"
require "spec_helper"

RSpec.describe "the whole RSS, accounted" do
  # A process with every kind of memory: malloc'd strings, an mmapped chunk, Ruby's pages, threads
  # and a fiber, and a file mapped with mmap whose first pages are read. It dumps itself (in process
  # or as a fork snapshot), reading its VmRSS from /proc just before and just after, and the mapped
  # file's Rss from smaps after; prints the figures as JSON.
  def run_workload(dump_opts)
    data = File.join(tmpdir, "mapped.bin")
    File.binwrite(data, Random.new(1).bytes(8 << 20))
    path = File.join(tmpdir, "rss.dump")
    code = <<~RUBY
      require "fiddle"
      require "json"
      libc = Fiddle::Handle::DEFAULT
      mmap = Fiddle::Function.new(libc["mmap"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT,
                                                 Fiddle::TYPE_INT, Fiddle::TYPE_INT, Fiddle::TYPE_LONG], Fiddle::TYPE_VOIDP)
      file = File.open(#{data.dump})
      map = mmap.call(nil, 8 << 20, 1, 2, file.fileno, 0) # PROT_READ, MAP_PRIVATE
      sum = 0
      (0...768).each { |i| sum += map[i * 4096] } # the first 3 MiB resident
      keep = Array.new(30_000) { |i| "s" * (50 + i % 500) }
      big = "b" * (6 << 20) # an mmapped chunk
      ready = Queue.new
      threads = Array.new(4) { Thread.new { ready << 1; sleep } }
      4.times { ready.pop }
      fiber = Fiber.new { Fiber.yield 1 }
      fiber.resume
      vm_rss = -> { File.read("/proc/self/status")[/^VmRSS:\\s+(\\d+) kB/, 1].to_i * 1024 }
      before = vm_rss.call
      PtmallocDump.dump(#{path.dump}, **#{dump_opts.inspect})
      after = vm_rss.call
      file_rss = File.read("/proc/self/smaps").split(/^(?=\\h+-\\h+ )/).select { |m| m.lines.first.include?(#{data.dump}) }
                     .sum { |m| m[/^Rss:\\s+(\\d+) kB/, 1].to_i * 1024 }
      dump = PtmallocDump.load(#{path.dump})
      rss = dump.summary[:rss]
      puts JSON.generate(rss: rss, before: before, after: after, file_rss: file_rss, info: dump.mappings_info,
                         ruby_pages: dump.ruby.pages.size, page_size: GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE],
                         page_slots: GC::INTERNAL_CONSTANTS.values_at(:HEAP_PAGE_OBJ_LIMIT, :RVALUE_SIZE).map(&:to_i).inject(:*),
                         big: big.bytesize, keep: keep.size, sum: sum)
      threads.each(&:kill)
    RUBY
    out, err, status = run_ruby(code)
    expect(status).to be_success, err
    [JSON.parse(out, symbolize_names: true), data]
  end

  def expect_accounted(result, data)
    rss = result[:rss]
    parts = %i[malloc_in_use malloc_free_resident malloc_metadata mmapped_chunks ruby_pages stacks file_backed
               other_anonymous allocation_tracking dump_scratch]
    puts format("    RSS %d = %s; VmRSS %d (before %d, after %d); smaps read in %.2f ms", rss[:total],
                parts.map { |p| "#{p} #{rss[p]}" }.join(", "), rss[:vm_rss], result[:before], result[:after],
                result[:info][:read_ns] / 1e6)
    expect(rss[:total]).to eq(parts.sum { |p| rss[p] })
    # the kernel's VmRSS, read by the dump right after smaps, is this process's RSS around the dump
    # plus the dump's own scratch memory while it runs (chunk records, the reference scan's tables)
    expect(rss[:vm_rss]).to be_between([result[:before], result[:after]].min * 0.95, [result[:before], result[:after]].max * 1.25)
    # (and the error the dump records when its reads of smaps and VmRSS did not agree)
    expect((rss[:total] - rss[:vm_rss]).abs).to be <= rss[:vm_rss] / 100 + rss[:error].to_i
    # the mapped file under its path, with the resident bytes smaps gives it
    mapped = rss[:files].find { |f| f[:path] == data }
    expect(mapped).not_to be_nil
    expect(mapped[:bytes]).to eq(result[:file_rss])
    expect(mapped[:bytes]).to be >= 3 << 20
    expect(rss[:files].map { |f| f[:bytes] }).to eq(rss[:files].map { |f| f[:bytes] }.sort.reverse)
    if result[:page_size]
      # Ruby's pages (mapped by the GC itself from Ruby 3.1): every recorded page's body
      # (HEAP_PAGE_SIZE bytes) resident
      expect(rss[:ruby_pages]).to eq(result[:ruby_pages] * result[:page_size])
      expect(rss[:malloc_in_use]).to be >= result[:keep] * 50
    else
      # Ruby 2.7 and 3.0 (no HEAP_PAGE_SIZE): the GC's pages are malloc chunks, in use
      expect(rss[:ruby_pages]).to eq(0)
      expect(rss[:malloc_in_use]).to be >= result[:keep] * 50 + result[:ruby_pages] * result[:page_slots]
    end
    expect(rss[:mmapped_chunks]).to be >= result[:big]
    expect(rss[:stacks]).to be > 0
  end

  it "sorts every resident byte into one part, adding up to VmRSS within 1%, in process" do
    result, data = run_workload({})
    expect(result[:info][:from_parent]).to be(false)
    expect_accounted(result, data)
    # the dump's own scratch, a part of its own: what the process's RSS grew by from before the dump
    # to the dump's reading of VmRSS (the buffers are unmapped again when the dump ends) is mostly it
    rss = result[:rss]
    grown = rss[:vm_rss] - result[:before]
    puts "    dump scratch #{rss[:dump_scratch]}, VmRSS grew #{grown} from before the dump to its reading"
    expect(rss[:dump_scratch]).to be > 0
    expect(rss[:dump_scratch]).to be <= grown + (1 << 20)
    expect(rss[:dump_scratch]).to be >= grown / 2
  end

  # The snapshot describes the process it was forked from: the child's own smaps would miss the file
  # pages fork does not copy into the child's page tables (the mapped file would show next to nothing)
  # and count the child's own; the parent reads its mappings and VmRSS just before the fork.
  it "accounts for the parent's RSS at the fork in a fork snapshot" do
    result, data = run_workload({ fork: true, wait: true })
    expect(result[:info][:from_parent]).to be(true)
    expect_accounted(result, data)
    expect(result[:rss][:dump_scratch]).to eq(0) # the snapshot process's own memory is not the parent's
  end

  it "counts a heap that spans several mappings once (a thread's heap grown in a forked child)" do
    path = File.join(tmpdir, "spans.dump")
    out, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      require "json"
      require "rspec"
      require #{File.join(__dir__, 'support', 'helpers').dump}
      require #{File.join(__dir__, 'support', 'native_threads').dump}
      NativeThreads.start(0)
      NativeThreads.malloc_many(0, 200, 4000) # a thread's arena, its heap begun here
      NativeThreads.stop(0)
      r, w = IO.pipe
      pid = fork do
        r.close
        # the child's inherited mappings do not merge with ones made after the fork (their anon_vma
        # chains differ): the arena's heap, taken by a new thread and grown here, spans two mappings
        NativeThreads.start(1)
        NativeThreads.malloc_many(1, 3000, 4000)
        PtmallocDump.dump(#{path.dump})
        maps = File.read("/proc/self/maps").lines.map { |l| l.split(" ", 2).first.split("-").map { |x| x.to_i(16) } }
        d = PtmallocDump.load(#{path.dump})
        spans = d.heaps.reject { |h| h.kind == :mmapped_chunk }.map { |h| maps.count { |a, b| a < h.end && b > h.start } }
        w.write(JSON.generate(rss: d.summary[:rss].reject { |k, _| k == :files }, spans: spans))
        w.close
        exit!(0)
      end
      w.close
      puts r.read
      Process.wait(pid)
      exit(1) unless $?.success?
    RUBY
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    expect(r[:spans].max).to be >= 2 # the shape this example is about
    rss = r[:rss]
    puts format("    heaps over %s mappings: RSS %d, VmRSS %d, other anonymous %d", r[:spans].inspect, rss[:total],
                rss[:vm_rss], rss[:other_anonymous])
    expect((rss[:total] - rss[:vm_rss]).abs).to be <= rss[:vm_rss] / 100
  end

  # A worker under load: while the snapshot child reads the parent's smaps mapping by mapping, another
  # thread of the parent keeps faulting in new pages of a mapped file and dropping them again, so that
  # its RSS moves by tens of MiB during the read. The thread scans the file with memchr, through Fiddle,
  # which calls it without the GVL: it runs on while the dumping thread holds the GVL.
  it "a fork snapshot's RSS parts sum to VmRSS within the recorded error while another thread touches new " \
     "file pages" do
    data = File.join(tmpdir, "busy.bin")
    File.open(data, "wb") { |f| f.truncate(128 << 20) } # a hole: its pages are read as zeros
    path = File.join(tmpdir, "busy.dump")
    out, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      require "json"
      libc = Fiddle::Handle::DEFAULT
      mmap = Fiddle::Function.new(libc["mmap"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT,
                                                 Fiddle::TYPE_INT, Fiddle::TYPE_INT, Fiddle::TYPE_LONG], Fiddle::TYPE_VOIDP)
      madvise = Fiddle::Function.new(libc["madvise"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT],
                                     Fiddle::TYPE_INT)
      memchr = Fiddle::Function.new(libc["memchr"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_INT, Fiddle::TYPE_SIZE_T],
                                    Fiddle::TYPE_VOIDP)
      size = 128 << 20
      file = File.open(#{data.dump})
      map = mmap.call(nil, size, 1, 2, file.fileno, 0) # PROT_READ, MAP_PRIVATE
      keep = Array.new(30_000) { |i| "s" * (50 + i % 500) }
      stop = false
      rounds = 0
      touched = Queue.new
      toucher = Thread.new do
        until stop
          memchr.call(map, 1, size) # reads every page: none holds a 1
          touched << 1 if rounds.zero?
          rounds += 1
          madvise.call(map, size, 4) # MADV_DONTNEED: the pages leave the RSS, to be faulted in again
        end
      end
      touched.pop
      PtmallocDump.dump(#{path.dump}, fork: true, wait: true)
      stop = true
      toucher.join
      dump = PtmallocDump.load(#{path.dump})
      puts JSON.generate(rss: dump.summary[:rss].reject { |k, _| k == :files }, info: dump.mappings_info,
                         rounds: rounds, keep: keep.size)
    RUBY
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    rss = r[:rss]
    info = r[:info]
    puts format("    RSS %d, VmRSS %d, apart %d; recorded error %d (approximate: %s); smaps read in %.1f ms; " \
                "%d rounds of 128 MiB touched", rss[:total], rss[:vm_rss], rss[:total] - rss[:vm_rss], info[:error],
                info[:approximate], info[:read_ns] / 1e6, r[:rounds])
    expect(info[:from_parent]).to be(true)
    expect(r[:rounds]).to be >= 1
    # Dump#rss carries the recorded error when the reads did not agree, and at least that much
    expect(rss[:error]).to be >= info[:error] if info[:approximate]
    # the parts against VmRSS: within Dump#rss's error, which adds to the recorded one the heap pages
    # the child's pagemap had at the fork and the parent had given back when its smaps was read
    expect((rss[:total] - rss[:vm_rss]).abs).to be <= (rss[:error] || 0) + (info[:approximate] ? 0 : info[:error])
  end

  # A dump whose mappings head says the reads disagreed: the figure carries its error wherever it shows.
  it "shows an approximate RSS with its error in --summary and the report" do
    path = File.join(tmpdir, "exact.dump")
    PtmallocDump.dump(path, ruby: false)
    bytes = File.binread(path)
    _, _, payload, = FieldSweep.sections(bytes).find { |type, *| type == 18 }
    head = FieldSweep::HEADS[18][1]
    flags_at = payload + head.take_while { |f, _| f != "flags" }.sum { |_, d| FieldSweep::SIZES[d] }
    flags = bytes.byteslice(flags_at, 4).unpack1("L<")
    # exact here; under qemu-user /proc's RSS figures are the emulator's, which the guest's mappings do
    # not add up to, and the dump says so already
    expect(flags & 2).to eq(0) unless SpecHelpers.qemu_user?
    bytes[flags_at, 8] = [flags | 2, 7_000].pack("L<L<") # approximate, 7,000 KiB
    bytes[bytes.bytesize - 8, 4] = [Zlib.crc32(bytes.byteslice(0, bytes.bytesize - 56))].pack("L<")
    approx = File.join(tmpdir, "approx.dump")
    File.binwrite(approx, bytes)

    d = PtmallocDump.load(approx)
    expect(d.mappings_info).to include(approximate: true, error: 7_000 * 1024)
    # the exact dump's own error, if any, is the heap pages residency saw present and smaps did not count
    # (the zero page, mapped where untouched memory was read, is one: pagemap has it, smaps' Rss not)
    exact_dump = PtmallocDump.load(path)
    exact = exact_dump.rss
    recorded = exact_dump.mappings_info[:approximate] ? exact_dump.mappings_info[:error] : 0 # under qemu-user
    overshoot = exact[:error].to_i - recorded
    expect(overshoot).to be_between(0, exact[:vm_rss] / 100)
    expect(d.rss[:error]).to eq(7_000 * 1024 + overshoot)
    shown = Regexp.escape(PtmallocDump::FormatHelpers.human_bytes(d.rss[:error]))
    out = StringIO.new
    expect(PtmallocDump::VisualizeCLI.new(["--summary", approx], out: out, err: StringIO.new).run).to eq(0)
    expect(out.string).to match(/^rss +\S+ \S+ ± #{shown} \(\d+ B\), VmRSS /)
    expect(out.string).to match(/approximate: the process's memory moved while the dump read its smaps and page residency, by up to #{shown}$/)
    outdir = File.join(tmpdir, "report")
    expect(PtmallocDump::VisualizeCLI.new([approx, outdir], out: StringIO.new, err: StringIO.new).run).to eq(0)
    html = File.read(File.join(outdir, "index.html"))
    expect(html).to match(%r{RSS <b>\S+ \S+ ± #{shown}</b>})
  end
end
