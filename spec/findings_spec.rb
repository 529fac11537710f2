# frozen_string_literal: true

require "spec_helper"
require "rexml/document"

# What the first screen leads with (Findings#top) and the advice under it, on heaps of a known shape
# planted in child processes: the blocks a fixture leaked (their addresses written to a file), small
# blocks freed between kept ones, threads each leaving free memory in an arena of its own.
RSpec.describe "findings ranked by what to do" do
  human = ->(n) { PtmallocDump::FormatHelpers.human_bytes(n) }

  def child_dump(code, env = {})
    path = File.join(tmpdir, "child.dump")
    _o, err, status = run_ruby(code, env: env.merge("DUMP" => path))
    expect(status).to be_success, err
    PtmallocDump.load(path)
  end

  def report_html(dump)
    out = File.join(tmpdir, "report")
    FileUtils.mkdir_p(out)
    PtmallocDump::Report.new(dump, out).write
    File.read(File.join(out, "index.html"))
  end

  def explorer_view(dump, heap)
    ex = PtmallocDump::Explorer.new(dump, initial_heap: heap)
    ex.views[ex.initial_view]
  end

  # ~20 MiB of 1 KiB blocks that nothing points at, beside 900,000 Ruby objects whose pages are larger.
  LEAK_WORKLOAD = <<~RUBY
    require "fiddle"
    lib = Fiddle.dlopen(ENV.fetch("FIXTURE"))
    leak = Fiddle::Function.new(lib["ow_leak"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT],
                                Fiddle::TYPE_SIZE_T)
    objects = Array.new(900_000) { Object.new }
    File.open(ENV.fetch("ADDRESSES"), "wb") { |f| leak.call(20_000, 1024, f.fileno) }
    PtmallocDump.dump(ENV.fetch("DUMP"), ruby: ENV["NO_RUBY"].nil?)
    puts objects.size
  RUBY

  def leak_dump(no_ruby: false)
    addresses = File.join(tmpdir, "addresses")
    env = { "FIXTURE" => build_fixture("owners_fixture", extra_flags: ["-lpthread"]), "ADDRESSES" => addresses }
    env["NO_RUBY"] = "1" if no_ruby
    dump = child_dump(LEAK_WORKLOAD, env)
    [dump, File.binread(addresses).unpack("Q*")]
  end

  it "puts a planted leak first, before larger Ruby object pages, with its next step and the advice on it first" do
    dump, planted = leak_dump
    expect(planted.size).to eq(20_000)
    leaked = planted.count { |a| dump.owner_kind_of(a - 16) == :leaked }
    expect(leaked).to be >= 19_000

    findings = PtmallocDump::Findings.new(dump)
    first = findings.top.first
    # Ruby 2.7's and 3.0's object pages are malloc chunks: no RSS part of their own, so no such finding
    pages = findings.all.find { |f| f.topic == :ruby_pages }&.bytes || dump.ruby.summary[:ruby_pages_in_malloc_bytes]
    expect(first).not_to be_nil, findings.all.inspect
    puts "    leak #{human.call(first.bytes)} (#{leaked} planted blocks leaked); Ruby pages #{human.call(pages)}"
    expect(first.topic).to eq(:leaked)
    expect(first.bytes).to be >= leaked * 1040
    expect(pages).to be > first.bytes # larger, and still not ranked above it
    expect(findings.top.map(&:topic)).not_to include(:ruby_pages)
    expect(first.step).to include("ptmalloc-dump --track")
    # the heap it names holds the planted blocks: all, or where the main arena's memory is in several
    # heaps (qemu-user's mmapped regions), more than any other heap
    heap = dump.heaps.find { |h| h.index == first.heap }
    held = dump.heaps.to_h { |h| [h.index, planted.count { |a| a >= h.start && a < h.end }] }
    expect(held[heap.index]).to eq(held.values.max)
    expect(held[heap.index]).to be >= leaked if dump.heaps.one? { |h| h.arena&.main? }
    expect(explorer_view(dump, first.heap)[:heaps]).to include(heap)

    advice = PtmallocDump::Advice.new(dump).lines
    expect(advice.first.topic).to eq(:leak)
    expect(advice.first.figure).to eq(dump.summary[:owners][:leaked][:bytes])

    summary = PtmallocDump::TextSummary.new(dump).to_s
    expect(summary).to include("1. #{first.text}\n   next: #{first.step}")
  end

  it "does not call memory no root reaches leaked in a dump without Ruby's objects, and says how to tell" do
    dump, = leak_dump(no_ruby: true)
    expect(dump.ruby).to be_nil
    findings = PtmallocDump::Findings.new(dump)
    expect(findings.all.map(&:topic)).not_to include(:leaked)
    unknown = findings.all.find { |f| f.topic == :unknown_owners }
    expect(dump.summary[:owners][:leaked][:bytes]).to eq(0)
    expect(unknown.bytes).to eq(dump.summary[:owners][:unknown][:bytes])
    expect(unknown.bytes).to be >= 20_000 * 1024 # the planted blocks, which nothing points at, are among them
    expect(unknown.text).to include("nor whether any of it leaks")
    expect(unknown.step).to include("ruby: true")
    expect(findings.top.first.topic).to eq(:unknown_owners)
    expect(PtmallocDump::Advice.new(dump).lines.map(&:topic)).not_to include(:leak)
  end

  it "fills no slot on a healthy process and says so in one line" do
    dump = child_dump("PtmallocDump.dump(ENV.fetch('DUMP'))")
    findings = PtmallocDump::Findings.new(dump)
    expect(findings.top).to eq([])
    expect(findings.all).not_to be_empty # the figures that only describe are still there
    summary = PtmallocDump::TextSummary.new(dump).to_s
    expect(summary.lines.grep(/what stands out/)).to eq(["what stands out: nothing. #{findings.nothing_line}\n"])
    expect(summary).not_to match(/^1\. /)

    html = REXML::Document.new(report_html(dump))
    items = REXML::XPath.match(html, "//ol[@class='findings']/li")
    expect(items.map { |li| li.text.strip }).to eq([findings.nothing_line])
  end

  # 300,000 blocks of 200 bytes, three of every four freed: free chunks of 624 bytes between kept ones.
  FRAGMENT_WORKLOAD = <<~RUBY
    require "fiddle"
    blocks = Array.new(300_000) { Fiddle.malloc(200) }
    blocks.each_with_index { |b, i| Fiddle.free(b) unless (i % 4).zero? }
    PtmallocDump.dump(ENV.fetch("DUMP"))
    puts blocks.size
  RUBY

  it "leads with fragmentation where small free chunks hold the memory, and gives its next step" do
    dump = child_dump(FRAGMENT_WORKLOAD)
    freed = 225_000 * 208 # malloc(200) takes a 208-byte chunk
    first = PtmallocDump::Findings.new(dump).top.first
    puts "    fragmentation #{human.call(first.bytes)}; planted #{human.call(freed)} in chunks of 624 B"
    expect(first.topic).to eq(:fragmentation)
    expect(first.bytes).to be >= freed * 0.9
    # glibc's free bytes, and the tcache's chunks it counts as in use
    expect(first.bytes).to be <= dump.summary[:fordblks] + dump.summary[:tcache_bytes]
    expect(first.step).to include("jemalloc")
    expect(first.anchor).to eq("fragmentation")
    expect(PtmallocDump::Advice.new(dump).lines.first.topic).to eq(:small_free_chunks)
  end

  # Threads in turn, each in an arena of its own, each keeping one 1,500-byte block in four of 24 MB.
  ARENAS_WORKLOAD = <<~RUBY
    require "fiddle"
    memset = Fiddle::Function.new(Fiddle::Handle::DEFAULT["memset"],
                                  [Fiddle::TYPE_UINTPTR_T, Fiddle::TYPE_INT, Fiddle::TYPE_SIZE_T], Fiddle::TYPE_VOID)
    keep = []
    go = Array.new(4) { Queue.new }
    done = Queue.new
    threads = Array.new(4) do |i|
      Thread.new do
        Fiddle.free(Fiddle.malloc(64)) # this thread's arena, now
        go[i].pop
        blocks = Array.new(16_000) { Fiddle.malloc(1500).tap { |b| memset.call(b, 1, 1500) } }
        blocks.each_with_index { |b, j| (j % 4).zero? ? keep << b : Fiddle.free(b) }
        done << i
        sleep 0.3
      end
    end
    sleep 0.1
    4.times { |i| go[i] << true; done.pop }
    PtmallocDump.dump(ENV.fetch("DUMP"), ruby: false)
    threads.each(&:join)
  RUBY

  it "leads with the other arenas' free memory, opens the explorer on one of them, and says where advice overlaps" do
    dump = child_dump(ARENAS_WORKLOAD)
    expect(dump.verify).to be_ok
    first = PtmallocDump::Findings.new(dump).top.first
    expect(first.topic).to eq(:arenas)
    others = dump.summary[:arenas].reject { |a| a[:main] }
    expect(first.bytes).to eq(others.sum { |a| a[:free_resident_bytes] })
    expect(first.step).to include("MALLOC_ARENA_MAX=2")

    # the explorer opens on a heap of one of those arenas, and the report's data says so
    view = explorer_view(dump, first.heap)
    expect(view[:heaps].map { |h| h.arena&.index }).to all(satisfy { |i| others.map { |a| a[:index] }.include?(i) })
    out = File.join(tmpdir, "report")
    FileUtils.mkdir_p(out)
    PtmallocDump::Report.new(dump, out).write
    data = File.read(File.join(out, PtmallocDump::Explorer::DATA_FILE))
    index = PtmallocDump::Explorer.new(dump, initial_heap: first.heap).initial_view
    expect(index).to be > 0
    expect(data).to include(%("initialView":#{index},))

    lines = PtmallocDump::Advice.new(dump).lines
    shared = lines.select { |l| PtmallocDump::Advice::FREE_MEMORY_TOPICS.include?(l.topic) }
    expect(shared.size).to be >= 2
    together = lines.last
    expect(together.topic).to eq(:together)
    free = dump.summary[:free_resident_bytes] + dump.summary[:tcache_bytes]
    sum = shared.sum { |l| l.in_turn ? l.in_turn[:high] : l.high || l.gain }
    expect(together.gain).to eq([sum, free].min)
    expect(together.gain).to be <= free
    expect(together.text).to include("together they give back at most #{human.call(together.gain)}")
    expect(together.text).to include("the free memory they draw on is the same")
  end

  it "shows no 0 B row, and Ruby's object pages after the explorer, folded and in the contents" do
    dump = child_dump("kept = Array.new(200_000) { Object.new }; PtmallocDump.dump(ENV.fetch('DUMP')); p kept.size")
    expect(dump.summary.dig(:ruby, :by_category, :ruby_page, :bytes)).to eq(0) if RUBY_VERSION >= "3.1"
    html = report_html(dump)
    doc = REXML::Document.new(html)
    owners = REXML::XPath.match(doc, "//h2[@id='owners']/following-sibling::table[1]//tr/td[2]").map(&:text)
    expect(owners).not_to be_empty
    expect(owners).not_to include("0 B")
    expect(html.index('id="ruby-pages"')).to be > html.index('id="explorer"')
    expect(REXML::XPath.first(doc, "//h2[@id='ruby-pages']/following-sibling::details[1]//img")).not_to be_nil
    contents = REXML::XPath.match(doc, "//nav[@id='contents']//a").map { |a| a.attributes["href"] }
    expect(contents).to include("#ruby-pages")
  end
end
