# frozen_string_literal: true

# rake bench: what the allocation tracker (ptmalloc-dump --track) costs a program, at its default rate
# (one block in about 512 KiB allocated). Two workloads, each run with and without the tracker in
# LD_PRELOAD, interleaved, median of BENCH_TRACK_RUNS:
# - an allocation-heavy Ruby loop shaped like an application (records of Hashes, Strings, Arrays and
#   objects built through method calls, most dropped at once): its CPU time;
# - a real Rack app under Puma (single mode, 127.0.0.1), a page built per request (an ERB template,
#   JSON, a few hundred objects): the server's CPU time for a bounded loop of keep-alive requests.
# Then, where valgrind is installed, the same two workloads once each under callgrind with the tracker:
# the share of all instructions executed that the tracker's own code and the calls it makes (the stack
# walks, the tables) account for, glibc's malloc it calls on behalf of the program excluded. That
# count does not move with the machine's load, where the times above do. Last, the tracker's own
# memory: resident bytes of its tables per sampled block still allocated, and its caps. The gems come
# from RubyGems into vendor/server_gems, as the recipe specs' do; where they cannot be installed the
# bench says so and measures the loop alone.
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

  # The instructions a callgrind profile charges to the tracker: the self cost of every function in
  # its library, and the inclusive cost of each call it makes into other code except those it makes
  # for the program: glibc's allocator, and the function it stands in for (its ruby_init calls Ruby's)
  # (callgrind's format: valgrind's docs/cl-format.html).
  class Profile
    # glibc's allocator, as the tracker calls it (__libc_malloc and the rest are aliases of these)
    ALLOCATOR = %w[malloc free calloc realloc memalign valloc pvalloc __libc_malloc __libc_free __libc_calloc
                   __libc_realloc __libc_memalign __libc_valloc __libc_pvalloc _mid_memalign].freeze

    attr_reader :total, :tracker

    def initialize(path, library)
      @names = Hash.new { |h, k| h[k] = {} }
      @total = 0
      @tracker = 0
      ob = cob = fn = cfn = nil
      inclusive_next = false
      File.foreach(path) do |line|
        case line
        when /\Aob=(.*)/ then ob = name(:ob, Regexp.last_match(1))
        when /\Acob=(.*)/ then cob = name(:ob, Regexp.last_match(1))
        when /\Afn=(.*)/ then fn = name(:fn, Regexp.last_match(1))
                              cob = ob
        when /\Acfn=(.*)/ then cfn = name(:fn, Regexp.last_match(1))
        when /\Acalls=/ then inclusive_next = true
        when /\Atotals: (\d+)/, /\Asummary: (\d+)/ then @total = Integer(Regexp.last_match(1))
        when /\A[-+*0-9]/
          cost = line.split[1].to_i
          ours = ob == library
          if inclusive_next
            @tracker += cost if ours && cob != library && cfn != fn && !ALLOCATOR.include?(cfn)
            inclusive_next = false
            cob = ob
          elsif ours
            @tracker += cost
          end
        end
      end
    end

    def share
      @tracker.to_f / @total
    end

    private

    # "(id) name" defines a compressed name, "(id)" refers to it
    def name(kind, text)
      id, rest = text.match(/\A\((\d+)\)\s*(.*)\z/)&.captures
      return text.strip unless id

      rest.empty? ? @names[kind][id] : (@names[kind][id] = rest.strip)
    end
  end

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

  def wait_listening(port, app, seconds = 60)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    begin
      TCPSocket.open("127.0.0.1", port).close
    rescue SystemCallError
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "Puma did not start in #{seconds} s; its log:\n#{app.log}"
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

  def valgrind?
    system("valgrind", "--version", out: File::NULL, err: File::NULL) &&
      system("callgrind_control", "-h", out: File::NULL, err: File::NULL)
  end

  def callgrind(out)
    ["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=#{out}.%p"]
  end

  # The profile callgrind wrote for the process (one file: the children it traced exec'd in place).
  def profile(out)
    files = Dir["#{out}.*"]
    raise "callgrind wrote #{files.size} profiles: #{files.join(', ')}" unless files.size == 1

    Profile.new(files.first, PtmallocDump::Tracker.path)
  end

  # The loop, tracked, under callgrind: the whole run, Ruby's start included.
  def loop_instructions(dir)
    out = File.join(dir, "loop")
    _o, err, status = Open3.capture3(tracker_env, *callgrind(out), RbConfig.ruby, "-e", LOOP)
    raise "the loop under callgrind failed: #{err[-2000..] || err}" unless status.success?

    profile(out)
  end

  # Puma, tracked, under callgrind: instructions counted only while the requests are served (after the
  # same warm-up), switched on and off with callgrind_control.
  def rack_instructions(app, dir, count)
    out = File.join(dir, "puma")
    port = ServerApp.free_port
    pid = app.start(*callgrind(out), "--instr-atstart=no", "puma", "-t", "2:2", "-b", "tcp://127.0.0.1:#{port}",
                    "config.ru", extra_env: tracker_env)
    wait_listening(port, app, 600)
    requests(port, 200)
    toggle = ->(on) { system("callgrind_control", "-i", on, pid.to_s, out: File::NULL, err: File::NULL) }
    raise "callgrind_control could not reach the server" unless toggle.call("on")

    requests(port, count)
    toggle.call("off")
    app.stop_process(pid)
    pid = nil
    profile(out)
  ensure
    app.stop_process(pid) if pid
  end

  def instructions(app)
    unless valgrind?
      puts "  instructions: not counted (valgrind is not installed: apt-get install valgrind)"
      return
    end
    Dir.mktmpdir do |dir|
      report = lambda do |label, profile|
        puts format("  %-44s %5.2f%% of %d instructions are the tracker's (%d)", label, profile.share * 100,
                    profile.total, profile.tracker)
      end
      report.call("allocation-heavy Ruby loop, under callgrind", loop_instructions(dir))
      count = REQUESTS / 10
      report.call("Puma, #{count} requests, under callgrind", rack_instructions(app, dir, count)) if app
    end
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
    begin
      if app
        compare("Rack app under Puma, #{REQUESTS} requests, server CPU", [1000, "ms"]) do |tracked|
          rack_seconds(app, tracked)
        end
      end
      instructions(app)
    ensure
      app&.stop
    end
    memory
  end
end

TrackBench.main
