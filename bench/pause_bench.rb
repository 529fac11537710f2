# frozen_string_literal: true

# rake bench: the pause a worker sees: an in-process dump against a fork snapshot (fork: true, which
# pauses only for the Ruby pass and the fork), on the bench heap of 1,000,000+ chunks (about 1.2 GiB)
# and on a Rails-sized heap (about 300 MiB, 100,000 Ruby objects). The pause is the signal handler's
# own figure: from the signal's arrival to the handler's return, median of 5 signals per mode, each
# heap in its own process. The default options record references and roots; references: false is
# measured too.
require "benchmark"
require "fiddle"
require "fileutils"
require "open3"
require "tmpdir"
require "ptmalloc_dump"

module PauseBench
  module_function

  # mode => [signal, dump options]
  MODES = { fork: ["URG", { fork: true }], fork_no_ruby: ["USR1", { fork: true, ruby: false }],
            inproc: ["WINCH", { fork: false }], inproc_no_refs: ["USR2", { fork: false, references: false }] }.freeze

  def run(chunks: Integer(ENV.fetch("BENCH_CHUNKS", 1_000_000)))
    results = {}
    results[:bench] = in_child { bench_heap(chunks) }
    results[:rails] = in_child { rails_heap }
    results
  end

  # Runs the block in a forked child (a heap of its own), printing there, and returns its result.
  def in_child
    r, w = IO.pipe
    pid = fork do
      r.close
      w.write(Marshal.dump(yield))
      $stdout.flush
      exit!(0)
    end
    w.close
    result = Marshal.load(r.read) # rubocop:disable Security/MarshalLoad -- our own child
    Process.wait(pid)
    result
  end

  def bench_heap(chunks)
    dir = Dir.mktmpdir("ptmd-pause")
    so = File.join(dir, "bench_heap.so")
    system("cc", "-O2", "-shared", "-fPIC", "-o", so, File.expand_path("ext/bench_heap.c", __dir__), exception: true)
    lib = Fiddle.dlopen(so)
    Fiddle::Function.new(lib["bh_build"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T).call(chunks, 42)
    measure("bench heap", dir)
  ensure
    FileUtils.rm_rf(dir) if dir
  end

  # About what a Rails worker holds after boot: 100,000 Ruby objects (strings of 1-5 KiB, arrays,
  # hashes) over some 300 MiB.
  def rails_heap
    dir = Dir.mktmpdir("ptmd-pause")
    keep = Array.new(100_000) do |i|
      case i % 5
      when 0, 1, 2 then "s" * (1024 + (i * 7919) % 4096)
      when 3 then Array.new(100) { |j| j }
      else (0...12).to_h { |j| ["key#{j}", j] }
      end
    end
    blob = Array.new(1500) { "b" * 100_000 } # caches, templates, buffers
    result = measure("Rails-sized heap", dir)
    keep.size + blob.size
    result
  ensure
    FileUtils.rm_rf(dir) if dir
  end

  def measure(name, dir)
    r, w = IO.pipe
    pauses = MODES.transform_values { [] }
    MODES.each do |mode, (sig, options)|
      PtmallocDump.install_signal_handler(sig, dir: dir, log: w, **options)
      5.times do
        Process.kill(sig, Process.pid)
        line = r.gets
        pauses[mode] << Float(line[/the worker paused ([\d.]+) ms/, 1])
        r.gets if options[:fork] # the snapshot process's line: it is done
        Dir.children(dir).each { |f| File.delete(File.join(dir, f)) if f.end_with?(".dump") }
      end
    end
    s = PtmallocDump.stats(smaps: false)
    stats = [false, true].to_h do |smaps|
      t = Array.new(50) { Benchmark.realtime { PtmallocDump.stats(smaps: smaps) } }.sort
      [smaps, t[t.size / 2]]
    end
    med = pauses.transform_values { |v| v.sort[v.size / 2] }
    puts format("%s: malloc heap %s, %d Ruby objects, RSS %d MiB", name,
                PtmallocDump::FormatHelpers.human_bytes(s[:malloc][:arena] + s[:malloc][:hblkhd]),
                s[:gc][:heap_live_slots], s[:rss][:vm_rss] >> 20)
    puts format("  %-48s %8.1f ms", "pause, in-process dump (fork: false)", med[:inproc])
    puts format("  %-48s %8.1f ms", "pause, in-process dump, references: false", med[:inproc_no_refs])
    puts format("  %-48s %8.1f ms  (%.1f%% of the in-process pause)", "pause, fork snapshot (fork: true, default)",
                med[:fork], 100.0 * med[:fork] / med[:inproc])
    puts format("  %-48s %8.1f ms  (%.1f%%)", "pause, fork snapshot without Ruby (ruby: false)",
                med[:fork_no_ruby], 100.0 * med[:fork_no_ruby] / med[:inproc])
    puts format("  %-48s %8.3f ms (smaps_rollup too: %.3f ms)", "PtmallocDump.stats(smaps: false), median of 50",
                stats[false] * 1000, stats[true] * 1000)
    med.merge(stats: stats[false], stats_smaps: stats[true], heap: s[:malloc][:arena] + s[:malloc][:hblkhd], objects: s[:gc][:heap_live_slots],
      rss: s[:rss][:vm_rss])
  end
end

PauseBench.run if $PROGRAM_NAME == __FILE__
