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
