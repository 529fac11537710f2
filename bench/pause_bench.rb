# frozen_string_literal: true

# rake bench: the pause a worker sees, on two heaps, each in a process of its own:
#   - the bench heap of 1,000,000+ chunks (about 1.2 GiB, bench/ext/bench_heap.c);
#   - an application-shaped heap (spec/support/app_heap.rb): 3,000 classes of 10 methods each, with
#     their blocks, constants and caches, and 300,000 strings and hashes (about 830,000 objects).
# Modes: a bare fork(2) of the same process (the floor a snapshot cannot go below), the fork snapshot
# (the signal handler's default), the snapshot with ruby: false, and the in-process dump with and
# without the Ruby pass. The pause is the signal handler's own figure (from the signal's arrival to
# the handler's return), the bare fork's is taken the same way; median of 7 signals per mode.
# bench/rails_bench.rb measures the same in a real Rails app's worker under load.
require "benchmark"
require "fiddle"
require "fileutils"
require "tmpdir"
require "ptmalloc_dump"
require_relative "../spec/support/app_heap"

module PauseBench
  module_function

  SIGNALS = 7

  # mode => [signal, dump options]
  MODES = { fork: ["URG", { fork: true }], fork_no_ruby: ["USR1", { fork: true, ruby: false }],
            inproc: ["WINCH", { fork: false }], inproc_no_ruby: ["USR2", { fork: false, ruby: false }] }.freeze
  BARE_FORK_SIGNAL = "PWR"

  def run(chunks: Integer(ENV.fetch("BENCH_CHUNKS", 1_000_000)))
    results = {}
    results[:bench] = in_child { bench_heap(chunks) }
    results[:app] = in_child { app_heap }
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

  def app_heap
    dir = Dir.mktmpdir("ptmd-pause")
    keep = AppHeap.build(classes: 3_000, methods: 10, records: 150_000)
    GC.start
    result = measure("application-shaped heap (3,000 classes x 10 methods, 300,000 strings and hashes)", dir)
    keep.size
    result
  ensure
    FileUtils.rm_rf(dir) if dir
  end

  # A trap that forks and does nothing else (the child leaves at once through _exit), timed as the
  # dump handler times itself: from the signal's arrival to the trap's return. fork(2) is called with
  # the GVL held, as the snapshot calls it: a child forked without it would wait for ever for a GVL
  # that another thread, which the child does not have, took meanwhile.
  def install_bare_fork(log)
    libc = Fiddle::Handle::DEFAULT
    fork = Fiddle::Function.new(libc["fork"], [], Fiddle::TYPE_INT, need_gvl: true)
    leave = Fiddle::Function.new(libc["_exit"], [Fiddle::TYPE_INT], Fiddle::TYPE_VOID, need_gvl: true)
    signo = Signal.list.fetch(BARE_FORK_SIGNAL)
    Signal.trap(BARE_FORK_SIGNAL) do
      arrived = PtmallocDump._signal_arrived_ns(signo)
      pid = fork.call
      leave.call(0) if pid.zero?
      log.syswrite(format("bare fork: the worker paused %.1f ms\n", (Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - arrived) / 1e6))
      Process.detach(pid)
    end
    PtmallocDump._stamp_signal(signo)
  end

  def pauses(dir, r, w)
    install_bare_fork(w)
    MODES.each_value { |(sig, options)| PtmallocDump.install_signal_handler(sig, dir: dir, log: w, **options) }
    signals = MODES.transform_values(&:first).merge(bare_fork: BARE_FORK_SIGNAL)
    result = signals.transform_values { [] }
    SIGNALS.times do
      signals.each do |mode, sig|
        Process.kill(sig, Process.pid)
        line = r.gets
        result[mode] << Float(line[/paused ([\d.]+) ms/, 1])
        r.gets if MODES.dig(mode, 1, :fork) # the snapshot process's line: it is done
        Dir.children(dir).each { |f| File.delete(File.join(dir, f)) if f.end_with?(".dump") }
      end
    end
    result.transform_values { |v| v.sort[v.size / 2] }
  end

  def measure(name, dir)
    r, w = IO.pipe
    med = pauses(dir, r, w)
    s = PtmallocDump.stats(smaps: false)
    stats = [false, true].to_h do |smaps|
      t = Array.new(50) { Benchmark.realtime { PtmallocDump.stats(smaps: smaps) } }.sort
      [smaps, t[t.size / 2]]
    end
    puts format("%s: malloc heap %s, %d Ruby objects, RSS %d MiB", name,
                PtmallocDump::FormatHelpers.human_bytes(s[:malloc][:arena] + s[:malloc][:hblkhd]),
                s[:gc][:heap_live_slots], s[:rss][:vm_rss] >> 20)
    puts format("  %-52s %8.1f ms", "pause, bare fork(2) of this process", med[:bare_fork])
    puts format("  %-52s %8.1f ms  (%.2fx the bare fork)", "pause, fork snapshot (fork: true, the default)",
                med[:fork], med[:fork] / med[:bare_fork])
    puts format("  %-52s %8.1f ms  (%.2fx)", "pause, fork snapshot without Ruby (ruby: false)",
                med[:fork_no_ruby], med[:fork_no_ruby] / med[:bare_fork])
    puts format("  %-52s %8.1f ms  (%.2fx the same with ruby: false)", "pause, in-process dump (fork: false)",
                med[:inproc], med[:inproc] / med[:inproc_no_ruby])
    puts format("  %-52s %8.1f ms", "pause, in-process dump, ruby: false", med[:inproc_no_ruby])
    puts format("  %-52s %8.3f ms (smaps_rollup too: %.3f ms)", "PtmallocDump.stats(smaps: false), median of 50",
                stats[false] * 1000, stats[true] * 1000)
    med.merge(stats: stats[false], stats_smaps: stats[true], heap: s[:malloc][:arena] + s[:malloc][:hblkhd],
              objects: s[:gc][:heap_live_slots], rss: s[:rss][:vm_rss])
  end
end

PauseBench.run if $PROGRAM_NAME == __FILE__
