# frozen_string_literal: true

require "json"
require "open3"
require "spec_helper"

# The allocation tracker (ptmalloc-dump --track), against what the programs know: the addresses malloc
# returned to them, the functions and lines that asked, and glibc's own counters.
RSpec.describe "ptmalloc-dump --track" do
  dump_exe = File.join(SpecHelpers::ROOT, "exe", "ptmalloc-dump")

  # Runs Ruby code from a file under ptmalloc-dump --track, with the tree's gem and tmpdir as its first
  # argument: its stdout's last line as JSON.
  define_method(:track_ruby) do |code, bytes: nil, env: {}, timeout: 600|
    file = File.join(tmpdir, "tracked.rb")
    File.write(file, code)
    rate = bytes ? ["--track-bytes", bytes.to_s] : []
    out, err, status = run_command(env, RbConfig.ruby, "-I", SpecHelpers::LIB, dump_exe, "--track", *rate, "--",
                                   RbConfig.ruby, "-I", SpecHelpers::LIB, file, tmpdir, timeout: timeout)
    expect(status).to be_success, "#{err}\n#{out}"
    JSON.parse(out.lines.last, symbolize_names: true)
  end

  # The C extension of spec/fixtures/ext/track_fixture.c (TrackFixture), built for this Ruby.
  def fixture_code
    headers = %w[rubyhdrdir rubyarchhdrdir].map { |k| "-I#{RbConfig::CONFIG[k]}" }
    path = build_fixture("track_fixture", extra_flags: [*headers, "-fno-ipa-icf", "-lpthread"])
    "require \"json\"\nrequire \"ptmalloc_dump\"\nrequire #{path.inspect}\n"
  end

  # a seeded sampler one block in about 64 KiB: repeatable, and enough samples for 25% to be many
  # standard errors
  sampling = { bytes: 65_536, env: { "PTMALLOC_DUMP_TRACK_SEED" => "20261127" } }

  it "names the seed article's leak at its Ruby line, with its leaked bytes within 25%" do
    facts = track_ruby(<<~RUBY, **sampling)
      require "fiddle"
      require "json"
      require "ptmalloc_dump"
      LINE = __LINE__ + 4
      # the addresses go to a file as text: an Integer holding one would be a reference to its block
      def leak(path)
        kept = []
        100_000.times { |i| p = Fiddle.malloc(1024); i.even? ? kept << p : Fiddle.free(p) }
        File.write(path, kept.join(","))
        nil # forgotten: half the blocks leak
      end
      leak(File.join(ARGV[0], "leaked"))
      path = File.join(ARGV[0], "leak.dump")
      PtmallocDump.dump(path, references: true, gc: true)
      File.write(File.join(ARGV[0], "smaps"), File.read("/proc/self/smaps"))
      puts JSON.generate(path: path, file: __FILE__, line: LINE)
    RUBY
    dump = PtmallocDump.load(facts[:path])
    # the truth: the chunks at the addresses Fiddle.malloc returned and the script forgot
    leaked = File.read(File.join(tmpdir, "leaked")).split(",").map { |a| Integer(a) }
    chunks = leaked.map { |a| dump.chunk_containing(a) }
    truth = chunks.sum(&:size)
    expect(leaked.size).to eq(50_000)
    expect(chunks.map(&:address)).to eq(leaked.map { |a| a - 16 })
    expect(dump.malloc_sites?).to be(true)
    site = dump.allocation_sites(limit: 1).first
    # Ruby 2.7's rb_profile_frames gives no C method's frame: the site's method is then the line's own
    called = RUBY_VERSION >= "3.0" ? "Fiddle.malloc" : "Object#leak"
    expect(site).to include(site: "#{facts[:file]}:#{facts[:line]}", method: called, kind: :ruby,
                            source: :malloc, estimated: true)
    expect(site[:leaked_bytes]).to be_within(truth * 0.25).of(truth)
    expect(site[:count]).to be_within(50_000 * 0.25).of(50_000)
    expect(site[:frames][0]).to eq("(C) in Fiddle.malloc") if RUBY_VERSION >= "3.0"
    line = Regexp.escape("#{facts[:file]}:#{facts[:line]}")
    expect(site[:frames]).to include(a_string_matching(/\A#{line} in .*leak\z/))
    expect(site[:native_site]).to start_with("fiddle.so")
    # a forgotten block's chunk names the same site where the tracker sampled it
    sampled = leaked.find { |a| dump.allocation_site_of(a) }
    expect(dump.allocation_site_of(sampled)).to include(site: site[:site], method: called)
    expect(dump.allocation_tracking).to include(mean_bytes: 65_536, dropped: 0)
    expect(dump.allocation_tracking[:flags]).to include(:ruby)
    # the tracker's own tables are their own RSS part: the mappings they make up (adjacent ones merge
    # into one), resident as the kernel's smaps says, read by the child right after the dump
    regions = dump.allocation_tracking[:regions]
    vmas = File.read(File.join(tmpdir, "smaps")).split(/^(?=\h+-\h+ )/).map do |vma|
      start, stop = vma[/\A\h+-\h+/].split("-").map { |x| x.to_i(16) }
      [start, stop, vma[/^Rss:\s+(\d+) kB/, 1].to_i * 1024]
    end
    tracker = vmas.select do |start, stop, _|
      regions.sum { |r| [[stop, r[:start] + r[:length]].min - [start, r[:start]].max, 0].max } == stop - start
    end
    expect(tracker.sum { |start, stop, _| stop - start }).to eq(regions.sum { |r| r[:length] })
    expect(dump.rss[:allocation_tracking]).to eq(regions.sum { |r| r[:resident] })
    expect(dump.rss[:allocation_tracking]).to be_within(64 * 1024).of(tracker.sum(&:last))
    expect(dump.rss[:total]).to eq(dump.rss.values_at(*PtmallocDump::Report::RSS_PARTS.keys).sum)
  end

  it "names each of a C extension's two allocating functions, and with every byte sampled counts each block" do
    # every block sampled: a child without Bundler, whose start alone has tens of thousands of stacks
    facts = track_ruby(fixture_code + <<~RUBY, bytes: 1, env: { "RUBYOPT" => nil, "BUNDLE_GEMFILE" => nil })
      LEFT = __LINE__ + 1
      TrackFixture.left(3000, 1000)
      RIGHT = __LINE__ + 1
      TrackFixture.right(2000, 3000)
      path = File.join(ARGV[0], "fixture.dump")
      PtmallocDump.dump(path, references: true)
      File.write(File.join(ARGV[0], "blocks"), [0, 1].map { |side| TrackFixture.blocks(side).join(",") }.join(";"))
      puts JSON.generate(path: path, file: __FILE__, left: LEFT, right: RIGHT)
    RUBY
    dump = PtmallocDump.load(facts[:path])
    blocks = File.read(File.join(tmpdir, "blocks")).split(";").map { |side| side.split(",").map { |a| Integer(a) } }
    expect(dump.allocation_tracking).to include(dropped: 0)
    sites = dump.allocation_sites(limit: 1000)
    { left: 0, right: 1 }.each do |side, i|
      entry = sites.find { |s| s[:site] == "#{facts[:file]}:#{facts[side]}" }
      # the C method the line called; Ruby 2.7's rb_profile_frames gives no C method's frame: the line's own
      called = RUBY_VERSION >= "3.0" ? "TrackFixture.#{side}" : "<main>"
      expect(entry).to include(native_site: "track_fixture.so!#{side}_leaf", method: called, kind: :ruby)
      expect(entry[:native_frames].first(2)).to eq(["track_fixture.so!#{side}_leaf", "track_fixture.so!keep"])
      expect(entry[:frames].first).to eq("(C) in TrackFixture.#{side}") if RUBY_VERSION >= "3.0"
      # every block sampled (mean 1 byte): the site holds exactly the blocks the extension returned,
      # and their chunks' bytes; its static array holds them (anchored), but for a few a stale word in
      # a Ruby object's slot also points at (the scan is conservative: those count as Ruby's)
      chunks = blocks[i].map { |a| dump.chunk_containing(a) }
      expect(chunks.map(&:address)).to eq(blocks[i].map { |a| a - 16 })
      expect(entry[:samples]).to eq(chunks.size)
      expect(entry[:count]).to eq(chunks.size)
      expect(entry[:bytes]).to eq(chunks.sum(&:size))
      expect(entry[:anchored_bytes] + entry[:ruby_owned_bytes]).to eq(entry[:bytes])
      expect(entry[:anchored_bytes]).to be >= entry[:bytes] * 0.99
      expect(entry[:estimated]).to be(false)
    end
  end

  it "keeps tracking in a forked child (a preforked worker), whose dumps name the child's sites" do
    facts = track_ruby(<<~RUBY, **sampling)
      require "json"
      require "ptmalloc_dump"
      PARENT = __LINE__ + 1
      def parents; Array.new(4000) { |i| "p" * (4000 + i % 7) }; end
      CHILD = __LINE__ + 1
      def childs; Array.new(4000) { |i| "c" * (6000 + i % 7) }; end
      kept = parents
      dir = ARGV[0]
      pid = fork do
        mine = childs
        PtmallocDump.dump(File.join(dir, "child.dump"))
        exit!(mine.size + kept.size == 8000 ? 0 : 1)
      end
      Process.wait(pid)
      puts JSON.generate(ok: $?.success?, child_pid: pid, parent_pid: Process.pid, file: __FILE__, parent: PARENT,
                         child: CHILD)
    RUBY
    expect(facts[:ok]).to be(true)
    dump = PtmallocDump.load(File.join(tmpdir, "child.dump"))
    expect(dump.header[:pid]).to eq(facts[:child_pid])
    expect(dump.allocation_tracking).to include(pid: facts[:parent_pid])
    expect(dump.allocation_tracking[:flags]).to include(:forked)
    # a line's entries, one per C method it called (String#* for the strings, Class#new for their Array)
    sites = dump.allocation_sites(limit: 1000).group_by { |s| s[:site] }
    { parent: 4000 * 4017, child: 4000 * 6017 }.each do |side, bytes|
      owned = sites.fetch("#{facts[:file]}:#{facts[side]}").sum { |s| s[:ruby_owned_bytes] }
      expect(owned).to be_within(bytes * 0.3).of(bytes)
    end
  end

  it "names the site that grew between two dumps (Diff#allocation_sites, --diff)" do
    facts = track_ruby(<<~RUBY, **sampling)
      require "json"
      require "ptmalloc_dump"
      dir = ARGV[0]
      PtmallocDump.dump(File.join(dir, "before.dump"))
      GROW = __LINE__ + 1
      grown = Array.new(2500) { |i| "g" * (4000 + i % 9) }
      PtmallocDump.dump(File.join(dir, "after.dump"))
      puts JSON.generate(file: __FILE__, line: GROW, kept: grown.size)
    RUBY
    before, after = %w[before after].map { |n| PtmallocDump.load(File.join(tmpdir, "#{n}.dump")) }
    grew = PtmallocDump::Diff.new(before, after).allocation_sites(limit: 1).first
    expect(grew).to include(site: "#{facts[:file]}:#{facts[:line]}", estimated: true)
    expect(grew[:growth_bytes]).to be_within(2500 * 4021 * 0.3).of(2500 * 4021)
    out, err, status = run_command({}, RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--diff",
                                   before.path, after.path, File.join(tmpdir, "diff"))
    expect(status).to be_success, err + out
    expect(File.read(File.join(tmpdir, "diff", "index.html"))).to include("#{facts[:file]}:#{facts[:line]}")
  end

  it "reads a tracked process from outside: ptmalloc-dump --pid names its sites", :ptrace do
    file = File.join(tmpdir, "target.rb")
    File.write(file, <<~RUBY)
      def strings; Array.new(5000) { |i| "z" * (3000 + i % 5) }; end
      keep = strings
      $stdout.puts("ready")
      $stdout.flush
      $stdin.read # until the spec closes it
      keep.size
    RUBY
    env = sampling[:env].merge("PTMALLOC_DUMP_TRACK_BYTES" => sampling[:bytes].to_s)
    Open3.popen2(env, RbConfig.ruby, "-I", SpecHelpers::LIB, dump_exe, "--track", "--", RbConfig.ruby,
                 file) do |i, o, t|
      expect(o.gets).to eq("ready\n")
      # the command line's process traces it (this one, its parent, would see the ptrace stops too)
      _out, err, status = run_command({}, RbConfig.ruby, "-I", SpecHelpers::LIB, dump_exe, "--pid", t.pid.to_s,
                                      File.join(tmpdir, "outside.dump"))
      expect(status).to be_success, err
      i.close
      expect(t.value).to be_success
    end
    dump = PtmallocDump.load(File.join(tmpdir, "outside.dump"))
    expect(dump.header[:source]).to eq(:pid)
    site = dump.allocation_sites(limit: 100).find { |s| s[:site] == "#{file}:1" }
    expect(site).to include(kind: :ruby, native_site: a_string_ending_with("!rb_str_times"))
    expect(site[:bytes]).to be_within(5000 * 3017 * 0.3).of(5000 * 3017)
  end

  it "survives four threads hammering malloc, calloc, realloc and free: every dump reproduces glibc's counters" do
    stats = track_ruby(fixture_code + <<~RUBY, bytes: 4096, timeout: 900)
      TrackFixture.hammer_start(4)
      sleep 0.01 until TrackFixture.hammer_ops > 100_000
      arena_anomalies = []
      sampled = []
      40.times do |i|
        path = File.join(ARGV[0], "hammer.dump")
        PtmallocDump.dump(path, fork: i.odd?, wait: true)
        d = PtmallocDump.load(path)
        arena_anomalies.concat(d.verify.arena_anomalies.map(&:to_s))
        sampled << d.allocation_tracking[:samples]
      end
      TrackFixture.hammer_stop
      total = TrackFixture.hammer_ops
      # with the threads stopped, one last dump of a heap at rest
      path = File.join(ARGV[0], "rest.dump")
      PtmallocDump.dump(path)
      puts JSON.generate(ops: total, arena_anomalies: arena_anomalies, sampled: sampled, rest: path)
    RUBY
    expect(stats[:ops]).to be > 1_000_000
    expect(stats[:arena_anomalies]).to eq([])
    expect(stats[:sampled].min).to be > 0
    rest = PtmallocDump.load(stats[:rest])
    expect_valid_dump(rest)
    expect(rest.allocation_tracking[:sampled]).to be > 10_000
  end

  it "refuses a command it cannot track, and runs nothing of it" do
    marker = File.join(tmpdir, "ran")
    src = File.join(tmpdir, "static.c")
    File.write(src, "#include <stdio.h>\nint main(int c, char **v) { FILE *f = fopen(v[1], \"w\"); return !f; }\n")
    static = File.join(tmpdir, "static")
    _o, e, s = Open3.capture3("cc", "-static", "-o", static, src)
    expect(s).to be_success, e
    track = ->(*cmd, env: {}) { run_command(env, RbConfig.ruby, "-I", SpecHelpers::LIB, dump_exe, "--track", "--", *cmd) }
    multiarch = "/usr/lib/#{RbConfig::CONFIG['arch']}" # Debian's: x86_64-linux-gnu, aarch64-linux-gnu
    _out, err, status = track.call(static, marker)
    expect(status.exitstatus).to eq(1)
    expect(err).to eq("ptmalloc-dump: cannot track #{static}: #{static} is statically linked: LD_PRELOAD cannot " \
                      "reach its malloc\n")
    _out, err, status = track.call("ruby", "-e", "File.write(#{marker.inspect}, 1)",
                                   env: { "LD_PRELOAD" => "#{multiarch}/libjemalloc.so.2" })
    expect(status.exitstatus).to eq(1)
    expect(err).to include("LD_PRELOAD holds #{multiarch}/libjemalloc.so.2: the command's malloc " \
                           "would be that, not glibc's")
    _out, err, status = track.call("no-such-command-here")
    expect([status.exitstatus, err]).to eq([1, "ptmalloc-dump: cannot track no-such-command-here: " \
                                               "no-such-command-here: command not found\n"])
    expect(File.exist?(marker)).to be(false)
    # where the check cannot see it (a library the program loads itself), the tracker stops the
    # program before its main: jemalloc ahead of it in LD_PRELOAD
    jemalloc = Dir["#{multiarch}/libjemalloc.so.*"].first
    expect(jemalloc).not_to be_nil, "libjemalloc2 is installed by bin/setup"
    _out, err, status = run_command({ "LD_PRELOAD" => "#{jemalloc}:#{PtmallocDump::Tracker.path}",
                                      "PTMALLOC_DUMP_TRACK_STRICT" => "1" },
                                    RbConfig.ruby, "-e", "File.write(#{marker.inspect}, 1)")
    expect(status.exitstatus).to eq(127)
    expect(err).to eq("ptmalloc-dump --track: malloc here is not glibc's, it comes from #{jemalloc}\n")
    expect(File.exist?(marker)).to be(false)
  end

  it "says why a dump has no malloc sites" do
    dump = dump_and_load("plain.dump")
    expect(dump.malloc_sites?).to be(false)
    expect(dump.allocation_tracking).to be_nil
    expect { dump.allocation_sites(source: :malloc) }
      .to raise_error(PtmallocDump::NoSitesError, /ptmalloc-dump --track did not run it|nor in a process/)
    expect { dump.allocation_sites(source: :heap) }.to raise_error(ArgumentError, /source: must be one of/)
    out, err, status = run_command({}, RbConfig.ruby, "-I", SpecHelpers::LIB, dump_exe, "--preload-path")
    expect(status).to be_success, err
    expect(out.chomp).to eq(PtmallocDump::Tracker.path)
    expect(File.file?(out.chomp)).to be(true)
  end
end
