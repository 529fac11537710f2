# frozen_string_literal: true

# rake bench: the pause a worker sees: an in-process dump against a fork snapshot (fork: true, which
# pauses only for the Ruby pass and the fork), on a heap of 1,000,000+ chunks (about 1.2 GiB), and on
# a Rails-sized one (about 300 MiB of malloc heap and 100,000 live Ruby objects); both with the
# default options (references and roots on) and with references: false.
require "benchmark"
require "fiddle"
require "fileutils"
require "open3"
require "tmpdir"
require "ptmalloc_dump"

module PauseBench
  module_function

  def pauses(path, **options)
    inproc = Array.new(3) { Benchmark.realtime { PtmallocDump.dump(path, **options) } }.min
    forks = Array.new(3) do
      pid = nil
      t = Benchmark.realtime { pid = PtmallocDump.dump(path, fork: true, **options) }
      Process.wait(pid)
      t
    end
    [inproc, forks.min]
  end

  def report(label, path)
    PtmallocDump.dump(path)
    d = PtmallocDump.load(path)
    rss = File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i
    puts format("%s: %d chunks, %s malloc heap, %d live Ruby objects, RSS %d MiB", label, d.chunk_count,
                PtmallocDump::FormatHelpers.human_bytes(d.summary[:arena]), d.ruby ? d.ruby.meta[:object_count] : 0,
                rss / 1024)
    [[{}, "default"], [{ references: false }, "references: false"]].each do |options, name|
      inproc, fork_pause = pauses(path, **options)
      puts format("  %-44s %8.1f ms", "pause, in-process dump (#{name})", inproc * 1000)
      puts format("  %-44s %8.1f ms  (%.1f%% of the in-process pause)", "pause, fork snapshot (#{name})",
                  fork_pause * 1000, 100.0 * fork_pause / inproc)
    end
  end

  def run(chunks: Integer(ENV.fetch("BENCH_CHUNKS", 1_000_000)), rails_chunks: 250_000, rails_objects: 100_000)
    dir = Dir.mktmpdir("ptmd-pause")
    so = File.join(dir, "bench_heap.so")
    system("cc", "-O2", "-shared", "-fPIC", "-o", so, File.expand_path("ext/bench_heap.c", __dir__), exception: true)
    lib = Fiddle.dlopen(so)
    build = Fiddle::Function.new(lib["bh_build"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T)
    release = Fiddle::Function.new(lib["bh_release"], [], Fiddle::TYPE_VOID)
    path = File.join(dir, "p.dump")
    build.call(chunks, 42)
    report("1M-chunk heap", path)
    release.call
    build.call(rails_chunks, 42)
    keep = Array.new(rails_objects) do |i|
      case i % 4
      when 0 then "string #{i} " * 4
      when 1 then Array.new(20, i)
      when 2 then { a: i, b: i.to_s }
      else Object.new.tap { |o| o.instance_variable_set(:@x, i) }
      end
    end
    GC.start
    report("Rails-sized heap", path)
    keep.size
  ensure
    release&.call
    FileUtils.rm_rf(dir) if dir
  end
end

PauseBench.run if $PROGRAM_NAME == __FILE__
