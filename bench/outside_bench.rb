# frozen_string_literal: true

# rake bench: a dump from outside against the in-process dump of the same heap. A child process builds
# the bench heap (1,000,000+ chunks, about 1.2 GiB) and dumps itself on request (PtmallocDump.dump,
# the pause it would see with the gem inside); this process dumps it with PtmallocDump.dump_process,
# whose pause is the copy (the child is stopped only for it), and from a gcore of it with dump_core.
# The goal: the pause of the outside dump within 1.5x of the in-process dump's. chap, when installed,
# reads the same core for comparison. Medians of several runs.
require "fileutils"
require "open3"
require "rbconfig"
require "tmpdir"
require "ptmalloc_dump"

module OutsideBench
  module_function

  CHILD = <<~RUBY
    require "fiddle"
    require "ptmalloc_dump"
    lib = Fiddle.dlopen(ARGV[0])
    Fiddle::Function.new(lib["bh_build"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T).call(Integer(ARGV[1]), 42)
    GC.disable
    $stdout.sync = true
    puts "ready"
    while (line = $stdin.gets)
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      PtmallocDump.dump(line.strip, ruby: false, references: false)
      puts Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
    end
  RUBY

  def median(values)
    values.sort[values.size / 2]
  end

  def ms(seconds)
    format("%.1f ms", seconds * 1000)
  end

  def run(chunks: Integer(ENV.fetch("BENCH_CHUNKS", 1_000_000)), runs: 5)
    dir = Dir.mktmpdir("ptmd-outside-bench")
    helper = File.join(dir, "bench_heap.so")
    _o, e, s = Open3.capture3("cc", "-O2", "-shared", "-fPIC", "-o", helper, File.expand_path("ext/bench_heap.c", __dir__))
    abort("building the benchmark helper failed: #{e}") unless s.success?
    stdin, stdout, wait = Open3.popen2(RbConfig.ruby, "-I", File.expand_path("../lib", __dir__), "-e", CHILD, helper, chunks.to_s)
    abort("the heap child failed") unless stdout.gets == "ready\n"
    pid = wait.pid
    path = File.join(dir, "bench.dump")
    inside = Array.new(runs) do
      stdin.puts(path)
      Float(stdout.gets)
    end
    walks = []
    copies = []
    pauses = Array.new(runs) do
      summary = PtmallocDump.dump_process(pid, path)
      walks << summary[:walk_ns] / 1e9
      copies << summary[:copied_bytes]
      summary[:pause_ns] / 1e9
    end
    total = Array.new(runs) do
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      PtmallocDump.dump_process(pid, path)
      Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
    end
    dump = PtmallocDump.load(path)
    puts "heap: #{dump.chunk_count} chunks in #{dump.arenas.size} arena(s), " \
         "#{PtmallocDump::FormatHelpers.human_bytes(dump.summary[:arena])}; " \
         "#{PtmallocDump::FormatHelpers.human_bytes(median(copies))} copied"
    puts format("%-46s %12s %10s", "", "median", "ratio")
    puts format("%-46s %12s %10s", "in-process PtmallocDump.dump (its pause)", ms(median(inside)), "1.0x")
    puts format("%-46s %12s %9.2fx", "dump_process: the target stopped (the copy)", ms(median(pauses)),
                median(pauses) / median(inside))
    puts format("%-46s %12s", "  the walk on the copy, target running", ms(median(walks)))
    puts format("%-46s %12s", "  the whole dump_process", ms(median(total)))
    core_bench(pid, dir, runs)
    { inside: median(inside), pause: median(pauses), total: median(total) }
  ensure
    if wait
      stdin.close
      Process.kill(:KILL, wait.pid)
      wait.value
    end
    FileUtils.rm_rf(dir) if dir
  end

  def core_bench(pid, dir, runs)
    prefix = File.join(dir, "core")
    _o, err, status = Open3.capture3("gcore", "-o", prefix, pid.to_s)
    unless status.success?
      return puts("gcore: not available (#{err.lines.first&.strip || 'install gdb'}): no core figures")
    end

    core = "#{prefix}.#{pid}"
    times = Array.new(runs) do
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      PtmallocDump.dump_core(core, File.join(dir, "core.dump"))
      Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
    end
    puts format("%-46s %12s", "dump_core of a gcore (#{PtmallocDump::FormatHelpers.human_bytes(File.size(core))})", ms(median(times)))
    chap = ENV.fetch("PATH", "").split(":").map { |d| File.join(d, "chap") }.find { |f| File.executable?(f) }
    return puts("chap: not installed, no comparison") unless chap

    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Open3.capture3(chap, core, stdin_data: "count allocations\n")
    puts format("%-46s %12s", "chap: count allocations on the same core", ms(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t))
  end
end

OutsideBench.run if $PROGRAM_NAME == __FILE__
