# frozen_string_literal: true

require "spec_helper"
require "json"
require "open3"
require "ptmalloc_dump/visualize_cli"

RSpec.describe "readings over time" do
  def ruby_child(code)
    out, err, status = run_ruby(code)
    expect(status).to be_success, err
    out
  end

  describe "PtmallocDump.stats" do
    it "reads the figures a dump taken right after it records" do
      path = File.join(tmpdir, "now.dump")
      out = ruby_child(<<~RUBY)
        require "json"
        threads = 3.times.map { Thread.new { Array.new(2000) { "y" * 300 }.each_slice(2).map(&:first) } }
        keep = threads.map(&:value)
        # a thread that ended frees its tcache as its native thread exits, after join returned
        200.times { break if Dir.children("/proc/self/task").size <= Thread.list.size + 1; sleep 0.01 }
        s = nil
        # twice: the first call from each call site fills Ruby's call caches, which mallocs
        2.times do
          s = PtmallocDump.stats
          PtmallocDump.dump(#{path.inspect}, ruby: false)
        end
        puts JSON.generate(s)
      RUBY
      s = JSON.parse(out, symbolize_names: true)
      d = PtmallocDump.load(path)
      expect_valid_dump(d)
      expect(s[:ring_ok]).to be(true)
      expect(s[:malloc]).to eq(d.summary.slice(*PtmallocDump::Stats::MALLINFO_KEYS))
      expect(s[:arenas].map { |a| [a[:address], a[:system_mem]] }).to eq(d.arenas.map { |a| [a.address, a.system_mem] })
      expect(s[:arenas].size).to be >= 2
      expect(s[:arenas].sum { |a| a[:system_mem] }).to eq(s[:malloc][:arena])
      expect(s[:arenas]).to all(satisfy { |a| a[:max_system_mem] >= a[:system_mem] })
    end

    it "gives the kernel's RSS figures and GC.stat's" do
      s = PtmallocDump.stats(smaps: true)
      status = File.read("/proc/self/status")
      vm_rss = status[/^VmRSS:\s+(\d+)/, 1].to_i * 1024
      expect(s[:rss][:vm_rss]).to be_within(4 * 1024 * 1024).of(vm_rss)
      expect(s[:rss][:anonymous] + s[:rss][:file_backed] + s[:rss][:shmem]).to eq(s[:rss][:vm_rss])
      expect(s[:rss][:pss]).to be_between(1, s[:rss][:rollup_rss])
      expect(s[:gc][:heap_allocated_pages]).to be_within(50).of(GC.stat(:heap_allocated_pages))
      expect(s[:pid]).to eq(Process.pid)
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      100.times { PtmallocDump.stats(smaps: false) }
      each = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t) / 100
      puts "stats(smaps: false): #{(each * 1e6).round} µs a reading here"
    end

    it "is published as Prometheus text" do
      text = PtmallocDump.prometheus_text
      metrics = text.lines.grep_v(/^#/).to_h { |l| l.split(" ", 2).then { |k, v| [k, Integer(v)] } }
      expect(text.lines.grep(/^# TYPE /).map { |l| l.split[3] }.uniq).to eq(["gauge"])
      expect(metrics.keys).to all(match(/\Aptmalloc_[a-z_]+(\{[a-z_]+="[a-z_0-9]+"\})?\z/))
      s = PtmallocDump.stats
      expect(metrics["ptmalloc_arenas"]).to eq(s[:arenas].size)
      expect(metrics['ptmalloc_arena_system_bytes{arena="0"}']).to be > 0
      expect(metrics['ptmalloc_rss_bytes{part="vm_rss"}']).to be_within(8 << 20).of(s[:rss][:vm_rss])
    end
  end

  describe "PtmallocDump.sample" do
    it "appends one reading per period, stops, and starts again in a forked child" do
      file = File.join(tmpdir, "readings.jsonl")
      ruby_child(<<~RUBY)
        sampler = PtmallocDump.sample(every: 0.1, to: #{file.inspect})
        sleep 0.45
        pid = fork do
          again = PtmallocDump.sample(every: 0.1, to: #{file.inspect})
          exit!(again.equal?(sampler) && again.running? ? 0 : 1) if (sleep 0.35)
        end
        _, st = Process.wait2(pid)
        sampler.stop
        n = File.readlines(#{file.inspect}).size
        sleep 0.3
        abort "not stopped" unless File.readlines(#{file.inspect}).size == n && !sampler.running?
        abort "child failed" unless st.success?
      RUBY
      readings = File.readlines(file).map { |l| JSON.parse(l, symbolize_names: true) }
      by_pid = readings.group_by { |r| r[:pid] }
      expect(by_pid.size).to eq(2)
      by_pid.each_value do |rs|
        expect(rs.size).to be >= 3
        expect(rs.map { |r| r[:time] }).to eq(rs.map { |r| r[:time] }.sort)
        expect(rs).to all(include(:malloc, :arenas, :rss, :gc))
      end
    end
  end

  # Readings in the sampler's format, made up: `n` over `minutes`, in use, free and the rest of RSS
  # given as functions of the fraction of the period (MiB), each with Gaussian noise of `sigma` MiB
  # from a seeded generator.
  describe "verdicts on made-up readings" do
    MIB = 1024 * 1024

    def readings(path, pid, in_use:, free:, other: ->(_f) { 150 }, sigma: 2.0, seed: 1, n: 60, minutes: 30)
      rng = Random.new(seed)
      gauss = -> { Math.sqrt(-2 * Math.log(1 - rng.rand)) * Math.cos(2 * Math::PI * rng.rand) }
      File.open(path, "a") do |io|
        n.times do |i|
          f = i / (n - 1.0)
          u, fr, o = [in_use, free, other].map { |g| ((g.call(f) + sigma * gauss.call) * MIB).round }
          io.puts JSON.generate(time: 1_764_000_000 + f * minutes * 60, pid: pid,
                                malloc: { arena: u + fr, hblkhd: 0, uordblks: u, fordblks: fr },
                                rss: { vm_rss: u + fr + o, anonymous: u + fr + o / 2, file_backed: o - o / 2 },
                                gc: { ruby_pages_bytes: 20 * MIB })
        end
      end
      path
    end

    # rises by `by` MiB from the start to `until_f` of the period, then stays
    def warm_up(base, by, until_f)
      ->(f) { base + by * [f / until_f, 1.0].min }
    end

    def timeline(&block)
      path = File.join(tmpdir, "readings.jsonl")
      block.call(path)
      PtmallocDump::Timeline.new([path])
    end

    def trend(t, pid, figure)
      t.trends.find { |x| x.pid == pid && x.figure == figure }
    end

    def verdict(t, pid)
      t.verdicts.find { |v| v.start_with?("pid #{pid}: ") }
    end

    it "a warm-up that rose by 119 and 128 MiB of RSS, 79 and 82 of them free, then flattened: warm-up, " \
       "then steady, though the free figure fits a line with r² 0.3 to 0.4" do
      t = timeline do |path|
        readings(path, 101, in_use: warm_up(200, 40, 0.15), free: warm_up(30, 79, 0.15))
        readings(path, 102, in_use: warm_up(210, 46, 0.16), free: warm_up(30, 82, 0.16), seed: 2)
      end
      { 101 => [119, 79], 102 => [128, 82] }.each do |pid, (rss, free)|
        t.trends.select { |x| x.pid == pid }.each { |x| puts "pid #{pid}: #{x}" }
        expect(trend(t, pid, :free).r2).to be_between(0.3, 0.4) # what made the old rule call it steady
        expect(verdict(t, pid)).to start_with("pid #{pid}: warm-up, then steady (")
        expect(trend(t, pid, :vm_rss).shape).to eq(:warm_up)
        # the rise the chart shows, less the part of the climb the first readings' median sits on
        expect(trend(t, pid, :vm_rss).net).to be_within(0.2 * rss * MIB).of(rss * MIB)
        expect(trend(t, pid, :free).net).to be_within(0.2 * free * MIB).of(free * MIB)
      end
    end

    it "the same warm-up ending at a fifth to a third of the period, with other noise: the same verdict " \
       "each time, while r² crosses 0.5" do
      ends = [0.15, 0.2, 0.25, 0.3, 0.33]
      t = timeline do |path|
        ends.each_with_index do |e, i|
          readings(path, 200 + i, in_use: warm_up(200, 40, e), free: warm_up(30, 79, e), seed: 10 + i)
        end
      end
      r2 = ends.each_index.map { |i| trend(t, 200 + i, :free).r2 }
      puts "r² of free: #{r2.map { |x| x.round(2) }.join(', ')}"
      expect(r2.min).to be < 0.5
      expect(r2.max).to be > 0.5
      ends.each_index { |i| expect(verdict(t, 200 + i)).to start_with("pid #{200 + i}: warm-up, then steady (") }
    end

    it "noisy and level: steady" do
      t = timeline do |path|
        readings(path, 300, in_use: ->(_f) { 300 }, free: ->(_f) { 40 }, sigma: 6)
        # a level with a few spikes far above it
        readings(path, 301, in_use: ->(f) { ((f * 59).round % 13).zero? ? 360 : 300 }, free: ->(_f) { 40 }, seed: 4)
      end
      [300, 301].each do |pid|
        expect(verdict(t, pid)).to eq("pid #{pid}: in use does not climb, nor does free but resident: steady")
        expect(t.trends.select { |x| x.pid == pid }.map(&:shape)).to all(eq(:steady))
      end
    end

    it "a steady climb of in use: a leak, at the planted rate" do
      t = timeline { |path| readings(path, 400, in_use: ->(f) { 200 + 60 * f }, free: ->(_f) { 40 }, sigma: 3) }
      expect(verdict(t, 400)).to start_with("pid 400: in use climbs: a leak, or a cache still filling (in use climbs: +")
      expect(trend(t, 400, :in_use).slope * 60).to be_within(0.2 * 2 * MIB).of(2 * MIB) # 60 MiB in 30 min
      expect(trend(t, 400, :free).shape).to eq(:steady)
    end

    it "free climbing while in use does not: fragmentation, also when the readings scatter so much that a " \
       "line fits them with r² below 0.5" do
      t = timeline do |path|
        readings(path, 500, in_use: ->(_f) { 200 }, free: ->(f) { 40 + 60 * f }, sigma: 3)
        readings(path, 501, in_use: ->(_f) { 200 }, free: ->(f) { 40 + 79 * f }, sigma: 31, seed: 3)
      end
      expect(trend(t, 501, :free).r2).to be < 0.5
      [500, 501].each do |pid|
        expect(verdict(t, pid)).to start_with("pid #{pid}: free but resident climbs while in use does not: fragmentation")
        expect(trend(t, pid, :in_use).shape).to eq(:steady)
      end
    end

    it "RSS climbing while the heap's figures stay level: memory outside malloc, not steady" do
      t = timeline do |path|
        readings(path, 700, in_use: ->(_f) { 200 }, free: ->(_f) { 40 }, other: ->(f) { 150 + 90 * f }, sigma: 3)
      end
      expect(verdict(t, 700)).to start_with("pid 700: RSS climbs while the malloc heap does not: memory outside malloc (RSS climbs: +")
      expect(trend(t, 700, :in_use).shape).to eq(:steady)
      expect(trend(t, 700, :free).shape).to eq(:steady)
    end

    it "the page shows each figure's rise, its last third, its noise and its trend" do
      path = File.join(tmpdir, "readings.jsonl")
      readings(path, 600, in_use: warm_up(200, 40, 0.15), free: warm_up(30, 79, 0.15))
      readings(path, 601, in_use: ->(f) { 200 + 60 * f }, free: ->(_f) { 40 }, sigma: 3)
      out = StringIO.new
      err = StringIO.new
      outdir = File.join(tmpdir, "timeline")
      expect(PtmallocDump::VisualizeCLI.new(["--timeline", path, outdir], out: out, err: err).run).to eq(0), err.string
      expect(out.string).to match(/^pid 600: warm-up, then steady \(in use warmed up: \+\d+(\.\d)? MiB over 30\.0 min/)
      expect(out.string).to match(/^pid 601: in use climbs: a leak/)
      html = File.read(File.join(outdir, "index.html"))
      expect(html).to include("<th>rise over the period</th><th>last third</th><th>noise</th>")
      expect(html.scan("<td>warm-up, then flat</td>").size).to eq(3) # pid 600's in use, free and RSS
      expect(html).to include("<li>pid 600: warm-up, then steady (")
    end
  end

  describe "ptmalloc-visualize --timeline" do
    LEAK = <<~RUBY
      keep = []
      PtmallocDump.sample(every: 0.1, to: FILE)
      30.times do |i|
        keep << Array.new(400) { "l" * 1000 }                              # about 4 MB a second, kept
        PtmallocDump.dump(MID, ruby: false) if i == 15
        sleep 0.1
      end
    RUBY
    FRAGMENT = <<~RUBY
      all = Array.new(60_000) { |i| "f" * (200 + i % 64) }
      keep = all.each_slice(8).map(&:first)                              # one in eight stays: pinned pages
      all = nil
      GC.start
      PtmallocDump.sample(every: 0.1, to: FILE)
      30.times { Array.new(1000) { "c" * 300 }; GC.start; sleep 0.1 }    # churn that settles, nothing kept
    RUBY

    it "says in-use memory climbs for a leak and not for fragmentation that settles" do
      leak = File.join(tmpdir, "leak.jsonl")
      frag = File.join(tmpdir, "frag.jsonl")
      mid = File.join(tmpdir, "leak-mid.dump")
      ruby_child(LEAK.sub("FILE", leak.inspect).sub("MID", mid.inspect))
      ruby_child(FRAGMENT.sub("FILE", frag.inspect))
      dump = File.join(tmpdir, "leak-end.dump")
      PtmallocDump.dump(dump, ruby: false)
      expect(PtmallocDump::VisualizeCLI.new([dump, File.join(tmpdir, "leak-end")], out: StringIO.new, err: StringIO.new).run).to eq(0)

      outdir = File.join(tmpdir, "timeline")
      out = StringIO.new
      err = StringIO.new
      status = PtmallocDump::VisualizeCLI.new(["--timeline", leak, frag, mid, dump, outdir], out: out, err: err).run
      expect(status).to eq(0), err.string
      t = PtmallocDump::Timeline.new([leak, frag])
      leak_pid = JSON.parse(File.readlines(leak).first)["pid"]
      frag_pid = JSON.parse(File.readlines(frag).first)["pid"]
      t.trends.each { |x| puts "pid #{x.pid}: #{x}" }
      in_use = t.trends.select { |x| x.figure == :in_use }.to_h { |x| [x.pid, x] }
      expect(in_use[leak_pid].climbs).to be(true)
      expect(in_use[frag_pid].climbs).to be(false)
      # the slope against the leak's own figures: 400 strings of 1000 bytes each 0.1 s
      expect(in_use[leak_pid].slope).to be_within(0.5 * 4_000_000).of(4_000_000)
      expect(out.string).to match(/^pid #{leak_pid}: in use climbs/)
      expect(out.string).not_to match(/^pid #{frag_pid}: in use climbs/)
      html = File.read(File.join(outdir, "index.html"))
      expect(html.scan("<svg").size).to eq(2)
      expect(html.scan("<polyline").size).to be >= 2 * 4
      expect(html).to include("leak-end.dump")
      # the dump taken during the period is marked on both charts' time axes
      expect(html.scan(/<line [^>]*stroke="#8e44ad"[^>]*><title>dump leak-mid\.dump \(pid #{leak_pid}\)/).size).to eq(2)
      expect(html).to include(%(<a href="file://#{File.join(tmpdir, 'leak-end', 'index.html')}">)) # its report (listed; taken after the period, so not on the axis)
      expect(html).to include("pid #{leak_pid}: in use climbs")
    end
  end
end
