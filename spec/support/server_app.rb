# frozen_string_literal: true

require "fileutils"
require "open3"
require "socket"
require "timeout"
require "bundler"

# A throwaway application in a temporary directory, with its own Gemfile pointing at this checkout by
# path, whose server comes from RubyGems. The gems go to vendor/server_gems of the checkout, shared by
# every app and kept between runs (with each app's Gemfile.lock), so only the first run downloads.
class ServerApp
  ROOT = File.expand_path("../..", __dir__)
  GEMS = File.join(ROOT, "vendor", "server_gems")
  README = File.join(ROOT, "README.md")
  # where the recipes and commands are: README, and the pages it links to
  DOCS = [README, *Dir[File.join(ROOT, "doc", "*.md")].sort].freeze

  attr_reader :dir, :dumps, :port

  # The command line of the block that follows `<!-- command: name -->` in README or doc/, as words,
  # without `$ `.
  def self.command(name)
    block = docs[/<!-- command: #{Regexp.escape(name)} -->\n```\n\$ (.*?)\n```/m, 1]
    raise "neither README.md nor doc/ has the command #{name}" unless block

    block.split
  end

  # The Ruby block of README or doc/ that follows `<!-- recipe: ... name ... -->`, with its dump
  # directory. Each recipe is written once.
  def self.recipe(name, dir)
    blocks = docs.scan(/<!-- recipe: ([^>]*?) -->\n```ruby\n(.*?)```/m).select { |names, _| names.split.include?(name) }
    raise "neither README.md nor doc/ has a recipe for #{name}" if blocks.empty?
    raise "the recipe for #{name} is written #{blocks.size} times" if blocks.size > 1

    blocks.first[1].gsub("/var/tmp/heap", dir)
  end

  def self.docs
    DOCS.map { |f| File.read(f) }.join("\n")
  end

  # The signal the recipe `name` installs its handler for.
  def self.recipe_signal(name)
    recipe(name, "")[/install_signal_handler\("(\w+)"/, 1] || raise("README's recipe #{name} names no signal")
  end

  def self.free_port
    s = TCPServer.new("127.0.0.1", 0)
    s.addr[1]
  ensure
    s&.close
  end

  # @param name [String] the recipe's name, also the Gemfile.lock's key
  # @param gems [Array<String>] Gemfile lines
  def initialize(name, gems)
    @name = name
    @dir = Dir.mktmpdir("ptmd-#{name}")
    @dumps = File.join(@dir, "dumps")
    Dir.mkdir(@dumps)
    @port = self.class.free_port
    @gems = gems
    @pids = []
  end

  # The signal of the recipe this app is named after (an app that is no recipe's has none).
  def recipe_signal
    @recipe_signal ||= self.class.recipe_signal(@name)
  end

  def env
    { "BUNDLE_GEMFILE" => File.join(@dir, "Gemfile"), "BUNDLE_PATH" => GEMS, "BUNDLE_APP_CONFIG" => File.join(@dir, ".bundle"),
      "BUNDLE_FROZEN" => nil, "BUNDLE_DEPLOYMENT" => nil, "BUNDLE_WITHOUT" => nil, "RUBYOPT" => nil, "RUBYLIB" => nil,
      "BUNDLER_SETUP" => nil, "BUNDLE_BIN_PATH" => nil }
  end

  def write(file, text)
    path = File.join(@dir, file)
    FileUtils.mkdir_p(File.dirname(path))
    File.write(path, text)
  end

  # bundle install into the shared directory; fails saying what to install when it cannot.
  def bundle!
    write("Gemfile", ["source \"https://rubygems.org\"", *@gems, "gem \"ptmalloc_dump\", path: #{ROOT.inspect}", ""].join("\n"))
    lock = File.join(GEMS, "locks", "#{@name}.lock")
    FileUtils.cp(lock, File.join(@dir, "Gemfile.lock")) if File.exist?(lock)
    out, status = Bundler.with_unbundled_env do
      Open3.capture2e(env, "bundle", "install", "--quiet", chdir: @dir)
    end
    unless status.success?
      raise "#{@gems.join(', ')} could not be installed from RubyGems into #{GEMS}: install it by hand " \
            "(cd to an app with that Gemfile; BUNDLE_PATH=#{GEMS} bundle install) or give this machine access " \
            "to rubygems.org. bundle install said:\n#{out}"
    end
    FileUtils.mkdir_p(File.dirname(lock))
    FileUtils.cp(File.join(@dir, "Gemfile.lock"), lock)
  end

  # Starts `bundle exec *command` in the app, its output to log; returns the pid.
  def start(*command, extra_env: {})
    @log = File.join(@dir, "server.log")
    pid = Bundler.with_unbundled_env do
      Process.spawn(env.merge(extra_env), "bundle", "exec", *command, chdir: @dir, out: @log, err: %i[child out],
                                                                      pgroup: true)
    end
    @pids << pid
    pid
  end

  def log
    File.exist?(@log.to_s) ? File.read(@log) : ""
  end

  # Pids the app's boot hooks wrote to booted/ (one file per booted worker), waiting for `count`.
  def booted(count, timeout: 60)
    dir = File.join(@dir, "booted")
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      pids = Dir.exist?(dir) ? Dir.children(dir).map(&:to_i) : []
      return pids if pids.size >= count
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "#{count} worker(s) did not boot in #{timeout} s; the server's log:\n#{log}"
      end
      raise "the server exited; its log:\n#{log}" if @pids.any? { |p| Process.wait(p, Process::WNOHANG) }

      sleep 0.1
    end
  end

  # The line a boot hook adds after the recipe, so that the spec knows the worker booted.
  def booted_marker
    %(File.write(File.join(#{File.join(@dir, 'booted').inspect}.tap { |d| Dir.mkdir(d) rescue nil }, Process.pid.to_s), ""))
  end

  # Sends `signal` (the recipe's by default) to pid and waits for a dump of that pid to appear
  # (renamed into place complete).
  def dump_of(pid, signal: recipe_signal, timeout: 60)
    before = Dir.children(@dumps)
    Process.kill(signal, pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      fresh = Dir.children(@dumps) - before
      done = fresh.find { |f| f.start_with?("ptmalloc-#{pid}-") && f.end_with?(".dump") }
      return File.join(@dumps, done) if done
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "no dump of #{pid} in #{timeout} s; the server's log:\n#{log}"
      end

      sleep 0.05
    end
  end

  def get(path = "/")
    Timeout.timeout(10) do
      TCPSocket.open("127.0.0.1", @port) do |s|
        s.write("GET #{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        s.read
      end
    end
  end

  # Stops every process started (their process groups), then removes the app.
  def stop
    @pids.dup.each { |pid| stop_process(pid) }
    FileUtils.rm_rf(@dir)
  end

  # Stops one process started (its process group), waiting for it.
  def stop_process(pid)
    @pids.delete(pid)
    begin
      Process.kill("TERM", -pid)
    rescue Errno::ESRCH
      return
    end
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    until Process.wait(pid, Process::WNOHANG)
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        Process.kill("KILL", -pid) rescue nil # rubocop:disable Style/RescueModifier
        Process.wait(pid)
        break
      end
      sleep 0.05
    end
  rescue Errno::ECHILD
    nil
  end
end
