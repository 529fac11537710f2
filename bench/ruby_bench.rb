# frozen_string_literal: true

# rake bench: the Ruby pass (ObjectSpace pages and live objects, recorded inside the dump's pause)
# for ~1,000,000 live objects, the load-time attribution of chunks to objects, and the cost of the
# references and roots (on by default) against references: false.
require "benchmark"
require "fileutils"
require "open3"
require "tmpdir"
require "ptmalloc_dump"

module RubyBench
  module_function

  def ms(s)
    format("%.0f ms", s * 1000)
  end

  # The first RubyHeap#summary of a freshly loaded dump: attribution and the owner summary (best of 3).
  def attribution_time(path)
    Array.new(3) do
      dump = PtmallocDump.load(path)
      Benchmark.realtime { dump.ruby.summary }
    end.min
  end

  # The object graph (graph: true): its capture as a share of the in-process pause, the fork
  # snapshot's pause with and without it (the graph is taken in the child), the file's bytes per
  # object, and the dominator tree at load (time and the process's peak RSS growth, in a child).
  def graph_figures(dir, t_default, default_path)
    graph = File.join(dir, "graph.dump")
    t_graph = Array.new(3) { Benchmark.realtime { PtmallocDump.dump(graph, graph: true) } }.min
    d = PtmallocDump.load(graph)
    capture = d.graph_meta[:graph_ns] / 1e9
    n = d.ruby.meta[:object_count]
    puts format("%-44s %10s vs %s default: the graph's capture %s, %.0f%% of the pause (%d references)",
                "in-process dump with graph: true", ms(t_graph), ms(t_default), ms(capture), 100 * capture / t_graph,
                d.graph_meta[:edges])
    pauses = [false, true].to_h do |g|
      [g, Array.new(3) do
        PtmallocDump.dump(graph, fork: true, wait: true, graph: g)
        PtmallocDump.load(graph).header[:snapshot][:pause_ns]
      end.min / 1e9]
    end
    puts format("%-44s %10s with, %s without", "fork snapshot pause, graph in the child", ms(pauses[true]), ms(pauses[false]))
    extra = File.size(graph) - File.size(default_path)
    puts format("%-44s %10s  (%.1f bytes per object)", "file bytes the graph adds",
                PtmallocDump::FormatHelpers.human_bytes(extra), extra.to_f / n)
    script = "d = PtmallocDump.load(#{graph.dump}); d.ruby.summary; base = File.read('/proc/self/status')[/VmHWM:\\s+(\\d+)/, 1].to_i; " \
             "t = Process.clock_gettime(Process::CLOCK_MONOTONIC); d.retainers; " \
             "t = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t; " \
             "puts [t, File.read('/proc/self/status')[/VmHWM:\\s+(\\d+)/, 1].to_i - base].join(' ')"
    out, = Open3.capture2(RbConfig.ruby, "-I", File.expand_path("../lib", __dir__), "-rptmalloc_dump", "-e", script)
    t_dom, kib = out.split.map(&:to_f)
    puts format("%-44s %10s  (peak RSS +%.0f MiB, %d objects)", "dominator tree and holders at load", ms(t_dom),
                kib / 1024, n)
  end

  def run(objects: Integer(ENV.fetch("BENCH_OBJECTS", 1_000_000)))
    keep = Array.new(objects * 3 / 4) do |i|
      case i % 4
      when 0 then "string #{i} " * 4
      when 1 then Array.new(20, i)
      when 2 then { a: i, b: i.to_s }
      else Object.new.tap { |o| o.instance_variable_set(:@x, i) }
      end
    end
    GC.start
    live = GC.stat(:heap_live_slots)
    dir = Dir.mktmpdir("ptmd-ruby-bench")
    plain = File.join(dir, "plain.dump")
    ruby = File.join(dir, "ruby.dump")
    refs = File.join(dir, "refs.dump")
    t_plain = Array.new(3) { Benchmark.realtime { PtmallocDump.dump(plain, ruby: false, references: false) } }.min
    t_ruby = Array.new(3) { Benchmark.realtime { PtmallocDump.dump(ruby, references: false) } }.min
    t_refs = Array.new(3) { Benchmark.realtime { PtmallocDump.dump(refs) } }.min
    dump = PtmallocDump.load(ruby)
    pass = dump.ruby.meta[:pass_ns] / 1e9
    n = dump.ruby.meta[:object_count]
    t_attr = attribution_time(ruby)
    refs_dump = PtmallocDump.load(refs)
    t_attr_refs = attribution_time(refs)
    per_m = 1_000_000.0 / n
    puts "#{n} live objects (GC.stat heap_live_slots #{live}), #{dump.ruby.pages.size} pages, #{dump.chunk_count} chunks"
    puts format("%-44s %10s  (%s per million objects)", "Ruby pass, inside the dump", ms(pass), ms(pass * per_m))
    puts format("%-44s %10s vs %s", "dump with / without the Ruby pass (no refs)", ms(t_ruby), ms(t_plain))
    puts format("%-44s %10s  (%s per million objects)", "attribution at load (ruby.summary)", ms(t_attr), ms(t_attr * per_m))
    puts format("%-44s %10s  (%d references, %d roots, scan %s)", "default dump (references and roots)", ms(t_refs),
                refs_dump.ruby.meta[:reference_count], refs_dump.roots.size, ms(refs_dump.ruby.meta[:refs_ns] / 1e9))
    puts format("%-44s %10s", "attribution with references", ms(t_attr_refs))
    t_owners = Benchmark.realtime { PtmallocDump.load(refs).owners }
    puts format("%-44s %10s  (%s)", "load + owner kinds (Dump#owners)", ms(t_owners),
                refs_dump.owners.slice(:ruby, :anchored, :leaked).map { |k, v| "#{k} #{v[:count]}" }.join(", "))
    puts format("%-44s %10s / %s", "file size with Ruby data / references", PtmallocDump::FormatHelpers.human_bytes(File.size(ruby)),
                PtmallocDump::FormatHelpers.human_bytes(File.size(refs)))
    graph_figures(dir, t_refs, refs)
    keep.size
  ensure
    FileUtils.rm_rf(dir) if dir
  end
end

RubyBench.run if $PROGRAM_NAME == __FILE__
