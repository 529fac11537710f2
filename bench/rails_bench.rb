# frozen_string_literal: true

# rake bench: the pause of a real Rails worker. A Rails 7.2 app (Active Record on sqlite3 with 5,000
# posts, a controller and an ERB view, eager loading as in production) runs under clustered Puma
# (2 workers x 3 threads, preload_app!) on 127.0.0.1, with the README's Puma recipe and the bench's
# own handlers in each worker. One worker gets signals, idle and then under load (4 client threads
# requesting pages, bounded in count and time): a bare fork(2) of that worker, the default fork
# snapshot, the snapshot with ruby: false, and the in-process dump with and without the Ruby pass.
# Each pause is the handler's own figure (from the signal's arrival to its return), median of 7.
# The gems come from RubyGems into vendor/server_gems, as the recipe specs' do; where they cannot be
# installed the bench says so and measures nothing.
require "fileutils"
require "ptmalloc_dump"
require_relative "../spec/support/server_app"

module RailsBench
  module_function

  GEMS = [%(gem "rails", "~> 7.2.0"), %(gem "sqlite3", ">= 2.1"), %(gem "puma", "~> 8.0")].freeze
  SIGNALS = 7
  POSTS = 5_000
  CLIENTS = 4
  MAX_REQUESTS = 200_000
  MAX_SECONDS = 300
  # mode => [signal, what the worker's trap does]
  MODES = { bare_fork: "PWR", fork: "URG", fork_no_ruby: "WINCH", inproc: "IO", inproc_no_ruby: "PROF" }.freeze
  LABELS = { bare_fork: "bare fork(2) of the worker", fork: "fork snapshot (the default)",
             fork_no_ruby: "fork snapshot, ruby: false", inproc: "in process (fork: false)",
             inproc_no_ruby: "in process, ruby: false" }.freeze

  def run
    app = ServerApp.new("rails-bench", GEMS)
    begin
      app.bundle!
    rescue RuntimeError => e
      puts "Rails worker: not measured (#{e.message.lines.first.strip})"
      return nil
    end
    write_app(app)
    seed(app)
    app.start("puma", "-C", "config/puma.rb", "config.ru")
    worker = app.booted(2).min
    20.times { app.get("/posts") }
    idle = pauses(app, worker)
    loaded, requests = under_load(app) { pauses(app, worker) }
    report(app, worker, idle, loaded, requests)
  ensure
    app&.stop
  end

  def pauses(app, worker)
    result = MODES.transform_values { [] }
    SIGNALS.times do
      MODES.each do |mode, sig|
        log = app.log
        seen = log.scan(/paused ([\d.]+) ms/).size
        written = log.scan("(walk and write)").size
        Process.kill(sig, worker)
        line = wait_for(app) { app.log.scan(/paused ([\d.]+) ms/)[seen] }
        result[mode] << Float(line.first)
        # the snapshot process's walk and write end before the next signal: it runs on the other core
        wait_for(app) { app.log.scan("(walk and write)").size > written } if %i[fork fork_no_ruby].include?(mode)
        Dir.children(app.dumps).each { |f| File.delete(File.join(app.dumps, f)) if f.end_with?(".dump") }
        sleep 0.2
      end
    end
    result.transform_values { |v| v.sort[v.size / 2] }
  end

  def wait_for(app, timeout: 120)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      value = yield
      return value if value
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "timed out; the server's log:\n#{app.log[-3000..]}"
      end

      sleep 0.02
    end
  end

  # Runs the block while CLIENTS threads request pages from the app; returns its result and what the
  # clients saw: requests served, failed (an error or no answer within 10 s), and the slowest answer.
  def under_load(app)
    stop = false
    seen = { served: 0, failed: 0, slowest: 0.0, errors: [] }
    lock = Mutex.new
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    clients = Array.new(CLIENTS) do |i|
      Thread.new do
        until stop || seen[:served] >= MAX_REQUESTS || Process.clock_gettime(Process::CLOCK_MONOTONIC) - started > MAX_SECONDS
          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          ok = begin
            app.get(i.even? ? "/posts" : "/posts/#{1 + (seen[:served] % POSTS)}").start_with?("HTTP/1.1 200")
          rescue Timeout::Error, SystemCallError, IOError => e
            lock.synchronize { seen[:errors] << e.class.name }
            false
          end
          took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
          lock.synchronize do
            seen[ok ? :served : :failed] += 1
            seen[:slowest] = took if took > seen[:slowest]
          end
        end
      end
    end
    [yield, seen]
  ensure
    stop = true
    clients&.each(&:join)
  end

  def report(app, worker, idle, loaded, requests)
    objects = worker_objects(app, worker)
    puts format("Rails 7.2 worker under Puma 8 (2 workers x 3 threads): %s Ruby objects, RSS %d MiB",
                objects.to_s.reverse.scan(/\d{1,3}/).join(",").reverse, rss_mib(worker))
    puts format("  under load: %d requests served, %d failed%s, the slowest answer %.0f ms", requests[:served],
                requests[:failed], requests[:errors].empty? ? "" : " (#{requests[:errors].tally.map { |k, v| "#{v} #{k}" }.join(', ')})",
                requests[:slowest] * 1000)
    puts format("  %-36s %10s %12s", "pause", "idle", "under load")
    MODES.each_key { |mode| puts format("  %-36s %7.1f ms %9.1f ms", LABELS[mode], idle[mode], loaded[mode]) }
    [["fork snapshot / bare fork", :fork, :bare_fork], ["in process / in process, ruby: false", :inproc, :inproc_no_ruby]]
      .each do |label, a, b|
        puts format("  %-36s %8.2fx %10.2fx", label, idle[a] / idle[b], loaded[a] / loaded[b])
      end
    { idle: idle, loaded: loaded, objects: objects, requests: requests.except(:errors) }
  end

  def worker_objects(app, worker)
    dump = app.dump_of(worker)
    PtmallocDump.load(dump).ruby&.meta&.fetch(:object_count)
  end

  def rss_mib(pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i >> 10
  rescue SystemCallError
    0
  end

  def seed(app)
    app.write("db/seed.rb", <<~RUBY)
      require_relative "../config/environment"
      ActiveRecord::Schema.define do
        create_table :posts, force: true do |t|
          t.string :title
          t.text :body
          t.timestamps
        end
      end
      now = Time.now
      Post.insert_all(Array.new(#{POSTS}) { |i| { title: "Post \#{i}", body: "Body of post \#{i}. " * 20, created_at: now, updated_at: now } })
    RUBY
    out, status = Bundler.with_unbundled_env do
      Open3.capture2e(app.env.merge("RAILS_ENV" => "production"), "bundle", "exec", "ruby", "db/seed.rb", chdir: app.dir)
    end
    raise "seeding the Rails app failed:\n#{out}" unless status.success?
  end

  def write_app(app)
    app.write("config/application.rb", <<~RUBY)
      require "rails"
      require "active_model/railtie"
      require "active_record/railtie"
      require "action_controller/railtie"
      require "action_view/railtie"
      Bundler.require(*Rails.groups)

      module BenchApp
        class Application < Rails::Application
          config.load_defaults 7.2
          config.eager_load = true
          config.secret_key_base = "0" * 64
          config.logger = Logger.new(nil)
          config.hosts.clear
        end
      end
    RUBY
    app.write("config/environment.rb", %(require_relative "application"\nRails.application.initialize!\n))
    app.write("config/database.yml", <<~YAML)
      production:
        adapter: sqlite3
        database: db/production.sqlite3
        pool: 5
        timeout: 5000
    YAML
    app.write("config/routes.rb", %(Rails.application.routes.draw do\n  resources :posts, only: %i[index show]\nend\n))
    app.write("app/models/application_record.rb", %(class ApplicationRecord < ActiveRecord::Base\n  primary_abstract_class\nend\n))
    app.write("app/models/post.rb", <<~RUBY)
      class Post < ApplicationRecord
        validates :title, presence: true
        scope :recent, -> { order(id: :desc) }
        def summary = body.to_s[0, 80]
      end
    RUBY
    app.write("app/controllers/application_controller.rb", %(class ApplicationController < ActionController::Base\nend\n))
    app.write("app/controllers/posts_controller.rb", <<~RUBY)
      class PostsController < ApplicationController
        def index
          @posts = Post.recent.limit(50).to_a
        end

        def show
          render json: Post.find(params[:id])
        end
      end
    RUBY
    app.write("app/views/layouts/application.html.erb", "<!doctype html><html><body><%= yield %></body></html>\n")
    app.write("app/views/posts/index.html.erb", <<~ERB)
      <h1>Posts</h1>
      <ul><% @posts.each do |post| %><li><%= link_to post.title, post_path(post) %>: <%= post.summary %></li><% end %></ul>
    ERB
    app.write("config.ru", %(require_relative "config/environment"\nrun Rails.application\n))
    app.write("config/puma.rb", <<~RUBY)
      workers 2
      threads 3, 3
      bind "tcp://127.0.0.1:#{app.port}"
      environment "production"
      preload_app!
      #{ServerApp.recipe('puma8', app.dumps)}
      before_worker_boot do
        dir = #{app.dumps.inspect}
        PtmallocDump.install_signal_handler("WINCH", dir: dir, ruby: false)
        PtmallocDump.install_signal_handler("IO", dir: dir, fork: false)
        PtmallocDump.install_signal_handler("PROF", dir: dir, fork: false, ruby: false)
        #{bare_fork_trap}
        #{app.booted_marker}
      end
    RUBY
  end

  # The worker's bare fork: fork(2) and nothing else (the child leaves at once through _exit), timed
  # as the dump handler times itself; with the GVL held, as PauseBench#install_bare_fork says why.
  def bare_fork_trap
    <<~RUBY
      require "fiddle"
      bare_fork = Fiddle::Function.new(Fiddle::Handle::DEFAULT["fork"], [], Fiddle::TYPE_INT, need_gvl: true)
      leave = Fiddle::Function.new(Fiddle::Handle::DEFAULT["_exit"], [Fiddle::TYPE_INT], Fiddle::TYPE_VOID, need_gvl: true)
      signo = Signal.list.fetch("PWR")
      Signal.trap("PWR") { arrived = PtmallocDump._signal_arrived_ns(signo); pid = bare_fork.call; leave.call(0) if pid.zero?; $stderr.syswrite(format("bare fork: the worker paused %.1f ms\\n", (Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - arrived) / 1e6)); Process.detach(pid) }
      PtmallocDump._stamp_signal(signo)
    RUBY
  end
end

RailsBench.run if $PROGRAM_NAME == __FILE__
