# frozen_string_literal: true

# rake bench: the dump of a heap of 1,000,000+ chunks against the floor (a bare walk that only sums
# chunk sizes over the same heap) and against glibc's malloc_info() to /dev/null, with each of the
# options that leave a part out or add one; file size; load and summary time. Prints medians of
# several runs. The heap's free lists hold about 330,000 chunks, more than oracles: :auto has glibc
# follow: the default dump leaves glibc's counters out there, and oracles: true shows their cost.
require "benchmark"
require "fiddle"
require "fileutils"
require "open3"
require "tmpdir"
require "ptmalloc_dump"

module DumpBench
  module_function

  def build_helper
    src = File.expand_path("ext/bench_heap.c", __dir__)
    out = File.join(Dir.tmpdir, "ptmd_bench_heap_#{Process.pid}.so")
    _o, e, s = Open3.capture3("cc", "-O2", "-shared", "-fPIC", "-o", out, src)
    abort("building the benchmark helper failed: #{e}") unless s.success?
    Fiddle.dlopen(out)
  ensure
    File.delete(out) if out && File.exist?(out) # loaded by now (or not built): the file is not needed
  end

  def median(times)
    times.sort[times.size / 2]
  end

  def measure(runs, &block)
    Array.new(runs) { Benchmark.realtime(&block) }.then { |t| median(t) }
  end

  def ms(seconds)
    format("%.1f ms", seconds * 1000)
  end

  def run(chunks: Integer(ENV.fetch("BENCH_CHUNKS", 1_000_000)), runs: 5)
    lib = build_helper
    build = Fiddle::Function.new(lib["bh_build"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T)
    release = Fiddle::Function.new(lib["bh_release"], [], Fiddle::TYPE_VOID)
    floor = Fiddle::Function.new(lib["bh_floor_walk"], [Fiddle::TYPE_UINTPTR_T, Fiddle::TYPE_UINTPTR_T, Fiddle::TYPE_VOIDP], Fiddle::TYPE_SIZE_T)
    minfo = Fiddle::Function.new(lib["bh_malloc_info_devnull"], [], Fiddle::TYPE_INT)

    GC.disable
    build.call(chunks, 42)
    dir = Dir.mktmpdir("ptmd-bench")
    path = File.join(dir, "bench.dump")
    PtmallocDump.dump(path)
    dump = PtmallocDump.load(path)
    heaps = dump.heaps.reject { |h| h.kind == :mmapped_chunk }
    # the floor starts where the walk's first chunk does (after heap_info and the arena struct)
    starts = heaps.map { |h| (c = dump.chunk_at(h.start)).state == :meta ? c.end_address : c.address }
    GC.start
    sum = "\0" * 8
    floor_chunks = 0

    t_dump = measure(runs) { PtmallocDump.dump(path) }
    default_dump = PtmallocDump.load(path)
    t_norefs = measure(runs) { PtmallocDump.dump(path, references: false) }
    t_nooracles = measure(runs) { PtmallocDump.dump(path, oracles: false) }
    t_oracles = measure(runs) { PtmallocDump.dump(path, oracles: true) }
    t_floor = measure(runs) do
      floor_chunks = heaps.zip(starts).sum { |h, s| floor.call(s, h.end, Fiddle::Pointer[sum]) }
    end
    t_minfo = measure(runs) { minfo.call }
    t_load = measure(runs) { PtmallocDump.load(path).summary }
    dump = PtmallocDump.load(path)
    size = File.size(path)

    puts "heap: #{dump.chunk_count} chunks in #{dump.arenas.size} arena(s) (floor walk saw #{floor_chunks}), " \
         "#{PtmallocDump::FormatHelpers.human_bytes(dump.summary[:arena])}"
    puts format("%-34s %12s %10s", "", "median", "ratio")
    puts format("%-34s %12s %10s", "floor: bare walk summing sizes", ms(t_floor), "1.0x")
    puts format("%-34s %12s %9.1fx", "glibc malloc_info() to /dev/null", ms(t_minfo), t_minfo / t_floor)
    puts format("%-34s %12s %9.1fx   (glibc's counters %s)", "PtmallocDump.dump (default)", ms(t_dump), t_dump / t_floor,
                default_dump.header[:oracles_captured] ? "called" : "left out: #{PtmallocDump::Verification.list_entries(default_dump)} chunks on the lists")
    puts format("%-34s %12s %9.1fx", "  references: false", ms(t_norefs), t_norefs / t_floor)
    puts format("%-34s %12s %9.1fx", "  oracles: true", ms(t_oracles), t_oracles / t_floor)
    puts format("%-34s %12s %9.1fx", "  oracles: false", ms(t_nooracles), t_nooracles / t_floor)
    if default_dump.ruby
      puts format("%-34s %12s", "  of which the reference scan", ms(default_dump.ruby.meta[:refs_ns] / 1e9))
    end
    puts format("%-34s %12s", "  of which the walk (in the file)", ms(dump.header[:walk_ns] / 1e9))
    puts format("%-34s %12s", "load + summary", ms(t_load))
    puts format("%-34s %12s (%.1f bytes/chunk)", "file size", PtmallocDump::FormatHelpers.human_bytes(size), size.to_f / dump.chunk_count)
    { dump: t_dump, no_references: t_norefs, oracles: t_oracles, no_oracles: t_nooracles, floor: t_floor, malloc_info: t_minfo, load: t_load, size: size, chunks: dump.chunk_count }
  ensure
    release&.call
    FileUtils.rm_rf(dir) if dir
    GC.enable
  end
end

DumpBench.run if $PROGRAM_NAME == __FILE__
