# frozen_string_literal: true

# rake bench: what the allocation tracker (ptmalloc-dump --track) costs a program, at its default rate
# (one block in about 512 KiB allocated). Two workloads, each run with and without the tracker in
# LD_PRELOAD, interleaved, median of BENCH_TRACK_RUNS:
# - an allocation-heavy Ruby loop shaped like an application (records of Hashes, Strings, Arrays and
#   objects built through method calls, most dropped at once): its CPU time;
# - a real Rack app under Puma (single mode, 127.0.0.1), a page built per request (an ERB template,
#   JSON, a few hundred objects): the server's CPU time for a bounded loop of keep-alive requests.
# Then the tracker's own memory: resident bytes of its tables per sampled block still allocated, and
# its caps. The gems come from RubyGems into vendor/server_gems, as the recipe specs' do; where they
# cannot be installed the bench says so and measures the loop alone.
require "etc"
require "json"
require "net/http"
require "open3"
require "rbconfig"
require "tmpdir"
require "ptmalloc_dump"
require_relative "../spec/support/server_app"

module TrackBench
  RUNS = Integer(ENV.fetch("BENCH_TRACK_RUNS", "7"))
  REQUESTS = Integer(ENV.fetch("BENCH_TRACK_REQUESTS", "3000"))
  LIB = File.expand_path("../lib", __dir__)

  LOOP = <<~'RUBY'
    module Shop
      class Item
        def initialize(i)
          @name = "item-#{i}"
          @tags = %w[a b c].map { |t| "#{t}#{i % 7}" }
          @price = i * 3
        end

        def to_h
          { name: @name, tags: @tags, price: @price, label: "#{@name} (#{@price})" * 2 }
        end
      end

      def self.page(n)
        Array.new(n) { |i| Array.new(5) { |k| Item.new(i * 5 + k).to_h } }
      end
    end
    kept = []
    t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    300.times { |p| page = Shop.page(250); kept << page if (p % 20).zero? }
    puts Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t
  RUBY

  RACK_APP = <<~'RUBY'
    require "erb"
    require "json"
    TEMPLATE = ERB.new(<<~HTML)
      <html><body><h1><%= title %></h1><ul>
      <% rows.each do |r| %><li><%= r[:name] %>: <%= r[:price] %> (<%= r[:tags].join(", ") %>)</li>
      <% end %></ul><script>var data = <%= json %>;</script></body></html>
    HTML
    CACHE = []
    run lambda { |env|
      n = env["PATH_INFO"].length + 200
      rows = Array.new(n) { |i| { name: "item #{i}", price: i * 3, tags: %w[a b c].map { |t| t * (i % 4 + 1) } } }
      title = "page #{rand(1000)}"
      json = JSON.generate(rows.first(50))
      body = TEMPLATE.result(binding)
      CACHE << body if rand(100).zero?
      CACHE.shift if CACHE.size > 200
      [200, { "content-type" => "text/html" }, [body]]
    }
  RUBY

  module_function

  def tracker_env
    { "LD_PRELOAD" => PtmallocDump::Tracker.path }
  end

  def median(values)
    values.sort[values.size / 2]
  end

  def loop_seconds(env)
    out, err, status = Open3.capture3(env, RbConfig.ruby, "-e", LOOP)
    raise "the loop failed: #{err}" unless status.success?

    Float(out.lines.last)
  end

  # CPU seconds (user + system) of a process, from /proc/PID/stat
  def cpu(pid)
    fields = File.read("/proc/#{pid}/stat").split(")").last.split
    (Integer(fields[11]) + Integer(fields[12])) / Float(Etc.sysconf(Etc::SC_CLK_TCK))
  end

  def requests(port, count)
    Net::HTTP.start("127.0.0.1", port) do |http|
      count.times { |i| http.get("/#{'x' * (i % 50)}").body }
    end
  end

  def wait_listening(port, app)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
    begin
      TCPSocket.open("127.0.0.1", port).close
    rescue SystemCallError
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "Puma did not start in 60 s; its log:\n#{app.log}"
      end

      sleep 0.1
      retry
    end
  end

  # The server's CPU seconds for REQUESTS requests (after 200 to warm it up).
  def rack_seconds(app, tracked)
    port = ServerApp.free_port
    command = ["puma", "-t", "2:2", "-b", "tcp://127.0.0.1:#{port}", "config.ru"]
    command = ["ptmalloc-dump", "--track", "--", "puma", *command.drop(1)] if tracked
    pid = app.start(*command)
    wait_listening(port, app)
    requests(port, 200)
    before = cpu(pid) # `bundle exec` execs Puma in place, and --track execs it too: pid serves
    requests(port, REQUESTS)
    cpu(pid) - before
  ensure
    app.stop_process(pid) if pid
  end

  def rack_app
    app = ServerApp.new("track-bench", [%(gem "puma", "~> 6.6"), %(gem "rack", "~> 3.0")])
    app.bundle!
    app.write("config.ru", RACK_APP)
    app
  rescue RuntimeError => e
    puts "  Rack app under Puma: not measured (#{e.message.lines.first.strip})"
    nil
  end

  def compare(label, unit)
    plain = []
    tracked = []
    RUNS.times do
      plain << yield(false)
      tracked << yield(true)
    end
    base = median(plain)
    with = median(tracked)
    puts format("  %-44s %8.1f %s without, %8.1f with the tracker (%+.1f%%)", label, base * unit[0], unit[1],
                with * unit[0], (with / base - 1) * 100)
  end

  def memory
    Dir.mktmpdir do |dir|
      path = File.join(dir, "tracked.dump")
      code = "#{LOOP}\nrequire 'ptmalloc_dump'\nPtmallocDump.dump(#{path.inspect})"
      _o, err, status = Open3.capture3(tracker_env, RbConfig.ruby, "-I", LIB, "-e", code)
      raise "the tracked loop failed: #{err}" unless status.success?

      t = PtmallocDump.load(path).allocation_tracking
      puts format("  tracker's tables: %d KiB resident with %d sampled blocks still allocated (%d taken, %d stacks); " \
                  "address space %d MiB", t[:resident_bytes] / 1024, t[:samples], t[:sampled], t[:stacks],
                  t[:mapped_bytes] / 1_048_576)
      puts "  each sampled block: a 24-byte slot of a table kept at most half full (48 to 96 B); each distinct " \
           "stack 24 B, 8 B a native frame, 4 B a Ruby frame and 24 B a new one; caps: 2,097,152 sampled " \
           "blocks alive at once (a table of 4,194,304 slots), 524,288 stacks, 16,777,216 native frames " \
           "(then samples are counted as dropped)"
    end
  end

  def main
    puts format("allocation tracker (ptmalloc-dump --track, default rate), median of %d runs each, interleaved", RUNS)
    compare("allocation-heavy Ruby loop, CPU", [1000, "ms"]) { |tracked| loop_seconds(tracked ? tracker_env : {}) }
    app = rack_app
    if app
      begin
        compare("Rack app under Puma, #{REQUESTS} requests, server CPU", [1000, "ms"]) do |tracked|
          rack_seconds(app, tracked)
        end
      ensure
        app.stop
      end
    end
    memory
  end
end

TrackBench.main
