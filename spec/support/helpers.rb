# frozen_string_literal: true

require "fileutils"
require "open3"
require "rbconfig"

# What every spec shares: the tree's paths, Ruby children, temporary directories, fixtures and the
# structural checks of a dump.
module SpecHelpers
  # An arm64 (or other foreign) system run here through qemu-user: its /proc/cpuinfo is this x86-64
  # machine's, whose entries name a vendor_id, which no arm64 kernel writes.
  def self.qemu_user?
    return @qemu_user unless @qemu_user.nil?

    @qemu_user = RbConfig::CONFIG["host_cpu"] != "x86_64" && File.read("/proc/cpuinfo").match?(/^vendor_id\s*:/)
  end

  ROOT = File.expand_path("../..", __dir__)
  LIB = File.join(ROOT, "lib")
  VISUALIZE = File.join(ROOT, "exe", "ptmalloc-visualize")

  # glibc functions the specs call directly.
  module Libc
    HANDLE = Fiddle::Handle::DEFAULT
    MALLOC_TRIM = Fiddle::Function.new(HANDLE["malloc_trim"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_INT)

    def self.malloc_trim(pad = 0)
      MALLOC_TRIM.call(pad)
    end
  end

  # Anomaly kinds from what other threads change outside any arena lock while a dump runs: their
  # tcaches, and mmapped chunks (made and unmapped while the mapping scan reads them).
  UNLOCKED_KINDS = (PtmallocDump::Verification::TCACHE_KINDS + %i[mmapped_mismatch]).freeze

  # The anomalies outside the arenas that no unlocked change by another thread explains, as text.
  def self.locked_anomalies(verification)
    verification.tcache_anomalies.reject { |a| UNLOCKED_KINDS.include?(a.kind) }.map(&:to_s)
  end

  # Tasks of this process that are not Ruby threads, counted when the suite loads.
  OTHER_TASKS = Dir.children("/proc/self/task").size - Thread.list.size

  # Ruby keeps the native thread of a finished Ruby thread (Open3's reader threads, say) for a few
  # seconds in case a new Ruby thread wants it; then that thread exits and empties its tcache into its
  # arena, concurrently with whatever runs. An example that reproduces glibc's counters exactly waits
  # for those exits first (tagged :quiescent).
  def settle_threads(limit: 5)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + limit
    while Dir.children("/proc/self/task").size > Thread.list.size + OTHER_TASKS
      break if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.02
    end
  end

  def tmpdir
    @tmpdir ||= Dir.mktmpdir("ptmd-spec")
  end

  def self.included(base)
    base.after { FileUtils.rm_rf(@tmpdir) if @tmpdir }
  end

  # Dumps this process and loads the result.
  def dump_and_load(name = "heap.dump", **opts)
    path = File.join(tmpdir, name)
    PtmallocDump.dump(path, **opts)
    PtmallocDump.load(path)
  end

  # Runs Ruby code in a child process with the gem on the load path; returns [stdout, stderr, status].
  # A child that has not ended after `timeout` seconds is killed (a walk that never ends must fail
  # the example, not hang the suite), and the example fails saying so.
  # A child's stderr without Ruby 3.4's notice that a default gem becomes a bundled one (fiddle,
  # which the specs' children load, under Bundler).
  def without_gem_notices(err)
    err.gsub(/^.*warning: \S+ was loaded from the standard library, but will no longer be part of the default gems.*\n(You can add \S+ to your Gemfile or gemspec to silence this warning\.\n)?/, "")
  end

  def run_ruby(code, env: {}, timeout: 600)
    run_command(env, RbConfig.ruby, "-I", LIB, "-rptmalloc_dump", "-e", code, timeout: timeout)
  end

  # Runs a command with the same watchdog: [stdout, stderr, status].
  def run_command(env, *cmd, timeout: 600)
    Open3.popen3(env, *cmd) do |stdin, out, err, wait|
      stdin.close
      readers = [out, err].map { |io| Thread.new { io.read } }
      unless wait.join(timeout)
        Process.kill(:KILL, wait.pid)
        wait.join
        raise "the child process did not end within #{timeout} s (killed); its stderr: #{readers[1].value}"
      end
      [readers[0].value, readers[1].value, wait.value]
    end
  end

  # Shared structural checks every dump must pass.
  def expect_valid_dump(dump)
    expect(dump.header[:format_version]).to eq(1)
    expect(dump.header[:symbol_source]).to eq(:heuristic) if ENV["PTMALLOC_DUMP_EXPECT_SYMBOLS"] == "heuristic"
    expect(dump.header[:main_arena]).to be > 0
    expect(dump.arenas.first).to be_main
    cursor = {}
    dump.each_chunk do |c|
      at = cursor.fetch(c.heap.index, c.heap.start)
      expect(c.address).to eq(at), "chunks of #{c.heap.inspect} must tile it: gap at 0x#{at.to_s(16)}"
      cursor[c.heap.index] = c.end_address
    end
    dump.heaps.each do |heap|
      expect(cursor.fetch(heap.index, heap.start)).to eq(heap.end) unless heap.truncated
    end
    verification = dump.verify
    expect(verification.differences.map(&:to_s)).to eq([])
    expect(verification.anomalies.map(&:to_s)).to eq([])
    # no silent pass: a dump of this process taken without oracles: false was compared with glibc
    expect(verification.compared).not_to be_empty if dump.header[:source] == :self && !dump.header[:oracles_off]
  end

  # Builds a C file from spec/fixtures/ext into a shared object (rebuilt when it or a header there is
  # newer than the object).
  def build_fixture(name, extra_flags: [])
    src = File.join(ROOT, "spec", "fixtures", "ext", "#{name}.c")
    out_dir = File.join(ROOT, "spec", "fixtures", "ext", "build")
    FileUtils.mkdir_p(out_dir)
    out = File.join(out_dir, "#{name}.so")
    inputs = [src, *Dir[File.join(File.dirname(src), "*.h")]]
    unless File.exist?(out) && inputs.all? { |f| File.mtime(out) >= File.mtime(f) }
      cmd = ["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", out, src, *extra_flags]
      _o, e, s = Open3.capture3(*cmd)
      raise "building #{name} failed: #{e}" unless s.success?
    end
    out
  end
end
