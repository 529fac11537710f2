# frozen_string_literal: true

# rake bench: what allocation tracing (PtmallocDump.trace_allocations) costs. An application-shaped
# loop (records built through a few method calls: Hashes of Strings, Arrays, objects of several
# classes, most of them dropped at once, some kept) runs without tracing, with every: 64 (the
# default) and with every: 1, each in its own process, interleaved, median of BENCH_SITES_RUNS (the
# loop's CPU time, which other work on the machine disturbs less than its wall time); then
# the tables' resident memory per traced object and what the sites add to an in-process dump.
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

module SitesBench
  RUNS = Integer(ENV.fetch("BENCH_SITES_RUNS", "5"))
  LIB = File.expand_path("../lib", __dir__)

  WORKLOAD = <<~'RUBY'
    require "ptmalloc_dump"
    require "json"
    require "tmpdir"
    module Shop
      class Item
        def initialize(i) = (@name = "item-#{i}"; @tags = %w[a b c].map { |t| "#{t}#{i % 7}" }; @price = i * 3)
        def to_h = { name: @name, tags: @tags, price: @price }
      end
      class Order
        def initialize(i) = (@items = Array.new(5) { |k| Item.new(i * 5 + k) }; @note = "order #{i}" * 3)
        def lines = @items.map(&:to_h)
      end
      def self.page(n) = Array.new(n) { |i| Order.new(i).lines }
    end
    every = Integer(ARGV.fetch(0))
    PtmallocDump.trace_allocations(every: every, seed: 7) if every.positive?
    kept = []
    t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) # CPU time: other work on the machine aside
    before = GC.stat(:total_allocated_objects)
    200.times { |p| page = Shop.page(250); kept << page if (p % 20).zero? }
    elapsed = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t
    objects = GC.stat(:total_allocated_objects) - before
    stats = PtmallocDump.allocation_tracing
    dump = lambda do
      path = File.join(Dir.tmpdir, "sites-bench-#{Process.pid}.dump")
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      PtmallocDump.dump(path)
      dt = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
      File.delete(path)
      dt
    end
    pause = Array.new(3) { dump.call }.min
    status = File.read("/proc/self/status")[/^RssAnon:\s+(\d+)/, 1].to_i * 1024
    puts JSON.generate(seconds: elapsed, objects: objects, pause: pause, rss_anon: status, kept: kept.size,
                       **(stats || {}).slice(:tracked, :stacks, :sampled, :mapped_bytes))
  RUBY

  module_function

  def run(every)
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", LIB, "-e", WORKLOAD, every.to_s)
    raise "workload failed: #{err}" unless status.success?

    JSON.parse(out.lines.last, symbolize_names: true)
  end

  def median(values)
    values.sort[values.size / 2]
  end

  def main
    modes = { "no tracing" => 0, "every: 64" => 64, "every: 1" => 1 }
    results = modes.transform_values { [] }
    RUNS.times { modes.each { |name, every| results[name] << run(every) } }
    base = median(results["no tracing"].map { |r| r[:seconds] })
    base_pause = median(results["no tracing"].map { |r| r[:pause] })
    objects = results["no tracing"].first[:objects]
    puts format("allocation tracing: %d objects allocated by an application-shaped loop, median of %d runs each",
                objects, RUNS)
    results.each do |name, rs|
      s = median(rs.map { |r| r[:seconds] })
      pause = median(rs.map { |r| r[:pause] }) - base_pause
      puts format("  %-12s %7.0f ms CPU (%+5.1f%%), %6.1f ns an object; in-process dump %+.0f ms%s", name, s * 1000,
                  100 * (s - base) / base, s * 1e9 / objects, pause * 1000,
                  tables(rs.last, results["no tracing"].last))
    end
  end

  # the tables' figures of a traced run, its anonymous RSS against an untraced one's
  def tables(run, untraced)
    return "" unless run[:tracked]

    extra = run[:rss_anon] - untraced[:rss_anon]
    format("; %d traced alive, %d stacks, tables %.0f MiB mapped, RssAnon %+.1f MiB (%.0f B a traced object)",
           run[:tracked], run[:stacks], run[:mapped_bytes] / 1_048_576.0, extra / 1_048_576.0,
           run[:tracked].positive? ? extra.to_f / run[:tracked] : 0)
  end
end

SitesBench.main
