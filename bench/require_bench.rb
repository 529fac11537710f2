# frozen_string_literal: true

# rake bench: what `require "ptmalloc_dump"` costs a process that only dumps: the wall time of the
# require and the RSS it adds (VmRSS before and after, in the same process), against the same reading
# around nothing, median of 15 fresh processes each; the features it loads; and what the first
# rendering loads on top (the classes a worker never needs, loaded on first use).
require "open3"
require "rbconfig"

module RequireBench
  LIB = File.expand_path("../lib", __dir__)
  RUNS = 15

  PROBE = <<~'RUBY'
    def rss = File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i * 1024
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    features = $LOADED_FEATURES.size
    r0 = rss
    t0 = clock.call
    require "ptmalloc_dump" if ARGV[0] == "gem"
    t1 = clock.call
    r1 = rss
    loaded = $LOADED_FEATURES.size - features
    if ARGV[1] == "render"
      PtmallocDump.dump("/dev/null/x", ruby: false) rescue nil
      PtmallocDump::TextSummary && PtmallocDump::Report && PtmallocDump::VisualizeCLI
    end
    puts [((t1 - t0) * 1000).round(2), r1 - r0, loaded, $LOADED_FEATURES.size - features, rss - r1].join(" ")
  RUBY

  module_function

  def runs(*args)
    Array.new(RUNS) do
      out, status = Open3.capture2(RbConfig.ruby, "-I#{LIB}", "-e", PROBE, "--", *args)
      raise "the probe failed" unless status.success?

      out.split.map(&:to_f)
    end
  end

  def median(values)
    values.sort[values.size / 2]
  end

  def run
    bare = runs("none")
    gem = runs("gem")
    render = runs("gem", "render")
    ms = median(gem.map { |r| r[0] }) - median(bare.map { |r| r[0] })
    kib = (median(gem.map { |r| r[1] }) - median(bare.map { |r| r[1] })) / 1024.0
    puts format("require \"ptmalloc_dump\": %.1f ms, RSS +%.0f KiB (medians of %d processes, less the same " \
                "reading around nothing: %.2f ms, %+.0f KiB); %d features loaded",
                ms, kib, RUNS, median(bare.map { |r| r[0] }), median(bare.map { |r| r[1] }) / 1024.0,
                median(gem.map { |r| r[2] }))
    puts format("the report's and the command line's classes, loaded on first use: %d features more, RSS +%.0f KiB",
                median(render.map { |r| r[3] }) - median(render.map { |r| r[2] }),
                median(render.map { |r| r[4] }) / 1024.0)
    puts "load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
  end
end

RequireBench.run
