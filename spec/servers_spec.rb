# frozen_string_literal: true

require "spec_helper"

# The README's worker recipes, each booted with its real server from RubyGems in a throwaway app.
RSpec.describe "the worker recipes" do
  CONFIG_RU = <<~RUBY
    KEEP = Array.new(20_000) { |i| "application data \#{i} " * 3 }
    run ->(_env) { [200, { "content-type" => "text/plain" }, ["ok \#{Process.pid} \#{Array.new(200) { |i| i.to_s * 20 }.size}\\n"]] }
  RUBY

  def app_for(name, gems)
    app = ServerApp.new(name, gems)
    @apps << app
    app.bundle!
    app
  end

  # The recipe with a line after the handler's installation that tells the spec the worker booted.
  def recipe(app, name)
    text = ServerApp.recipe(name, app.dumps)
    marked = text.sub(/^(\s*)(PtmallocDump\.install_signal_handler.*\n)/) { "#{Regexp.last_match(1)}#{Regexp.last_match(2)}#{Regexp.last_match(1)}#{app.booted_marker}\n" }
    expect(marked).not_to eq(text)
    marked
  end

  # Clustered Puma (2 workers) serving CONFIG_RU, with the README's recipe in config/puma.rb.
  def puma_app(name, version)
    app = app_for(name, [%(gem "puma", "#{version}")])
    app.write("config.ru", CONFIG_RU)
    app.write("config/puma.rb", <<~RUBY)
      workers 2
      threads 1, 2
      bind "tcp://127.0.0.1:#{app.port}"
      #{recipe(app, name)}
    RUBY
    app
  end

  def expect_dump_of(app, pid, fork: true)
    path = app.dump_of(pid)
    d = PtmallocDump.load(path)
    expect(d.header[:pid]).to eq(pid)
    expect(d.header[:fork_snapshot]).to be(fork)
    expect(d.verify.ok?).to be(true), d.verify.differences.join("\n")
    expect_valid_dump(d)
    expect(d.summary[:in_use_bytes]).to be > 1_000_000 # the app's data, loaded before the fork
    d
  end

  before { @apps = [] }
  after { @apps.each(&:stop) }

  # Puma 7 and 8 require Ruby 3.0 (their gemspecs' required_ruby_version): Bundler cannot install them on
  # Ruby 2.7, where Puma 5 and 6 are the recipes run
  PUMAS = { "puma5" => ["~> 5.6", "on_worker_boot"], "puma6" => ["~> 6.6", "on_worker_boot"] }
          .merge(if Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.0")
                   { "puma7" => ["~> 7.0", "before_worker_boot"], "puma8" => ["~> 8.0", "before_worker_boot"] }
                 else
                   {}
                 end).freeze
  NEWEST_PUMA = PUMAS.keys.last
  PUMAS.each do |name, (version, hook)|
    it "#{name}: #{hook} installs the handler in each worker; a signal to a worker dumps it" do
      app = puma_app(name, version)
      master = app.start("puma", "-C", "config/puma.rb", "config.ru")
      workers = app.booted(2)
      expect(workers).not_to include(master)
      expect(app.get).to match(%r{\AHTTP/1\.1 200})
      expect_dump_of(app, workers.first)
      expect(app.log).to match(/the worker paused \d+\.\d ms \(signal to return\)/)
      expect(app.log).not_to match(/deprecat/i) if %w[puma7 puma8].include?(name)
      expect(Process.kill(0, workers.first)).to eq(1) # the worker lives on
      expect(app.get).to match(%r{\AHTTP/1\.1 200})
    end
  end

  it "#{NEWEST_PUMA} with fork_worker: the recipe's signal is free in the master and the workers; URG is " \
     "Puma's refork, and installing on it says so" do
    name = NEWEST_PUMA
    app = app_for(name, [%(gem "puma", "#{PUMAS.fetch(name).first}")])
    urg_log = File.join(app.dir, "urg.log")
    # the recipe, and after it in the same hook a second handler on URG, logging to its own file
    urg = %(PtmallocDump.install_signal_handler("URG", dir: #{app.dumps.inspect}, log: File.open(#{urg_log.inspect}, "a")))
    hook = recipe(app, name).sub(/^end\b/) { "  #{urg}\nend" }
    app.write("config.ru", CONFIG_RU)
    app.write("config/puma.rb", <<~RUBY)
      workers 2
      threads 1, 2
      fork_worker
      bind "tcp://127.0.0.1:#{app.port}"
      #{hook}
    RUBY
    signal = ServerApp.recipe_signal(name)
    expect(signal).not_to eq("URG")
    master = app.start("puma", "-C", "config/puma.rb", "config.ru")
    workers = app.booted(2)
    expect(app.get).to match(%r{\AHTTP/1\.1 200})
    expect_dump_of(app, workers.first)
    # the recipe's signal found no handler: no warning in the server's log
    expect(app.log).not_to include("already had")
    # URG was Puma's (the master's fork_worker trap, inherited): the second installation named it
    # (worker 0 writes it just after its booted mark; the workers Puma forks from worker 0 inherit its
    # handlers, and installing again there returns the one in place, silently)
    lines = []
    600.times do
      lines = File.exist?(urg_log) ? File.readlines(urg_log) : []
      break unless lines.empty?

      sleep 0.05
    end
    expect(lines).not_to be_empty
    expect(lines).to all(match(%r{\Aptmalloc_dump: SIGURG already had a Ruby handler \(a Proc at \S+/puma/cluster\.rb:\d+\) }))
    # the recipe's signal sent to the master by mistake: no refork, no restart, the same workers
    before = app.log.size
    Process.kill(signal, master)
    sleep 2
    expect(Process.kill(0, master)).to eq(1)
    expect(workers.map { |w| Process.kill(0, w) }).to eq([1, 1])
    expect(app.log[before..]).not_to match(/phase: [1-9]|phased|restart/i)
    expect(app.get).to match(%r{\AHTTP/1\.1 200})
  end

  it "#{NEWEST_PUMA} under ptmalloc-dump --track (README's command): a worker's dump says where its memory was " \
     "allocated, in the master before the fork and in the worker" do
    name = NEWEST_PUMA
    app = puma_app(name, PUMAS[name][0])
    # KEEP's strings long enough to have malloc'd buffers on every Ruby (from 3.2 on, shorter ones are
    # embedded in their slots): 20,000 of 760 to 920 bytes
    app.write("config.ru", CONFIG_RU.sub('" * 3 }', '" * 40 }'))
    command = ServerApp.command("track-puma")
    expect(command.first(2)).to eq(%w[bundle exec])
    # one block in about 64 KiB: enough samples of the app's 18 MB for the check below to be sure
    master = app.start(*command.drop(2), "config.ru", extra_env: { "PTMALLOC_DUMP_TRACK_BYTES" => "65536" })
    workers = app.booted(2)
    expect(app.get).to match(%r{\AHTTP/1\.1 200})
    d = expect_dump_of(app, workers.first)
    expect(d.allocation_tracking).to include(pid: master, dropped: 0)
    expect(d.allocation_tracking[:flags]).to include(:forked, :ruby)
    # KEEP, built by config.ru's first line in the master before the fork: 20,000 strings, each in a
    # chunk of its bytes, its terminator and the chunk's header rounded up to 16, and their Array's
    # 160 KB; the sampled estimate within 25%
    chunks = Array.new(20_000) { |i| (("application data #{i} " * 40).bytesize + 1 + 8 + 15) & ~15 }.sum
    keep = d.allocation_sites(limit: 10_000).select { |s| s[:site].end_with?("config.ru:1") }
    expect(keep.sum { |s| s[:ruby_owned_bytes] }).to be_within((chunks + 160_000) / 4).of(chunks + 160_000)
  end

  it "unicorn: after_fork installs the handler in each worker" do
    app = app_for("unicorn", [%(gem "unicorn", "~> 6.1"), %(gem "rack", "~> 2.2")]) # unicorn does not depend on rack
    app.write("config.ru", CONFIG_RU)
    app.write("config/unicorn.rb", <<~RUBY)
      worker_processes 2
      listen "127.0.0.1:#{app.port}"
      #{recipe(app, 'unicorn')}
    RUBY
    app.start("unicorn", "-c", "config/unicorn.rb", "config.ru")
    workers = app.booted(2)
    expect(app.get).to match(%r{\AHTTP/1\.1 200})
    expect_dump_of(app, workers.last)
  end

  it "pitchfork: after_worker_fork installs an in-process handler; --compare shows what each worker shares" do
    # Pitchfork's master makes itself its workers' subreaper at start, and raises where it cannot
    skip "qemu-user does not emulate prctl(PR_SET_CHILD_SUBREAPER), which Pitchfork needs" if SpecHelpers.qemu_user?

    app = app_for("pitchfork", [%(gem "pitchfork", "~> 0.18")])
    app.write("config.ru", CONFIG_RU)
    app.write("config/pitchfork.rb", <<~RUBY)
      worker_processes 2
      listen "127.0.0.1:#{app.port}"
      #{recipe(app, 'pitchfork')}
    RUBY
    app.start("pitchfork", "-c", "config/pitchfork.rb", "config.ru")
    workers = app.booted(2)
    expect(app.get).to match(%r{\AHTTP/1\.1 200})
    dumps = workers.first(2).map { |w| expect_dump_of(app, w, fork: false) }
    # in process, the dump sees which pages the worker still shares with the process it was forked from
    expect(dumps.map { |d| d.summary[:shared_bytes] }).to all(be > 0)
    fleet = PtmallocDump::Fleet.new(dumps.map(&:path))
    expect(fleet.dumps.size).to eq(2)
  end

  def self.redis_exe
    exe = ENV.fetch("PATH", "").split(":").map { |d| File.join(d, "redis-server") }.find { |f| File.executable?(f) }
    raise "redis-server is not installed: apt-get install redis-server (bin/setup installs it)" unless exe

    exe
  end

  # The installed redis-server's version ("Redis server v=7.0.15 ...")
  def self.redis_version
    Gem::Version.new(IO.popen([redis_exe, "--version"], &:read)[/v=(\d+\.\d+\.\d+)/, 1] || "0")
  end

  def redis_server(app)
    exe = self.class.redis_exe

    port = ServerApp.free_port
    pid = Process.spawn(exe, "--port", port.to_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                        "--dir", app.dir, out: File::NULL, err: File::NULL, pgroup: true)
    @redis << pid
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
    begin
      TCPSocket.open("127.0.0.1", port).close
    rescue Errno::ECONNREFUSED
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "redis-server did not start on 127.0.0.1:#{port}"
      end

      sleep 0.05
      retry
    end
    port
  end

  describe "sidekiq" do
    before { @redis = [] }
    after do
      @redis.each do |pid|
        Process.kill("TERM", pid)
        Process.wait(pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
    end

    # Sidekiq 7 refuses a Redis before 6.2 at its start (Debian 11 has 6.0): Sidekiq 6.5 is run with it.
    # Sidekiq 8 requires Ruby 3.2 (its gemspec's required_ruby_version): Bundler cannot install it on an
    # older Ruby
    versions = redis_version >= Gem::Version.new("6.2") ? { "sidekiq7" => "~> 7.3" } : { "sidekiq6" => "~> 6.5" }
    versions["sidekiq8"] = "~> 8.0" if Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.2")
    versions.each do |name, version|
      it "#{name}: the startup hook installs the handler in the process that runs the jobs" do
        app = app_for(name, [%(gem "sidekiq", "#{version}")])
        port = redis_server(app)
        app.write("app.rb", <<~RUBY)
          require "sidekiq"
          KEEP = Array.new(20_000) { |i| "application data \#{i} " * 3 }
          Sidekiq.configure_server { |config| config.redis = { url: "redis://127.0.0.1:#{port}/0" } }
          #{recipe(app, name)}
          class NoopJob
            include Sidekiq::Job
            def perform; end
          end
        RUBY
        app.start("sidekiq", "-r", "./app.rb", "-c", "2")
        pid = app.booted(1).first
        expect_dump_of(app, pid)
      end
    end
  end

  it "a plain Rack app: config.ru installs the handler, rackup serves it" do
    app = app_for("rack", [%(gem "rackup", "~> 2.1"), %(gem "webrick", "~> 1.8")])
    app.write("config.ru", "#{recipe(app, 'rack')}#{CONFIG_RU}")
    app.start("rackup", "-s", "webrick", "-o", "127.0.0.1", "-p", app.port.to_s, "config.ru")
    pid = app.booted(1).first
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    begin
      expect(app.get).to match(%r{\AHTTP/1\.1 200})
    rescue Errno::ECONNREFUSED
      raise if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.1
      retry
    end
    expect_dump_of(app, pid)
  end

  it "a Puma worker under a request loop, signalled 10 times: every dump valid; latencies printed (#{NEWEST_PUMA})" do
    app = app_for(NEWEST_PUMA, [%(gem "puma", "#{PUMAS.fetch(NEWEST_PUMA).first}")])
    app.write("config.ru", CONFIG_RU)
    app.write("config/puma.rb", <<~RUBY)
      workers 1
      threads 2, 2
      bind "tcp://127.0.0.1:#{app.port}"
      #{recipe(app, NEWEST_PUMA)}
    RUBY
    app.start("puma", "-C", "config/puma.rb", "config.ru")
    worker = app.booted(1).first
    latencies = Queue.new
    stop = false
    client = Thread.new do
      20_000.times do # bounded: at most 20,000 requests, one every 5 ms or so
        break if stop

        t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        app.get
        latencies << [t, Process.clock_gettime(Process::CLOCK_MONOTONIC) - t]
        sleep 0.005
      end
    end
    sleep 0.5 # the loop's own pace first
    signals = []
    dumps = Array.new(10) do
      signals << Process.clock_gettime(Process::CLOCK_MONOTONIC)
      path = app.dump_of(worker)
      sleep 0.2
      path
    end
    stop = true
    client.join(30)
    dumps.each do |path|
      d = PtmallocDump.load(path)
      expect(d.verify.ok?).to be(true), d.verify.differences.join("\n")
      expect_valid_dump(d)
    end
    samples = Array.new(latencies.size) { latencies.pop }
    ms = samples.map { |_, l| l * 1000 }.sort
    median = ms[ms.size / 2]
    pauses = app.log.scan(/the worker paused ([\d.]+) ms/).flatten.map(&:to_f)
    expect(pauses.size).to eq(10)
    worst = samples.max_by { |_, l| l }
    puts format("%d requests, median %.1f ms, slowest %.1f ms; fork pauses (signal to return) %s ms; " \
                "requests over the largest pause + 50 ms above the median: %d",
                samples.size, median, worst[1] * 1000, pauses.map { |x| x.round(1) }.join(", "),
                ms.count { |l| l > pauses.max + 50 + median })
    signals.each_with_index do |t, i|
      # the requests running while the worker may have paused: sent before the handler returned
      near = samples.select { |s0, l| s0 <= t + pauses[i] / 1000 + 0.05 && s0 + l >= t }.map { |_, l| l * 1000 }
      puts format("  signal %2d: pause %5.1f ms; %d request(s) in flight, slowest %.1f ms (median + pause + 50 ms = %.1f)",
                  i + 1, pauses[i], near.size, near.max || 0, median + pauses[i] + 50)
    end
  end
end
