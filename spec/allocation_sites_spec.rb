# frozen_string_literal: true

require "json"
require "open3"
require "set"
require "spec_helper"

# Where Ruby memory was allocated, against what the program knows: two methods at known lines keep
# objects whose addresses (ObjectSpace.dump's) the child reports; a site's bytes must be the chunks the
# dump's own attribution gives those objects, summed here independently.
RSpec.describe "Ruby allocation sites" do
  child = <<~RUBY
    require "objspace"
    addr = ->(o) { Integer(JSON.parse(ObjectSpace.dump(o))["address"]) }
    lines = {}
    class Keeper
      def self.strings(n, lines)
        lines[:strings] = __LINE__ + 1
        Array.new(n) { |i| ("s" * 1500) + i.to_s }
      end

      def tables(n, lines)
        lines[:tables] = __LINE__ + 1
        Array.new(n) { |i| { i => i, -i => i } }.each { |h| 20.times { |k| h[k] = k } }
      end
    end
    every, seed, path = ARGV.fetch(0).split(",")
    # Ruby's own tracer says which live objects each line allocated
    ObjectSpace.trace_object_allocations_start
    PtmallocDump.trace_allocations(every: Integer(every), seed: Integer(seed))
    strings = Keeper.strings(3000, lines)
    tables = Keeper.new.tables(2000, lines)
    GC.start
    GC.disable
    PtmallocDump.dump(path)
    PtmallocDump.stop_allocation_tracing
    by_line = Hash.new { |h, k| h[k] = [] }
    # listed first, then asked about: Ruby 2.7's each_object also visits the pages filled while it runs,
    # here with the Strings the questions make (allocated at this file's lines), without end
    ObjectSpace.each_object.to_a.each do |o|
      by_line[ObjectSpace.allocation_sourceline(o)] << addr.(o) if ObjectSpace.allocation_sourcefile(o) == __FILE__
    end
    puts JSON.generate(lines: lines, file: __FILE__, strings: by_line[lines[:strings]],
                       tables: by_line[lines[:tables]], kept: [strings.size, tables.size])
  RUBY

  def run_child(code, every, seed, name)
    path = File.join(tmpdir, name)
    file = File.join(tmpdir, "child.rb")
    File.write(file, "require 'json'\n#{code}")
    out, err, status = run_ruby("ARGV.replace([#{[every, seed, path].join(',').inspect}]); load #{file.inspect}")
    expect(status).to be_success, err
    [PtmallocDump.load(path), JSON.parse(out, symbolize_names: true)]
  end

  # runs `code` from a file in tmpdir with tmpdir as its argument: the file and its last line's JSON
  def run_script(name, code)
    file = File.join(tmpdir, name)
    File.write(file, code)
    out, err, status = run_ruby("ARGV.replace([#{tmpdir.inspect}]); load #{file.inspect}")
    expect(status).to be_success, err
    [file, JSON.parse(out.lines.last, symbolize_names: true)]
  end

  # bytes of the chunks the dump gives to each of the objects at `addresses`
  def owned_bytes(dump, addresses)
    wanted = addresses.to_set
    dump.each_chunk.sum { |c| wanted.include?(dump.ruby.owner_of(c)&.address) ? c.size : 0 }
  end

  def site(dump, file, line)
    dump.allocation_sites(limit: 1000).find { |s| s[:site] == "#{file}:#{line}" }
  end

  it "gives each site of every object the chunks its objects own, at its line and method" do
    dump, facts = run_child(child, 1, 1, "every1.dump")
    strings = site(dump, facts[:file], facts[:lines][:strings])
    tables = site(dump, facts[:file], facts[:lines][:tables])
    expect(strings).to include(method: "Keeper.strings", kind: :ruby, estimated: false)
    expect(tables).to include(method: "Keeper#tables", kind: :ruby, estimated: false)
    # the objects Ruby's own tracer says each line allocated and are still live are the site's, with
    # the VM's internal objects it does not list (call caches); their chunks are the site's bytes
    { strings => facts[:strings], tables => facts[:tables] }.each do |entry, addresses|
      at_site = dump.traced_objects.select { |_, s| s == entry[:site] }.map(&:first)
      listed, internal = at_site.partition { |a| dump.ruby.object_at(a).type != :T_IMEMO }
      expect(listed.sort).to eq(addresses.sort)
      expect(internal.size).to be <= 4
      expect(entry[:count]).to eq(at_site.size)
      expect(entry[:bytes]).to eq(owned_bytes(dump, at_site))
    end
    expect(facts[:strings].size).to be_between(3001, 3003) # the kept, their Array, a temporary on the stack
    expect(facts[:tables].size).to be_between(2001, 2003)
    expect(strings[:bytes]).to be >= 3000 * 1500
    expect(tables[:bytes]).to be >= 2000 * 22 * 16
    expect(strings[:frames].first).to eq("#{facts[:file]}:#{facts[:lines][:strings]} in Keeper.strings")
    # by class: the Strings' sites, and the Hashes' (the tables)
    by_class = %w[String Hash].to_h { |name| [name, dump.allocation_sites(class_name: name).first] }
    expect(by_class.transform_values { |s| s[:site] }).to eq("String" => strings[:site], "Hash" => tables[:site])
    expect(by_class["String"][:count]).to be_between(3000, 3002) # and a temporary a stack word holds
    expect(by_class["Hash"][:count]).to eq(2000)
    finding = PtmallocDump::Findings.new(dump).all.find { |f| f.topic == :class }
    expect(finding.text).to include(" The largest share was allocated at #{strings[:site]} in Keeper.strings")
    trace = dump.allocation_trace
    expect(trace).to include(every: 1, dropped: 0)
    expect(trace[:sampled]).to eq(trace[:seen])
  end

  it "estimates each site within 30% when it samples one object in eight" do
    exact, facts = run_child(child, 1, 1, "every1.dump")
    sampled, = run_child(child, 8, 12_345, "every8.dump")
    %i[strings tables].each do |name|
      truth = site(exact, facts[:file], facts[:lines][name])
      estimate = site(sampled, facts[:file], facts[:lines][name])
      expect(estimate[:estimated]).to be(true)
      expect(estimate[:bytes]).to be_within(truth[:bytes] * 0.3).of(truth[:bytes])
      expect(estimate[:count]).to be_within(truth[:count] * 0.3).of(truth[:count])
    end
    expect(sampled.allocation_trace[:every]).to eq(8)
  end

  it "keeps tracing in a forked child and in a fork snapshot, and follows objects GC.compact moves" do
    code = <<~'RUBY'
      require "json"
      PARENTS = __LINE__ + 1
      def parents(n); Array.new(n) { |i| "p" * (900 + i % 5) }; end
      CHILDS = __LINE__ + 1
      def childs(n); Array.new(n) { |i| "c" * (700 + i % 5) }; end
      PtmallocDump.trace_allocations(every: 1)
      kept = parents(500)
      dir = ARGV.fetch(0)
      pid = fork do
        mine = childs(400)
        GC.compact if GC.respond_to?(:compact)
        PtmallocDump.dump(File.join(dir, "child.dump"))
        exit!(mine.size == 400 ? 0 : 1)
      end
      Process.wait(pid)
      child_ok = $?.success?
      GC.start # the literals' copies are garbage
      PtmallocDump.dump(File.join(dir, "snapshot.dump"), fork: true, wait: true)
      puts JSON.generate(child_ok: child_ok, tracing: PtmallocDump.allocation_tracing[:tracked] > 0,
                         parents: "#{__FILE__}:#{PARENTS}", childs: "#{__FILE__}:#{CHILDS}", kept: kept.size)
    RUBY
    _file, facts = run_script("forker.rb", code)
    expect(facts).to include(child_ok: true, tracing: true)
    forked = PtmallocDump.load(File.join(tmpdir, "child.dump"))
    sites = forked.allocation_sites.to_h { |e| [e[:site], e] }
    # the parent's objects, traced before the fork, and the child's own, after a compaction moved some
    # 500 Strings and their Array; the VM's caches the line made (a constant cache, and call caches: Ruby
    # keeps one per class and method, made by the first call, here Array.new's and String#*'s unless
    # earlier code called them); and up to two temporaries stack words hold
    expect(sites.fetch(facts[:parents])[:count]).to be_between(501, 507)
    expect(sites.fetch(facts[:childs])[:count]).to be_between(401, 403)
    expect(sites.fetch(facts[:childs])[:bytes]).to be >= 400 * 700
    # every traced object the dump lists is a live object there: none was left at an old address
    expect(forked.traced_objects.map { |a, _| forked.ruby.object_at(a) }).to all(be_truthy)
    snapshot = PtmallocDump.load(File.join(tmpdir, "snapshot.dump"))
    expect(snapshot.allocation_sites.find { |e| e[:site] == facts[:parents] }[:count]).to be_between(501, 507)
  end

  it "says why where it cannot trace or a dump has no sites" do
    dump = dump_and_load("plain.dump")
    expect(dump.allocation_sites?).to be(false)
    expect { dump.allocation_sites }
      .to raise_error(PtmallocDump::NoSitesError, /it was not taken while PtmallocDump.trace_allocations was on/)
    expect { dump.allocation_site_of(0x1000) }.to raise_error(PtmallocDump::NoSitesError)
    no_ruby = dump_and_load("no_ruby.dump", ruby: false)
    expect { no_ruby.allocation_sites }.to raise_error(PtmallocDump::NoSitesError, /no Ruby heap data/)
    expect(PtmallocDump.allocation_tracing).to be_nil
    expect { PtmallocDump.trace_allocations(every: 0) }
      .to raise_error(ArgumentError, "every: must be a positive Integer, not 0")
    expect { PtmallocDump.trace_allocations(seed: "x") }
      .to raise_error(ArgumentError, 'seed: must be an Integer or nil, not "x"')
    PtmallocDump.trace_allocations(every: 16)
    begin
      expect { PtmallocDump.trace_allocations }
        .to raise_error(PtmallocDump::TracingError, "allocation tracing is already on: stop it first")
      expect(PtmallocDump.allocation_tracing).to include(every: 16)
    ensure
      PtmallocDump.stop_allocation_tracing
    end
    expect(PtmallocDump.allocation_tracing).to be_nil
    PtmallocDump.stop_allocation_tracing # stopping twice does nothing
  end

  it "names the sites in --sites, --explain, the text summary and the report" do
    dump, facts = run_child(child, 1, 1, "every1.dump")
    path = File.join(tmpdir, "every1.dump")
    strings = "#{facts[:file]}:#{facts[:lines][:strings]}"
    visualize = ->(*args) { Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, *args) }
    out, err, status = visualize.call("--sites", path)
    expect(status).to be_success, err
    first = dump.allocation_sites.first
    expect(out.lines[1]).to eq("#{PtmallocDump::SiteLines.line(first)}\n")
    expect(out).to include(" objects at #{strings} in Keeper.strings\n")
    json, = visualize.call("--sites", "--json", path)
    expect(JSON.parse(json).map { |s| s["site"] }).to eq(dump.allocation_sites.map { |s| s[:site] })
    # a chunk a traced String owns: its site and the stack that made it
    owned = dump.each_chunk.find do |c|
      (o = dump.ruby.owner_of(c)) && facts[:strings].include?(o.address) && c.size > 1500
    end
    out, = visualize.call("--explain", format("0x%x", owned.address + 16), path)
    expect(out).to match(/^allocated +#{Regexp.escape(strings)} in Keeper\.strings \(its owner, 0x/)
    summary, = visualize.call("--summary", path)
    expect(summary).to include("allocated at     #{PtmallocDump::SiteLines.line(first)}")
    report = File.join(tmpdir, "report")
    _, err, status = visualize.call(path, report)
    expect(status).to be_success, err
    html = File.read(File.join(report, "index.html"))
    expect(html).to include('<h2 id="sites">Where it was allocated</h2>', "<b>#{strings}</b> in Keeper.strings")
    expect(html).to include('aria-label="live bytes by allocating stack"')
    plain, = visualize.call(File.join(tmpdir, "plain.dump").tap { |p| PtmallocDump.dump(p) }, File.join(tmpdir, "r2"))
    expect(plain).to include("wrote")
    expect(File.read(File.join(tmpdir, "r2", "index.html")))
      .to include("Not known for this dump: it was not taken while PtmallocDump.trace_allocations was on")
  end

  it "says which sites grew between two dumps, on the --diff page too" do
    code = <<~'RUBY'
      require "json"
      GROWS = __LINE__ + 1
      def grows(n); Array.new(n) { |i| "g" * (1200 + i % 3) }; end
      NEW = __LINE__ + 1
      def appears(n); Array.new(n) { |i| "n" * (2500 + i % 3) }; end
      PtmallocDump.trace_allocations(every: 1)
      first = grows(300)
      dir = ARGV.fetch(0)
      GC.start
      PtmallocDump.dump(File.join(dir, "old.dump"))
      second = grows(700)
      third = appears(200)
      GC.start
      PtmallocDump.dump(File.join(dir, "new.dump"))
      puts JSON.generate(grows: "#{__FILE__}:#{GROWS}", appears: "#{__FILE__}:#{NEW}",
                         kept: [first, second, third].map(&:size))
    RUBY
    _file, facts = run_script("grower.rb", code)
    old_path = File.join(tmpdir, "old.dump")
    new_path = File.join(tmpdir, "new.dump")
    diff = PtmallocDump::Diff.new(old_path, new_path)
    growth = diff.allocation_sites(limit: 100).to_h { |g| [g[:site], g] }
    before = PtmallocDump.load(old_path).allocation_sites(limit: 100).to_h { |e| [e[:site], e] }
    after = PtmallocDump.load(new_path).allocation_sites(limit: 100).to_h { |e| [e[:site], e] }
    was, now = [before, after].map { |sites| sites.fetch(facts[:grows]) }
    expect(growth.fetch(facts[:grows]))
      .to include(growth_bytes: now[:bytes] - was[:bytes], growth_count: now[:count] - was[:count])
    expect(growth.fetch(facts[:grows])[:growth_bytes]).to be >= 700 * 1200
    expect(growth.fetch(facts[:appears])).to include(growth_bytes: after[facts[:appears]][:bytes])
    expect(diff.allocation_sites(limit: 2).map { |g| g[:site] }).to eq([facts[:grows], facts[:appears]])
    outdir = File.join(tmpdir, "diff")
    _, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--diff", old_path,
                                    new_path, outdir)
    expect(status).to be_success, err
    expect(File.read(File.join(outdir, "index.html")))
      .to include("<h3>Which allocation site grew</h3>",
                  "The site whose live objects grew most: <b>#{facts[:grows]}</b>")
  end
end
