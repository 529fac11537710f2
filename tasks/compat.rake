# frozen_string_literal: true

require "fileutils"
require "json"
require "open3"
require "tempfile"
require "time"

# `rake compat`: the whole suite (`bundle exec rake unit spec`, the README's test command but the
# linters) inside Debian releases built with debootstrap, each with and without libc's debug symbols,
# sid once more with a newer Ruby from experimental (PTMALLOC_DUMP_COMPAT_RUBY), and bookworm for arm64
# run through qemu-user (PTMALLOC_DUMP_COMPAT_ARCH=arm64). `rake compat:smoke`: the same rows, each with the specs of what a
# capture change can break (SMOKE_SPECS, 20 heap shapes). The chroots are kept in a directory of your
# choice and reused; the results go to tmp/compat/results.md (smoke.md), one log per run to
# tmp/compat/logs/.
# (This file is loaded by the Rakefile inside the chroots too: it must stay valid Ruby 2.7.)
module Compat
  RELEASES = %w[bullseye bookworm trixie sid].freeze # glibc 2.31, 2.36, 2.41 and the newest
  VARIANTS = %w[with without].freeze                 # libc6-dbg installed or removed
  # Rubies newer than sid's own, from Debian's experimental suite: PTMALLOC_DUMP_COMPAT_RUBY=3.4 adds a
  # sid chroot with ruby3.4 as its `ruby` (bin/setup installs it there when the variable is set).
  EXTRA_RUBIES = %w[3.4].freeze
  EXTRA_RUBY_RELEASE = "sid"
  # Other architectures, run through qemu-user-static and binfmt_misc (which the task registers):
  # PTMALLOC_DUMP_COMPAT_ARCH=arm64 adds a bookworm chroot for arm64 (PTMALLOC_DUMP_COMPAT_ARCH_RELEASES
  # names others: trixie for glibc 2.41). What qemu-user cannot do (ptrace, so gdb and dumps of another
  # process) its specs mark pending, with the reason.
  EXTRA_ARCHES = { "arm64" => "aarch64" }.freeze # Debian's name => qemu's
  EXTRA_ARCH_RELEASES = %w[bookworm].freeze
  MIRROR = ENV.fetch("PTMALLOC_DUMP_COMPAT_MIRROR", "http://deb.debian.org/debian")
  # What `rake compat:smoke` runs: the capture (the walk against glibc's counters, in process, forked
  # and from outside, and 20 heap shapes against gdb), the Ruby pass and its allocations, owners, RSS,
  # the object graph, allocation sites and the allocation tracker, the API, and a core written at a crash; minutes where the whole
  # suite takes half an hour.
  SMOKE_SPECS = %w[spec/zero_alloc_spec.rb spec/api_spec.rb spec/rss_spec.rb spec/owners_spec.rb spec/ruby_heap_spec.rb
                   spec/ruby_layer_spec.rb spec/code_owners_spec.rb spec/snapshot_spec.rb spec/outside_spec.rb
                   spec/dump_engine_spec.rb spec/locate_spec.rb spec/heap_shapes_spec.rb spec/retainers_spec.rb
                   spec/allocation_sites_spec.rb spec/tracker_spec.rb spec/crash_core_spec.rb].freeze
  SMOKE_SHAPES = 20
  ROOT = File.expand_path("..", __dir__)
  OUT = File.join(ROOT, "tmp", "compat")
  SRC = "src" # where the work tree goes, under the chroot's /
  INSIDE = "/#{SRC}/script/compat/inside.sh"
  MOUNTS = %w[proc dev dev/pts sys].freeze
  CHROOT_ENV = %w[HOME=/root LANG=C.UTF-8 TERM=dumb
                  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin].freeze

  class Error < StandardError; end

  module_function

  # smoke: SMOKE_SPECS alone, else the whole suite
  def run(dir, smoke: false)
    check_host!
    chroots = releases.map { |name| Chroot.new(dir, name) }
    chroots += rubies.map { |ruby| Chroot.new(dir, EXTRA_RUBY_RELEASE, ruby: ruby) }
    chroots += arches.product(arch_releases).map { |arch, release| Chroot.new(dir, release, arch: arch) }
    report(chroots.flat_map { |chroot| run_release(chroot, smoke) }, smoke)
  end

  # The runs of one release; if its chroot cannot be made, they are recorded as failed and the
  # next release goes on.
  def run_release(chroot, smoke)
    chroot.create unless chroot.exist?
    chroot.configure
    chroot.mounted do
      chroot.copy_tree(ROOT)
      chroot.provision
      variants.map { |variant| Run.new(chroot, variant, smoke: smoke).call }
    end
  rescue Error => e
    warn "rake compat: #{e.message}"
    variants.map { |variant| Run.new(chroot, variant, smoke: smoke).not_run }
  end

  def check_host!
    raise Error, "debootstrap is missing: apt-get install debootstrap" unless debootstrap?
    raise Error, "it must run as root (debootstrap, chroot and mounts need it)" unless Process.uid.zero?

    arches.each { |arch| register_binfmt!(EXTRA_ARCHES.fetch(arch)) }
  end

  # qemu-user for `cpu` registered with binfmt_misc, so that the chroot's programs run here; the
  # interpreter is opened when registered (flag F), so it need not be inside the chroot.
  def register_binfmt!(cpu)
    unless File.executable?("/usr/bin/qemu-#{cpu}-static") && File.executable?("/usr/sbin/update-binfmts")
      raise Error, "qemu-user for #{cpu} is missing: apt-get install qemu-user-static binfmt-support"
    end

    misc = "/proc/sys/fs/binfmt_misc"
    unless File.exist?(File.join(misc, "status")) || system("mount", "-t", "binfmt_misc", "binfmt_misc", misc)
      raise Error, "cannot mount binfmt_misc on #{misc}"
    end
    return if File.exist?(File.join(misc, "qemu-#{cpu}"))
    return if system("update-binfmts", "--enable", "qemu-#{cpu}") && File.exist?(File.join(misc, "qemu-#{cpu}"))

    raise Error, "update-binfmts --enable qemu-#{cpu} failed: #{cpu} programs cannot run here"
  end

  def debootstrap?
    (ENV.fetch("PATH", "").split(File::PATH_SEPARATOR) | %w[/usr/sbin /sbin]).any? do |dir|
      File.executable?(File.join(dir, "debootstrap"))
    end
  end

  def report(results, smoke)
    puts Table.write(smoke), "(#{Table.path(smoke)}; logs in #{File.join(OUT, 'logs')})"
    failed = results.reject { |r| r["ok"] }
    return if failed.empty?

    raise Error, "#{failed.size} of #{results.size} runs failed: #{failed.map { |r| r['log'] }.join(', ')}"
  end

  def default_dir
    ENV.fetch("PTMALLOC_DUMP_COMPAT_DIR", File.join(OUT, "roots"))
  end

  def releases
    list("PTMALLOC_DUMP_COMPAT_RELEASES", RELEASES)
  end

  # Extra Rubies asked for; none unless PTMALLOC_DUMP_COMPAT_RUBY names them.
  def rubies
    ENV["PTMALLOC_DUMP_COMPAT_RUBY"].to_s.empty? ? [] : list("PTMALLOC_DUMP_COMPAT_RUBY", EXTRA_RUBIES)
  end

  def variants
    list("PTMALLOC_DUMP_COMPAT_LIBC6_DBG", VARIANTS)
  end

  # Extra architectures asked for; none unless PTMALLOC_DUMP_COMPAT_ARCH names them.
  def arches
    ENV["PTMALLOC_DUMP_COMPAT_ARCH"].to_s.empty? ? [] : list("PTMALLOC_DUMP_COMPAT_ARCH", EXTRA_ARCHES.keys)
  end

  # The releases those architectures run; bookworm unless PTMALLOC_DUMP_COMPAT_ARCH_RELEASES names others.
  def arch_releases
    list("PTMALLOC_DUMP_COMPAT_ARCH_RELEASES", RELEASES, default: EXTRA_ARCH_RELEASES)
  end

  def list(name, known, default: known)
    chosen = ENV.fetch(name, default.join(" ")).split(/[\s,]+/)
    unknown = chosen - known
    raise Error, "#{name}: unknown #{unknown.join(', ')} (known: #{known.join(', ')})" unless unknown.empty?

    chosen
  end

  def log_path(name)
    File.join(OUT, "logs", "#{name}.log")
  end

  # Runs a command with its output appended to `log`; true when it succeeded.
  def logged(log, *cmd)
    FileUtils.mkdir_p(File.dirname(log))
    File.open(log, "a") { |f| f.puts "$ #{cmd.join(' ')}" }
    system(*cmd, %i[out err] => [log, "a"])
  end

  def tail(log, lines = 20)
    File.exist?(log) ? File.readlines(log).last(lines).join : ""
  end

  # Mount points at or under `path` (from this process's mountinfo), deepest first.
  def mounts_under(path)
    path = File.realpath(path) if File.exist?(path)
    File.readlines("/proc/self/mountinfo")
        .map { |line| line.split[4].gsub(/\\(\d{3})/) { Regexp.last_match(1).to_i(8).chr } }
        .select { |point| point == path || point.start_with?("#{path}/") }
        .sort_by { |point| -point.length }
  end

  def unmount(point)
    return if system("umount", point, err: File::NULL) || system("umount", "--lazy", point)

    warn "rake compat: could not unmount #{point}"
  end

  # Tracked files and untracked ones that are not ignored (what a commit of the tree would hold).
  def tree_files(dir)
    out, status = Open3.capture2("git", "-C", dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    raise Error, "git ls-files failed in #{dir}" unless status.success?

    out.split("\0").uniq.select { |f| File.file?(File.join(dir, f)) || File.symlink?(File.join(dir, f)) }
  end

  # The work tree's commit (and "-dirty" with changes), as it is now.
  def tree_version
    Open3.capture2("git", "-C", ROOT, "describe", "--always", "--dirty").first.strip
  end

  def duration(seconds)
    seconds = seconds.round
    seconds >= 60 ? format("%<m>dm %<s>02ds", m: seconds / 60, s: seconds % 60) : "#{seconds}s"
  end

  # One Debian release's chroot: `dir`/`name`, `dir`/`name`-ruby`ruby` with experimental's Ruby, or
  # `dir`/`name`-`arch` for another architecture.
  class Chroot
    attr_reader :name, :root, :ruby, :arch, :tree

    def initialize(dir, name, ruby: nil, arch: nil)
      @name = name
      @ruby = ruby
      @arch = arch
      @root = File.expand_path(id, dir)
    end

    # The release and the extra Ruby or architecture, if any: names the chroot, its logs and its runs.
    def id
      return "#{name}-ruby#{ruby}" if ruby

      arch ? "#{name}-#{arch}" : name
    end

    def exist?
      File.directory?(root)
    end

    def setup_log
      Compat.log_path("#{id}-setup")
    end

    # debootstrap into `root`.partial, renamed when complete: a broken attempt is never reused.
    def create
      partial = "#{root}.partial"
      remove(partial)
      puts "rake compat: #{id}: debootstrap into #{root} (log: #{setup_log})"
      debootstrap = %w[debootstrap --variant=minbase --components=main --include=ca-certificates]
      debootstrap << "--arch=#{arch}" if arch
      fail_with("debootstrap failed") unless Compat.logged(setup_log, *debootstrap, name, partial, MIRROR)
      File.rename(partial, root)
    end

    # Written afresh before every use: apt's sources (with -updates and -security but for sid), no
    # services started by packages, and the host's name servers and the CAs it added (a proxy's).
    def configure
      write("etc/apt/sources.list", sources)
      # A mirror's Release files may be older than their Valid-Until (a snapshot, a clock ahead); their
      # signatures are still checked.
      write("etc/apt/apt.conf.d/99ptmalloc-dump-compat", %(Acquire::Check-Valid-Until "false";\n))
      write("usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", perm: 0o755)
      write("etc/resolv.conf", File.read("/etc/resolv.conf"))
      write("etc/hosts", File.read("/etc/hosts")) # minbase has none: localhost would not resolve
      Dir["/usr/local/share/ca-certificates/*.crt"].each do |ca|
        write("usr/local/share/ca-certificates/#{File.basename(ca)}", File.read(ca))
      end
    end

    def sources
      return "deb #{MIRROR} sid main\n#{ruby ? "deb #{MIRROR} experimental main\n" : ''}" if name == "sid"

      security = MIRROR.sub(%r{/debian/?\z}, "/debian-security")
      ["deb #{MIRROR} #{name} main", "deb #{MIRROR} #{name}-updates main",
       "deb #{security} #{name}-security main"].join("\n") << "\n"
    end

    # Binds /proc, /dev, /dev/pts and /sys into the chroot for the block, and always unmounts them.
    def mounted
      unmount_all # left over by a run that was killed
      MOUNTS.each do |m|
        fail_with("mount --bind /#{m} failed") unless system("mount", "--bind", "/#{m}", File.join(root, m))
      end
      yield
    ensure
      unmount_all
    end

    # The work tree into /src, afresh; `tree` is the commit it was copied at.
    def copy_tree(from)
      @tree = Compat.tree_version
      dest = src_path
      remove(dest)
      FileUtils.mkdir_p(dest)
      Tempfile.create("compat-files") do |list|
        list.write(Compat.tree_files(from).join("\0"))
        list.flush
        statuses = Open3.pipeline(["tar", "-C", from, "--null", "-T", list.path, "-cf", "-"], ["tar", "-C", dest, "-xf", "-"])
        fail_with("copying the work tree failed") unless statuses.all?(&:success?)
      end
    end

    def provision
      puts "rake compat: #{id}: installing packages (log: #{setup_log})"
      fail_with("installing packages failed") unless inside(setup_log, "provision")
    end

    # Runs script/compat/inside.sh in the chroot with a clean environment; nothing it started stays.
    def inside(log, *args)
      env = CHROOT_ENV + ENV.slice("PTMALLOC_DUMP_COMPAT_TIMEOUT").map { |k, v| "#{k}=#{v}" }
      env << "PTMALLOC_DUMP_COMPAT_RUBY=#{ruby}" if ruby
      Compat.logged(log, "chroot", root, "/usr/bin/env", "-i", *env, "/bin/bash", INSIDE, *args)
    ensure
      end_leftovers(log)
    end

    def src_path(path = nil)
      File.join(*[root, SRC, path].compact)
    end

    private

    # Replaces the file (a symlink in its place too: /etc/resolv.conf often is one).
    def write(path, content, perm: 0o644)
      path = File.join(root, path)
      FileUtils.mkdir_p(File.dirname(path))
      FileUtils.rm_f(path)
      File.write(path, content, perm: perm)
    end

    def unmount_all
      Compat.mounts_under(root).each { |point| Compat.unmount(point) }
    end

    # Ends the processes still running in the chroot (a browser driver a spec left behind), and says so.
    def end_leftovers(log)
      pids = processes_inside
      return if pids.empty?

      message = "rake compat: #{id}: ending what was left running: #{pids.map { |pid| command_line(pid) }.join(', ')}"
      warn message
      File.write(log, "#{message}\n", mode: "a")
      signal_all("TERM", pids)
      sleep 2
      signal_all("KILL", processes_inside & pids)
    end

    def processes_inside
      real = File.realpath(root)
      Dir["/proc/[0-9]*"].select { |dir| proc_link(dir, "root") == real }.map { |dir| File.basename(dir).to_i }
    end

    def proc_link(dir, name)
      File.readlink(File.join(dir, name))
    rescue SystemCallError
      nil
    end

    def command_line(pid)
      "#{pid} #{File.read("/proc/#{pid}/cmdline").tr("\0", ' ').strip}"
    rescue SystemCallError
      pid.to_s
    end

    def signal_all(signal, pids)
      pids.each do |pid|
        Process.kill(signal, pid)
      rescue Errno::ESRCH
        nil
      end
    end

    def remove(path)
      return unless File.exist?(path)
      unless Compat.mounts_under(path).empty?
        raise Error, "#{path} still has mounts: #{Compat.mounts_under(path).join(', ')}"
      end

      fail_with("could not remove #{path}") unless system("rm", "-rf", "--one-file-system", path)
    end

    def fail_with(message)
      raise Error, "#{id}: #{message}; the end of #{setup_log}:\n#{Compat.tail(setup_log)}"
    end
  end

  # One run of the suite (or of SMOKE_SPECS): a release, with or without libc6-dbg. Recorded in
  # tmp/compat/runs/ (smoke-runs/).
  class Run
    OUTPUTS = %w[tmp/compat-facts.json tmp/compat-rspec.json].freeze # written by inside.sh test

    def initialize(chroot, variant, smoke: false)
      @chroot = chroot
      @variant = variant
      @smoke = smoke
    end

    def id
      "#{@chroot.id}-#{@variant}-libc6-dbg#{@smoke ? '-smoke' : ''}"
    end

    def log
      Compat.log_path(id)
    end

    def call
      FileUtils.rm_f([log, *OUTPUTS.map { |f| @chroot.src_path(f) }])
      what = if @smoke
               "rake unit, rspec #{SMOKE_SPECS.size} spec files (SHAPES=#{SMOKE_SHAPES})"
             else
               "bundle exec rake unit spec"
             end
      puts "rake compat: #{@chroot.id}, #{@variant} libc6-dbg: #{what} (log: #{log})"
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      test = @smoke ? ["test-smoke", SMOKE_SHAPES.to_s, *SMOKE_SPECS] : ["test"]
      ok = @chroot.inside(log, "libc6-dbg", @variant) && @chroot.inside(log, *test)
      rspec = read_json("tmp/compat-rspec.json")
      File.write(log.sub(/\.log\z/, ".rspec.json"), JSON.pretty_generate(rspec)) if rspec
      record(ok: ok, seconds: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, log: log,
             facts: read_json("tmp/compat-facts.json"), summary: rspec && rspec["summary"])
    end

    # The chroot could not be made or provisioned: see its setup log.
    def not_run
      record(ok: false, seconds: 0, log: @chroot.setup_log, facts: nil, summary: nil)
    end

    private

    def record(ok:, seconds:, log:, facts:, summary:)
      result = { "release" => @chroot.name, "extra_ruby" => @chroot.ruby, "arch" => @chroot.arch, "libc6_dbg" => @variant,
                 "ok" => ok, "seconds" => seconds.round,
                 "at" => Time.now.utc.iso8601, "tree" => @chroot.tree || Compat.tree_version, "log" => log,
                 "facts" => facts, "summary" => summary }
      path = File.join(OUT, Table.runs_dir(@smoke), "#{id}.json")
      FileUtils.mkdir_p(File.dirname(path))
      File.write(path, JSON.pretty_generate(result))
      result
    end

    def read_json(path)
      JSON.parse(File.read(@chroot.src_path(path)))
    rescue Errno::ENOENT, JSON::ParserError
      nil
    end
  end

  # tmp/compat/results.md (smoke.md): the latest run of every release and variant recorded so far.
  module Table
    HEADER = ["release", "glibc (libc6)", "Ruby", "libc6-dbg", "examples", "failures", "pending",
              "errors outside examples", "duration", "result", "run at (UTC)", "tree"].freeze
    COUNTS = %w[example_count failure_count pending_count errors_outside_of_examples_count].freeze

    module_function

    def path(smoke)
      File.join(OUT, smoke ? "smoke.md" : "results.md")
    end

    def runs_dir(smoke)
      smoke ? "smoke-runs" : "runs"
    end

    def write(smoke)
      lines = [HEADER, HEADER.map { "---" }, *records(smoke).map { |r| row(r) }].map { |cells| "| #{cells.join(' | ')} |\n" }
      File.write(path(smoke), "# rake compat#{smoke ? ':smoke' : ''}\n\n#{lines.join}")
      lines.join
    end

    def records(smoke)
      runs = Dir[File.join(OUT, runs_dir(smoke), "*.json")].map { |f| JSON.parse(File.read(f)) }
      runs.sort_by do |r|
        [r["arch"].to_s, RELEASES.index(r["release"]).to_i, r["extra_ruby"].to_s, VARIANTS.index(r["libc6_dbg"]).to_i]
      end
    end

    def row(run)
      facts = run["facts"] || {}
      counts = (run["summary"] || {}).values_at(*COUNTS).map { |n| n || "?" }
      glibc = facts["glibc"] ? "#{facts['glibc']} (#{facts['libc6']})" : "?"
      release = run["extra_ruby"] ? "#{run['release']} + experimental's ruby#{run['extra_ruby']}" : run["release"]
      release += " on #{run['arch']} (qemu-user)" if run["arch"]
      [release, glibc, facts["ruby"] || "?", run["libc6_dbg"], *counts, Compat.duration(run["seconds"]),
       run["ok"] ? "passed" : "**FAILED**", run["at"].sub("T", " ").delete_suffix("Z"), run["tree"]]
    end
  end
end

desc "Run the suite in Debian bullseye, bookworm, trixie and sid chroots (debootstrap; as root), with and " \
     "without libc6-dbg: rake compat[DIR] keeps the chroots in DIR (or $PTMALLOC_DUMP_COMPAT_DIR, default " \
     "tmp/compat/roots); $PTMALLOC_DUMP_COMPAT_RELEASES and $PTMALLOC_DUMP_COMPAT_LIBC6_DBG (with, without) pick; " \
     "$PTMALLOC_DUMP_COMPAT_RUBY=3.4 adds sid with experimental's Ruby 3.4; $PTMALLOC_DUMP_COMPAT_ARCH=arm64 adds " \
     "bookworm for arm64 through qemu-user ($PTMALLOC_DUMP_COMPAT_ARCH_RELEASES for other releases)"
task :compat, [:dir] do |_t, args|
  Compat.run(args[:dir] || Compat.default_dir)
rescue Compat::Error => e
  abort "rake compat: #{e.message}"
end

namespace :compat do
  desc "The rows of rake compat (same chroots and variables), each running only the specs of what a capture change " \
       "can break: capture, Ruby pass, owners, RSS, outside dumps, API and #{Compat::SMOKE_SHAPES} heap shapes " \
       "(results in tmp/compat/smoke.md)"
  task :smoke, [:dir] do |_t, args|
    Compat.run(args[:dir] || Compat.default_dir, smoke: true)
  rescue Compat::Error => e
    abort "rake compat:smoke: #{e.message}"
  end

  # `rake clean` deletes tmp/ and all in it: never while a chroot there has /proc, /dev or /sys bound.
  task :unmounted do
    busy = Compat.mounts_under(File.join(Compat::ROOT, "tmp"))
    abort "rake clean: refusing, #{busy.join(', ')} mounted under tmp/ (is rake compat running?)" unless busy.empty?
  end
end
task clean: "compat:unmounted"
