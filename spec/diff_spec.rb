# frozen_string_literal: true

require "rexml/document"
require "spec_helper"

RSpec.describe "comparing dumps and advice" do
  def visualize(*args)
    Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, *args)
  end

  it "reports +50,000 chunks in the 528-byte class and in-use growth within a page of 50,000 x 528" do
    NativeThreads.start(0)
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    GC.disable
    begin
      Process.wait(PtmallocDump.dump(a, fork: true, ruby: false)) # snapshots: the walk itself leaves no trace here
      NativeThreads.malloc_many(0, 50_000, 512)
      Process.wait(PtmallocDump.dump(b, fork: true, ruby: false))
    ensure
      GC.enable
    end
    begin
      diff = PtmallocDump.diff(a, b)
      klass = diff.size_classes.find { |e| e[:size_class] == 528 }
      expect(klass[:count_growth]).to eq(50_000)
      # the blocks are all in the worker's arena; the whole heap also holds what the Ruby thread
      # allocated and freed between the snapshots, GC disabled or not (50,304 bytes net freed, once,
      # on Ruby 2.7)
      expect(diff.growth[:in_use_bytes]).to be_within(64 * 1024).of(50_000 * 528)
      expect(diff.chunks[:new_count]).to be >= 50_000
      expect(diff.chunks[:same_count]).to be > 0
      expect(diff.chunks[:pages_became_resident]).to be >= 50_000 * 528 / 4096 - 64
      worker = diff.arenas.max_by { |x| x[:in_use_bytes] }
      expect(worker[:in_use_bytes]).to be_within(4096).of(50_000 * 528)
    ensure
      NativeThreads.free_many(0)
      NativeThreads.stop(0)
    end
    out_dir = File.join(tmpdir, "diff")
    out, err, status = visualize("--diff", a, b, out_dir)
    expect(status).to be_success, err
    expect(out).to include("in use +")
    html = File.read(File.join(out_dir, "index.html"))
    REXML::Document.new(html)
    expect(html).to include("Pages by what changed", "new in use")
    expect(Dir[File.join(out_dir, "*-diff-*.png")]).not_to be_empty
  end

  # The --diff page's verdict: its items (topic, text) in order, from the page read as XML.
  def verdict_items(html)
    doc = REXML::Document.new(html)
    REXML::XPath.match(doc, "//section[@id='verdict']//li[@class='growth']").map do |li|
      [li.attributes["data-topic"], REXML::XPath.match(li, ".//text()").map(&:value).join]
    end
  end

  # Pages of `newer` that are resident and more than half free now and were not so in `older`, counted from
  # each dump's own chunks and page flags.
  def brute_new_free_resident(older, newer)
    usage = lambda do |dump|
      ps = dump.header[:page_size]
      bytes = Hash.new { |hh, k| hh[k] = [0, 0] }
      dump.each_chunk do |c|
        next if c.state == :meta

        live = %i[in_use mmapped].include?(c.state)
        page = c.address / ps * ps
        while page < c.end_address
          overlap = [page + ps, c.end_address].min - [page, c.address].max
          bytes[page][live ? 0 : 1] += overlap
          page += ps
        end
      end
      flags = {}
      dump.pages.each do |pm|
        pm.size.times { |i| flags[pm.page_base + i * ps] = pm.flags.getbyte(i) }
      end
      [bytes, flags]
    end
    ps = newer.header[:page_size]
    old_bytes, old_flags = usage.call(older)
    new_bytes, new_flags = usage.call(newer)
    present = PtmallocDump::PageMap::PRESENT
    new_flags.count do |page, f|
      next false unless f.anybits?(present)

      was = old_flags[page]
      mostly_free_before = was&.anybits?(present) && 2 * old_bytes[page][1] > ps
      2 * new_bytes[page][1] > ps && !mostly_free_before
    end
  end

  it "leads the --diff page with leaked native memory: Fiddle.malloc blocks forgotten between two dumps" do
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    _o, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      GC.start
      PtmallocDump.dump(#{a.dump})
      blocks = Array.new(100_000) { Fiddle.malloc(1024) }
      blocks.each_with_index { |blk, i| Fiddle.free(blk) if i.odd? }
      blocks = nil
      GC.start
      PtmallocDump.dump(#{b.dump})
    RUBY
    expect(status).to be_success, err
    diff = PtmallocDump.diff(a, b)
    leaked = diff.owners[:leaked]
    planted = 50_000 * 1040 # malloc(1024) is a chunk of 1,040 bytes
    expect(leaked[:bytes]).to be_within(planted / 20).of(planted)
    expect(leaked[:count]).to be_within(2_500).of(50_000)
    figure = PtmallocDump::FormatHelpers.signed_bytes(leaked[:bytes])

    out_dir = File.join(tmpdir, "diff")
    out, err, status = visualize("--diff", a, b, out_dir)
    expect(status).to be_success, err
    expect(out).to include("- Leaked native memory: #{figure} in +")
    expect(out).to include("ptmalloc-dump --track")
    html = File.read(File.join(out_dir, "index.html"))
    items = verdict_items(html)
    topic, text = items.find { |t, _| t == "leaked" }
    expect(topic).to eq("leaked"), items.inspect
    expect(text).to include("Leaked native memory", "#{figure} in +", "nothing points at", "ptmalloc-dump --track")
    expect(Float(figure[/[\d.]+/]) * 1024 * 1024).to be_within(planted / 20).of(planted)
    expect(html.index('id="verdict"')).to be < html.index('id="growth"')
    expect(html).not_to include("native native")
  end

  it "names String and the holder that grew, with their growth, on the --diff page" do
    dir = tmpdir
    _o, err, status = run_ruby(<<~RUBY)
      module Growing; STORE = {}; end
      GC.start
      PtmallocDump.dump(#{File.join(dir, 'a.dump').dump}, graph: true)
      # over 1,000 bytes each: malloc'd in every Ruby (Ruby 3.2+ keeps strings up to 640 bytes in the slot)
      20_000.times { |i| Growing::STORE["k\#{i}"] = "grown-\#{i}-" * 200 }
      GC.start
      PtmallocDump.dump(#{File.join(dir, 'b.dump').dump}, graph: true)
    RUBY
    expect(status).to be_success, err
    diff = PtmallocDump.diff(File.join(dir, "a.dump"), File.join(dir, "b.dump"))
    strings = diff.owners[:by_class]["String"]
    expect(strings).to be >= 20_000 * 2_000
    holder = diff.retainers(limit: 5).first
    expect(holder[:root]).to eq("Growing::STORE")
    expect(holder[:growth_bytes]).to be >= 20_000 * 2_000

    out_dir = File.join(dir, "diff")
    out, err, status = visualize("--diff", File.join(dir, "a.dump"), File.join(dir, "b.dump"), out_dir)
    expect(status).to be_success, err
    items = verdict_items(File.read(File.join(out_dir, "index.html")))
    expect(items.first&.first).to eq("ruby"), items.inspect
    text = items.first.last
    signed = PtmallocDump::FormatHelpers.method(:signed_bytes)
    expect(text).to include("String #{signed.call(strings)}",
                            "Growing::STORE (Hash), #{signed.call(holder[:growth_bytes])} that it alone keeps alive")
    expect(text).to include("Next: Growing::STORE")
    expect(out).to include("Most of the growth: Ruby objects")
  end

  it "leads with fragmentation when threads free most of what they allocated, and counts the pages newly free" do
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    _o, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      GC.start
      PtmallocDump.dump(#{a.dump})
      kept = Queue.new
      done = Queue.new
      finish = Queue.new
      # each thread its own arena: 8,000 blocks of 2,000 bytes each, nine in ten freed; the threads
      # live on through the dump, as a server's do (an exited thread's arena goes to the next thread
      # made, which would fill what the first one freed)
      threads = Array.new(6) do
        Thread.new do
          blocks = Array.new(8_000) { Fiddle.malloc(2_000) }
          blocks.each_with_index { |blk, i| (i % 10).zero? ? kept << blk : Fiddle.free(blk) }
          done << 1
          finish.pop
        end
      end
      6.times { done.pop }
      PtmallocDump.dump(#{b.dump})
      6.times { finish << 1 }
      threads.each(&:join)
    RUBY
    expect(status).to be_success, err
    diff = PtmallocDump.diff(a, b)
    planted_free = 6 * 7_200 * 2_000
    expect(diff.growth[:free_resident_bytes]).to be >= planted_free * 9 / 10
    expect(diff.growth[:in_use_bytes]).to be < diff.growth[:free_resident_bytes] / 4

    pages = diff.chunks[:pages][:new_free_resident]
    expect(pages).to be >= planted_free * 8 / 10 / 4096
    expect(pages).to eq(brute_new_free_resident(diff.old, diff.new))

    out_dir = File.join(tmpdir, "diff")
    out, err, status = visualize("--diff", a, b, out_dir)
    expect(status).to be_success, err
    expect(out).to include("Most of the growth: free but resident memory (fragmentation)")
    html = File.read(File.join(out_dir, "index.html"))
    items = verdict_items(html)
    expect(items.first&.first).to eq("fragmentation"), items.inspect
    expect(items.first.last).to include("#{PtmallocDump::FormatHelpers.count(pages)} pages newly mostly free", "Next: ")
    expect(html).to include(%(data-change="new_free_resident"><span class="sw" ))
    expect(html[%r{data-change="new_free_resident">.*?: ([\d,]+) pages</span>}, 1]).to eq(PtmallocDump::FormatHelpers.count(pages))
  end

  it "says plainly when nothing grew notably, and lists no kind of growth" do
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    PtmallocDump.dump(a, ruby: false)
    PtmallocDump.dump(b, ruby: false)
    diff = PtmallocDump.diff(a, b)
    expect(diff.growth[:arena].abs + diff.growth[:hblkhd].abs).to be < 1024 * 1024
    out_dir = File.join(tmpdir, "diff")
    out, err, status = visualize("--diff", a, b, out_dir)
    expect(status).to be_success, err
    expect(out.lines.first).to include("nothing grew notably")
    expect(out.lines.grep(/\A- /)).to be_empty
    html = File.read(File.join(out_dir, "index.html"))
    expect(verdict_items(html)).to be_empty
    expect(html[%r{<section id="verdict".*?</section>}m]).to include("nothing grew notably")
  end

  it "prints human units only in the terminal's --diff and --compare" do
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    _o, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      PtmallocDump.dump(#{a.dump})
      kept = Array.new(3_000) { Fiddle.malloc(1_100) } + Array.new(200) { Fiddle.malloc(50_000) }
      strings = Array.new(5_000) { |i| "s\#{i}" * 500 }
      PtmallocDump.dump(#{b.dump})
      p kept.size + strings.size
    RUBY
    expect(status).to be_success, err
    diff_out, err, status = visualize("--diff", a, b, File.join(tmpdir, "diff"))
    expect(status).to be_success, err
    compare_out, err, status = visualize("--compare", a, b, File.join(tmpdir, "fleet"))
    expect(status).to be_success, err
    [diff_out, compare_out].each do |out|
      figures = out.scan(/([+-]?[\d,]+(?:\.\d+)?) (B|KiB|MiB|GiB)\b/)
      expect(figures).not_to be_empty, out
      figures.each do |number, unit|
        value = Float(number.delete(","))
        expect(value.abs).to be < 1024, "#{number} #{unit} in:\n#{out}" # else a larger unit
      end
      expect(out).not_to match(/\b(\w+) \1\b/)
    end
    expect(diff_out).to match(/in use \+\d+(\.\d)? (KiB|MiB)/)
    # without OUTDIR: the same verdict, and no page
    terminal, err, status = visualize("--diff", a, b)
    expect(status).to be_success, err
    expect(terminal).to eq(diff_out.sub(/^wrote .*\n\z/, ""))
    # the 1,100-byte blocks (chunks of 1,120 bytes) are in the class above 1 KiB, labelled as the range it is
    html = File.read(File.join(tmpdir, "diff", "index.html"))
    expect(html).to include("<td>1.0 KiB to 2.0 KiB</td>")
    expect(html).not_to match(%r{<td>2\.0 KiB</td><td>[\d,]+</td>})
  end

  it "names T_STRING and String as the top growth owner of a string leak" do
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    leak = []
    GC.start
    PtmallocDump.dump(a)
    # over 1,000 bytes each: malloc'd in every Ruby (Ruby 3.2+ keeps strings up to 640 bytes in the slot)
    20_000.times { |i| leak << ("leak-#{i}-" * 100) }
    GC.start
    PtmallocDump.dump(b)
    diff = PtmallocDump.diff(a, b)
    expect(diff.owners[:by_type].first[0]).to eq(:T_STRING)
    expect(diff.owners[:by_type].first[1]).to be >= 20_000 * 1_000
    expect(diff.owners[:by_class].first[0]).to eq("String")
    expect(diff.top_growth_owner[1]).to eq(:T_STRING).or eq("String")
    expect(leak.size).to eq(20_000)
  end

  it "separates growth of old objects (kept) from young ones (garbage not yet collected)" do
    a = File.join(tmpdir, "a.dump")
    b = File.join(tmpdir, "b.dump")
    GC.start
    PtmallocDump.dump(a)
    kept = Array.new(10_000) { |i| "kept-#{i}-" * 100 }
    4.times { GC.start } # promoted
    GC.disable
    10_000.times { |i| "garbage-#{i}-" * 100 }
    PtmallocDump.dump(b)
    GC.enable
    owners = PtmallocDump.diff(a, b).owners
    expect(owners[:old]).to be >= 10_000 * 1_000
    expect(owners[:old]).to be < 10_000 * 1_000 * 1.5
    expect(owners[:young]).to be >= 10_000 * 1_000
    expect(kept.size).to eq(10_000)
  end

  it "refuses dumps of different processes unless forced" do
    a = File.join(tmpdir, "mine.dump")
    b = File.join(tmpdir, "other.dump")
    PtmallocDump.dump(a)
    _o, err, status = run_ruby("PtmallocDump.dump(#{b.inspect})")
    expect(status).to be_success, err
    expect { PtmallocDump.diff(a, b) }.to raise_error(PtmallocDump::Error, /different processes|pid/)
    expect(PtmallocDump.diff(a, b, force: true).growth).to have_key(:arena)
    _o, err, status = visualize("--diff", a, b, File.join(tmpdir, "x"))
    expect(status.exitstatus).to eq(1)
    expect(err).to include("--force")
  end

  it "shows which of two forked workers made the inherited heap private" do
    blocks = Array.new(400) { Fiddle.malloc(64 * 1024) }
    blocks.each { |blk| Fiddle::Pointer.new(blk)[0, 64 * 1024] = "p" * (64 * 1024) }
    paths = %w[writer idle].map { |n| File.join(tmpdir, "#{n}.dump") }
    pids = paths.map.with_index do |path, i|
      fork do
        blocks.each { |blk| Fiddle::Pointer.new(blk)[0, 64 * 1024] = "c" * (64 * 1024) } if i.zero?
        PtmallocDump.dump(path, ruby: false)
        exit!(0)
      rescue Exception => e # rubocop:disable Lint/RescueException -- whatever ends the child, the parent reports
        File.write("#{path}.error", "#{e.class}: #{e.message}\n#{e.backtrace.join("\n")}")
        exit!(1)
      end
    end
    pids.zip(paths) do |pid, path|
      expect(Process.wait2(pid)[1]).to be_success, -> { File.read("#{path}.error") }
    end
    begin
      fleet = PtmallocDump::Fleet.new(paths)
      writer, idle = fleet.workers
      expect(writer[:private_bytes]).to be > idle[:private_bytes] + 400 * 60 * 1024
      expect(idle[:shared_bytes]).to be > 400 * 60 * 1024
      expect(fleet.most_deviant[:pid]).to eq(writer[:pid])
      out, err, status = visualize("--compare", *paths, File.join(tmpdir, "fleet"))
      expect(status).to be_success, err
      expect(out).to include("deviates most: pid #{writer[:pid]}")
      html = File.read(File.join(tmpdir, "fleet", "index.html"))
      REXML::Document.new(html)
      expect(html).to include("pid #{writer[:pid]}", "fleet")
    ensure
      blocks.each { |blk| Fiddle.free(blk) }
    end
  end

  it "checks the malloc_trim estimate against what malloc_trim(0) really released" do
    NativeThreads.start(0)
    blocks = NativeThreads.malloc(-1, [100_000] * 1_000) # main arena: 100 MB, below the mmap threshold
    blocks.each { |blk| Fiddle::Pointer.new(blk)[0, 100_000] = "t" * 100_000 }
    freed = blocks.each_slice(2).map(&:first)
    path = File.join(tmpdir, "trim.dump")
    begin
      NativeThreads.prepare_free(-1, freed).call # 50 MB free and resident, in chunks that cannot merge
      PtmallocDump.dump(path, trim_check: true, ruby: false)
      dump = PtmallocDump.load(path)
      main = dump.arenas.find(&:main?).index
      expect(dump.summary[:arenas][main][:free_resident_bytes]).to be >= 45 * 1024 * 1024
      estimate = dump.analysis[:trim_estimate][main]
      released = dump.trim_released[main]
      expect(estimate).to be >= 40 * 1024 * 1024
      expect(released).to be_within(estimate / 10).of(estimate)
      out, _e, status = visualize("--summary", path)
      expect(status).to be_success
      expect(out).to include("malloc_trim(0) run after the dump released")
    ensure
      NativeThreads.prepare_free(-1, blocks - freed).call
      NativeThreads.stop(0)
    end
  end

  it "gives advice lines that each name the figure behind them" do
    out_dir = File.join(tmpdir, "advice")
    path = File.join(tmpdir, "advice.dump")
    _o, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      PtmallocDump.dump(#{path.inspect})
      threshold = PtmallocDump.load(#{path.inspect}).header[:mmap_threshold] # dynamic: read it first
      # just above the threshold, while top is small: mmapped chunks
      near = Array.new(12) { Fiddle.malloc(threshold + 8192) }
      keep = []
      threads = Array.new(3) do
        Thread.new do
          mine = Array.new(20_000) { Fiddle.malloc(1500) }
          mine.each_with_index { |b, i| i.odd? ? Fiddle.free(b) : keep << b }
          sleep 1
        end
      end
      big = Array.new(400) { Fiddle.malloc(100_000) }.each { |b| Fiddle::Pointer.new(b)[0, 100_000] = "a" * 100_000 }
      big.each_slice(2) { |b, _| Fiddle.free(b) }
      sleep 0.3
      PtmallocDump.dump(#{path.inspect})
      threads.each(&:join)
    RUBY
    expect(status).to be_success, err
    dump = PtmallocDump.load(path)
    lines = PtmallocDump::Advice.new(dump).lines
    expect(lines.map(&:topic)).to include(:malloc_trim, :arena_max, :mmap_threshold)
    out, err, status = visualize("--summary", path)
    expect(status).to be_success, err
    printed = out.lines.grep(/\A- /)
    expect(printed.size).to eq(lines.size)
    _o, err, status = visualize(path, out_dir)
    expect(status).to be_success, err
    html = REXML::Document.new(File.read(File.join(out_dir, "index.html")))
    in_report = REXML::XPath.match(html, "//li[@class='advice']").map(&:text)
    expect(in_report.size).to eq(lines.size)
    lines.zip(printed, in_report).each do |line, text, item|
      figure = line.unit == :bytes ? "(#{line.figure} B)" : line.figure.to_s
      expect(text).to include(figure)
      expect(item).to include(figure)
      expect(line.gain).to be > 0
    end
  end
end
