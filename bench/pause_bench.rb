# frozen_string_literal: true

# rake bench: the pause a worker sees: an in-process dump against a fork snapshot (fork: true, which
# pauses only for the Ruby pass and the fork), on a heap of 1,000,000+ chunks (about 1.2 GiB).
require "benchmark"
require "fiddle"
require "fileutils"
require "open3"
require "tmpdir"
require "ptmalloc_dump"

module PauseBench
  module_function

  def run(chunks: Integer(ENV.fetch("BENCH_CHUNKS", 1_000_000)))
    dir = Dir.mktmpdir("ptmd-pause")
    so = File.join(dir, "bench_heap.so")
    system("cc", "-O2", "-shared", "-fPIC", "-o", so, File.expand_path("ext/bench_heap.c", __dir__), exception: true)
    lib = Fiddle.dlopen(so)
    Fiddle::Function.new(lib["bh_build"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T).call(chunks, 42)
    path = File.join(dir, "p.dump")
    inproc = Array.new(3) { Benchmark.realtime { PtmallocDump.dump(path) } }.min
    d = PtmallocDump.load(path)
    forks = Array.new(3) do
      pid = nil
      t = Benchmark.realtime { pid = PtmallocDump.dump(path, fork: true) }
      Process.wait(pid)
      t
    end
    fork_pause = forks.min
    rss = File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i
    puts format("heap: %d chunks, %s malloc heap, RSS %d MiB", d.chunk_count,
                PtmallocDump::FormatHelpers.human_bytes(d.summary[:arena]), rss / 1024)
    puts format("%-40s %8.1f ms", "pause, in-process dump", inproc * 1000)
    puts format("%-40s %8.1f ms  (%.1f%% of the in-process pause)", "pause, fork snapshot (fork: true)",
                fork_pause * 1000, 100.0 * fork_pause / inproc)
    { inproc: inproc, fork: fork_pause }
  ensure
    FileUtils.rm_rf(dir) if dir
  end
end

PauseBench.run if $PROGRAM_NAME == __FILE__
