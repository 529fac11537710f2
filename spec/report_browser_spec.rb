# frozen_string_literal: true

require "chunky_png"
require "json"
require "stringio"
require "spec_helper"
require "ptmalloc_dump/visualize_cli"

# The report as a person uses it: the demo's dump rendered by ptmalloc-visualize, opened in headless
# Chromium through WebDriver, read at 1400x900, explored with a real pointer and keyboard.
RSpec.describe "the report in a browser", :browser do
  root = File.expand_path("..", __dir__)
  artifacts = File.join(root, "tmp", "spec-artifacts")
  define_method(:artifacts) { artifacts }

  before(:context) do
    raise "chromium and chromedriver are missing: bin/setup installs them" unless Browser.available?

    @dir = Dir.mktmpdir("ptmd-browser")
    _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, File.join(root, "examples", "fragment.rb"), @dir)
    raise "the demo failed: #{err}" unless status.success?

    @dump_path = File.join(@dir, "demo.dump")
    @report = File.join(@dir, "report")
    _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, @dump_path, @report)
    raise "rendering failed: #{err}" unless status.success?

    @dump = PtmallocDump.load(@dump_path)
    @browser = Browser.new(File.join(@dir, "chrome-profile"))
    @browser.viewport(1400, 900)
    FileUtils.mkdir_p(artifacts)
  end

  after(:context) do
    @browser&.close
    FileUtils.rm_rf(@dir) if @dir
  end

  attr_reader :browser, :dump

  def open_report
    browser.visit("file://#{File.join(@report, 'index.html')}")
    browser.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready")
  end

  # Where to put the pointer (whole CSS pixels of the viewport) for pixel x, y of the canvas, after
  # scrolling the explorer into view: the canvas's content box may start at a fraction of a pixel.
  def canvas_point(x, y)
    browser.script("document.getElementById('explorer').scrollIntoView()")
    left, top = browser.script("const c = document.getElementById('xp-map'), r = c.getBoundingClientRect(); " \
                               "return [r.left + c.clientLeft, r.top + c.clientTop]")
    [(left + x).ceil, (top + y).ceil]
  end

  def panel
    browser.script("const o = {}; document.querySelectorAll('#xp-panel [data-k]').forEach(e => o[e.dataset.k] = e.textContent); return o")
  end

  def owner_text(chunk)
    ruby = dump.ruby
    o = ruby.owner_of(chunk)
    return ruby.category_of(chunk).to_s unless o

    type = o.imemo_type ? "#{o.type} (#{o.imemo_type})" : o.type.to_s
    "#{type} #{o.class_name}#{o.data_type ? " (#{o.data_type})" : ''} at 0x#{o.address.to_s(16)}"
  end

  def expect_panel_shows(chunk, shown = panel)
    expect(shown["address"]).to eq("0x#{chunk.address.to_s(16)}")
    expect(shown["size"]).to start_with("#{chunk.size} B")
    expect(shown["state"]).to eq(chunk.state.to_s)
    expect(shown["owner"]).to eq(owner_text(chunk))
  end

  def views
    PtmallocDump::Explorer.new(dump).views
  end

  it "answers on its first screen at 1400x900: the heap, the three findings, the advice, the check" do
    open_report
    browser.script("window.scrollTo(0, 0)")
    expect(browser.script("return [window.innerWidth, window.innerHeight]")).to eq([1400, 900])
    shot = browser.screenshot
    File.binwrite(File.join(artifacts, "first-screen.png"), shot)
    expect(ChunkyPNG::Image.from_blob(shot).dimension.to_a).to eq([1400, 900])

    on_screen = lambda do |css|
      browser.script("return Array.from(document.querySelectorAll(#{css.to_json})).map(e => { const r = " \
                     "e.getBoundingClientRect(); return [e.innerText, r.top >= 0 && r.bottom <= window.innerHeight] })")
    end
    s = dump.summary
    lead = on_screen.call("#verdict .lead")
    expect(lead.map(&:last)).to all(be(true))
    heap = s[:rss] ? s[:rss][:total] : s[:arena] + s[:hblkhd]
    expect(lead.first.first).to include(PtmallocDump::FormatHelpers.human_bytes(heap))

    findings = on_screen.call("#verdict .findings li")
    top = PtmallocDump::Findings.new(dump).top(3)
    expect(findings.size).to eq([top.size, 1].max)
    expect(findings.map(&:last)).to all(be(true))
    # each finding, its evidence link and its next step; where nothing stands out, the one line that says so
    expected = top.map { |f| "#{f.text} evidence\nNext: #{f.step}" }
    expected = [PtmallocDump::Findings.new(dump).nothing_line] if top.empty?
    expect(findings.map(&:first)).to eq(expected)
    # the figures the findings name are the summary's own
    expect(findings.first.first).to include(PtmallocDump::FormatHelpers.human_bytes(top.first.bytes)) unless top.empty?
    # the explorer opens on the heap the first finding is about, and counts no row past the end
    initial = PtmallocDump::Explorer.new(dump, initial_heap: top.first&.heap).initial_view
    expect(browser.script("return document.getElementById('xp-view').value")).to eq(initial.to_s)
    first_row, last_row, rows = browser.script("return document.getElementById('xp-zoom').textContent")
                                       .match(/rows (\d+)-(\d+) of (\d+)/).captures.map(&:to_i)
    expect(last_row).to be <= rows
    expect(first_row).to be <= last_row

    advice = on_screen.call("#verdict li.advice")
    lines = PtmallocDump::Advice.new(dump).lines
    expect(lines).not_to be_empty
    expect(advice.map(&:first)).to eq(lines.map(&:text))
    expect(advice.map(&:last)).to all(be(true))

    check = on_screen.call("#verdict .check")
    expect(check.first.last).to be(true)
    expect(check.first.first).to include(dump.verify.ok? ? "reproduces glibc's" : "differ from glibc's")

    toc = browser.script("return Array.from(document.querySelectorAll('#contents a')).map(a => [a.getAttribute('href'), !!document.getElementById(a.getAttribute('href').slice(1))])")
    expect(toc.size).to be >= 10
    expect(toc.map(&:last)).to all(be(true))
    expect(browser.console.select { |e| e["level"] == "SEVERE" }).to eq([])
  end

  it "shows, under the real pointer, the chunk Dump#chunk_containing and RubyHeap#owner_of give, at several zoom levels" do
    open_report
    rng = Random.new(14)
    w = PtmallocDump::ExplorerGeometry::WIDTH
    hgt = PtmallocDump::ExplorerGeometry::HEIGHT
    checked = 0
    [1, 16, 256, nil].each_with_index do |bpp, zi|
      13.times do |k|
        break if checked == 50

        view = views[(zi + k) % views.size]
        heap = view[:heaps].sample(random: rng)
        chunk = dump.chunk_by_index(dump.heaps.take_while { |h| h.index != heap.index }.sum(&:chunk_count) + rng.rand(heap.chunk_count))
        target = chunk.address + [16, chunk.size / 2].min
        fit = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, null, 0)")["bpp"]
        b = bpp || fit
        row = PtmallocDump::ExplorerGeometry.row_centering(view[:heaps], target, b)
        shown = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, #{b}, #{row})")
        geo = PtmallocDump::ExplorerGeometry.new(view[:heaps], shown["bpp"], shown["row"])
        x, y = geo.pixel_for(target)
        expect([x, y]).to all(be_a(Integer))
        expect(x).to be_between(0, w - 1)
        expect(y).to be_between(0, hgt - 1)
        expected = dump.chunk_containing(geo.address_at(x, y))
        expected = chunk if shown["bpp"] <= 16 # one pixel shows 16 bytes or fewer: exactly the chunk aimed at
        expect(dump.chunk_containing(geo.address_at(x, y))).to eq(expected)
        browser.move_to(*canvas_point(x, y))
        expect_panel_shows(expected)
        @explained ||= []
        @explained << [geo.address_at(x, y), panel]
        checked += 1
      end
    end
    expect(checked).to eq(50)
    File.binwrite(File.join(artifacts, "explorer.png"), browser.screenshot)

    # --explain over the same addresses agrees with the panel
    @explained.each do |address, shown|
      out = StringIO.new
      expect(PtmallocDump::VisualizeCLI.new(["--explain", format("0x%x", address), "--json", @dump_path], out: out).run).to eq(0)
      e = JSON.parse(out.string)
      expect(e.dig("chunk", "address")).to eq(shown["address"])
      expect(shown["size"]).to start_with("#{e.dig('chunk', 'size')} B")
      expect(e.dig("chunk", "state")).to eq(shown["state"])
      expect(e.dig("owner", "text")).to eq(shown["owner"])
    end
    address = @explained.first.first
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--explain", format("0x%x", address), @dump_path)
    expect(status).to be_success, err
    expect(out).to include("chunk          #{@explained.first.last['address']}", "owner          #{@explained.first.last['owner']}")
  end

  it "colours pages by class as the PNG page maps do" do
    open_report
    browser.script("document.querySelector('input[name=xp-mode][value=pages]').click()")
    maps = File.join(@dir, "maps-again")
    FileUtils.mkdir_p(maps)
    geo_png = PtmallocDump::Geometry.new(dump, PtmallocDump::Render.maps(dump, maps, true, nil, nil))
    pngs = Hash.new { |cache, file| cache[file] = ChunkyPNG::Image.from_file(File.join(maps, file)) }
    classes = PtmallocDump::Render.palette[:page_classes]
    shade = ->(hex) { "##{hex[1..].scan(/../).map { |c| format('%02x', c.to_i(16) * 65 / 100) }.join}" }
    rng = Random.new(21)
    20.times do
      view = views.sample(random: rng)
      heap = view[:heaps].sample(random: rng)
      address = heap.start + rng.rand(heap.size)
      shown = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, 64, " \
                             "#{PtmallocDump::ExplorerGeometry.row_centering(view[:heaps], address, 64)})")
      geo = PtmallocDump::ExplorerGeometry.new(view[:heaps], shown["bpp"], shown["row"])
      x, y = geo.pixel_for(address)
      drawn = browser.script("const p = document.getElementById('xp-map').getContext('2d').getImageData(#{x}, #{y}, " \
                             "1, 1).data; return '#' + Array.from(p.slice(0, 3)).map(v => v.toString(16).padStart(2, " \
                             "'0')).join('')")
      shown_address = geo.address_at(x, y)
      image, px, py = geo_png.pixel_for(shown_address, :page_map)
      png = ChunkyPNG::Color.to_hex(pngs[image[:file]][px, py], false)
      # the PNG draws a page shared with another process as a checker of its class's colour and a
      # darker shade of it (the explorer shows sharing in its residency mode)
      page_class = classes.key(png) || classes.find { |_, hex| shade.call(hex) == png }&.first
      expect(page_class).not_to be_nil, "#{png} is no page class's colour"
      expect(drawn).to eq(classes[page_class])
    end
  end

  it "pins the chunk clicked, and keeps it while the pointer moves on" do
    open_report
    view = views.first
    heap = view[:heaps].first
    chunk = dump.chunk_by_index(heap.chunk_count / 2)
    shown = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, 16, #{PtmallocDump::ExplorerGeometry.row_centering(view[:heaps], chunk.address + 16, 16)})")
    geo = PtmallocDump::ExplorerGeometry.new(view[:heaps], shown["bpp"], shown["row"])
    x, y = geo.pixel_for(chunk.address + 16)
    browser.click_at(*canvas_point(x, y))
    browser.move_to(*canvas_point(5, 5))
    expect_panel_shows(chunk)
    expect(browser.script("return window.ptmdExplorer.state().pinned")).to eq("0x#{chunk.address.to_s(16)}")
  end

  it "zooms with the wheel around the pointer, and to a range dragged over on the minimap" do
    open_report
    view = views.first
    middle = view[:heaps].first.start + view[:heaps].first.size / 2
    shown = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, 16, " \
                           "#{PtmallocDump::ExplorerGeometry.row_centering(view[:heaps], middle, 16)})")
    x = 300
    y = 200
    address = PtmallocDump::ExplorerGeometry.new(view[:heaps], shown["bpp"], shown["row"]).address_at(x, y)
    browser.wheel_at(*canvas_point(x, y), -100)
    after = browser.script("return window.ptmdExplorer.state()")
    expect(after["bpp"]).to eq(8)
    at = PtmallocDump::ExplorerGeometry.new(view[:heaps], after["bpp"], after["row"]).pixel_for(address)
    expect(at[1]).to eq(y) # the row under the pointer still shows the address

    mini = browser.script("document.getElementById('explorer').scrollIntoView(); const c = " \
                          "document.getElementById('xp-mini'), r = c.getBoundingClientRect(); return [r.left + " \
                          "c.clientLeft, r.top + c.clientTop, c.width, c.height]")
    left, top, mw, mh = mini
    size = view[:heaps].sum(&:size)
    y0 = (top + 100).ceil
    y1 = (top + 140).ceil
    browser.drag((left + 10).ceil, y0, (left + 10).ceil, y1)
    z = browser.script("return window.ptmdExplorer.state()")
    # the bytes under the pointer where the drag began and ended (the canvas may sit at a fraction of a pixel)
    lo = (y0 - top) * mw * size.fdiv(mw * mh)
    hi = (y1 - top) * mw * size.fdiv(mw * mh)
    w = PtmallocDump::ExplorerGeometry::WIDTH
    first = z["row"] * w * z["bpp"]
    last = (z["row"] + PtmallocDump::ExplorerGeometry::HEIGHT) * w * z["bpp"]
    expect(first).to be <= lo
    expect(last).to be >= [hi, size].min
    expect(z["bpp"]).to be < shown["bpp"] * 4 # zoomed to the range, not left at the whole heap
    expect((hi - lo) / z["bpp"] / w).to be > PtmallocDump::ExplorerGeometry::HEIGHT / 4

    # the keyboard, on the focused map: the down arrow moves a quarter of the canvas, - zooms out
    browser.click_at(*canvas_point(10, 10))
    before = browser.script("return window.ptmdExplorer.state()")
    browser.keys("\uE015")
    moved = browser.script("return window.ptmdExplorer.state()")
    expect(moved["row"]).to eq(before["row"] + PtmallocDump::ExplorerGeometry::HEIGHT / 4)
    browser.keys("-")
    expect(browser.script("return window.ptmdExplorer.state()")["bpp"]).to eq(moved["bpp"] * 2)
  end

  it "highlights exactly the chunks of a class searched for, with their totals" do
    open_report
    name, = dump.summary[:ruby][:by_class].first
    expected = dump.each_chunk.select { |c| dump.ruby.owner_of(c)&.class_name == name }
    expect(expected).not_to be_empty
    browser.type("#xp-search", name)
    browser.click("#xp-form button[type=submit]")
    got = browser.script("return window.ptmdExplorer.highlighted()")
    expect(got).to eq(expected.map { |c| "0x#{c.address.to_s(16)}" })
    totals = browser.script("return document.querySelector('#xp-results [data-k=totals]').textContent")
    expect(totals).to include("#{expected.size} chunk(s), #{expected.sum(&:size)} B")
  end

  it "lands on the chunk of an address searched for" do
    open_report
    rng = Random.new(7)
    5.times do
      heap = dump.heaps.sample(random: rng)
      chunk = dump.chunk_by_index(dump.heaps.take_while { |h| h.index != heap.index }.sum(&:chunk_count) + rng.rand(heap.chunk_count))
      address = chunk.address + rng.rand(chunk.size)
      browser.type("#xp-search", format("0x%x", address))
      browser.click("#xp-form button[type=submit]")
      expect(browser.script("return window.ptmdExplorer.state().pinned")).to eq("0x#{chunk.address.to_s(16)}")
      expect_panel_shows(chunk)
      view = views.find { |v| v[:heaps].include?(heap) }
      expect(browser.script("return window.ptmdExplorer.state().view")).to eq(view[:group].to_s)
    end
  end

  it "shows what a chunk points at and what points at it, when the dump has references" do
    require "fiddle"
    a = Fiddle.malloc(96)
    b = Fiddle.malloc(96)
    begin
      Fiddle::Pointer.new(a)[0, 8] = [b].pack("Q<")
      Fiddle::Pointer.new(b)[0, 8] = [0].pack("Q<")
      path = File.join(@dir, "refs.dump")
      PtmallocDump.dump(path, references: true)
      out_dir = File.join(@dir, "refs")
      _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, path, out_dir)
      expect(status).to be_success, err
      browser.visit("file://#{File.join(out_dir, 'index.html')}")
      browser.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready")
      ca = format("0x%x", a - 16)
      cb = format("0x%x", b - 16)
      browser.type("#xp-search", format("0x%x", a))
      browser.click("#xp-form button[type=submit]")
      expect(panel["address"]).to eq(ca)
      expect(panel["refs_out"]).to include(cb)
      browser.type("#xp-search", format("0x%x", b))
      browser.click("#xp-form button[type=submit]")
      expect(panel["address"]).to eq(cb)
      expect(panel["refs_in"]).to include(ca)
      expect(panel["refs_out"]).to start_with("0")
      out = StringIO.new
      PtmallocDump::VisualizeCLI.new(["--explain", format("0x%x", a), "--json", path], out: out).run
      expect(JSON.parse(out.string).dig("references", "points_at")).to include(cb)
    ensure
      Fiddle.free(a)
      Fiddle.free(b)
    end
  end

  it "explores a --diff the same way, coloured by what changed on each page of the newer dump" do
    old = File.join(@dir, "old.dump")
    new = File.join(@dir, "new.dump")
    PtmallocDump.dump(old)
    keep = Array.new(5_000) { |k| "grown-#{k}-" * 50 }
    PtmallocDump.dump(new)
    out_dir = File.join(@dir, "diff")
    _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--diff", old, new, out_dir)
    expect(status).to be_success, err
    expect(keep.size).to eq(5_000)
    diff = PtmallocDump.diff(old, new)
    d = diff.new
    changes = diff.page_changes
    colors = PtmallocDump::Render.palette[:diff]
    browser.visit("file://#{File.join(out_dir, 'index.html')}")
    browser.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready")
    expect(browser.script("return window.ptmdExplorer.state().mode")).to eq("change")
    rng = Random.new(3)
    first_page = d.pages.each_with_index.to_h { |_pm, i| [i, d.pages.first(i).sum(&:size)] }
    views = PtmallocDump::Explorer.new(d).views
    10.times do
      view = views.sample(random: rng)
      heap = view[:heaps].sample(random: rng)
      chunk = d.chunk_by_index(d.heaps.take_while { |h| h.index != heap.index }.sum(&:chunk_count) + rng.rand(heap.chunk_count))
      target = chunk.address + [16, chunk.size / 2].min
      shown = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, 16, " \
                             "#{PtmallocDump::ExplorerGeometry.row_centering(view[:heaps], target, 16)})")
      geo = PtmallocDump::ExplorerGeometry.new(view[:heaps], shown["bpp"], shown["row"])
      x, y = geo.pixel_for(target)
      browser.move_to(*canvas_point(x, y))
      shown_panel = panel
      expect(shown_panel["address"]).to eq("0x#{chunk.address.to_s(16)}")
      expect(shown_panel["state"]).to eq(chunk.state.to_s)
      pm = d.pages[heap.index]
      change = changes.getbyte(first_page[heap.index] + (target - pm.page_base) / pm.page_size)
      pixel = browser.script("const p = document.getElementById('xp-map').getContext('2d').getImageData(#{x}, #{y}, " \
                             "1, 1).data; return '#' + Array.from(p.slice(0, 3)).map(v => v.toString(16).padStart(2, " \
                             "'0')).join('')")
      expect(pixel).to eq(colors[change])
    end
  end
end

# The explorer's panel and search for who holds a chunk and the code it is charged to, on a dump with
# methods defined by module_eval on one module and blocks of spec/fixtures/ext/owners_fixture.c
# malloc'd and forgotten, checked against the Ruby API (RubyHeap#code_charge_of, #module_of,
# Dump#owner_kind_of, #anchor_of) and the addresses the fixture malloc'd.
RSpec.describe "the report's explorer: holders and code owners in a browser", :browser do
  before(:context) do
    raise "chromium and chromedriver are missing: bin/setup installs them" unless Browser.available?

    @dir = Dir.mktmpdir("ptmd-browser-code")
    fixture = build_fixture("owners_fixture", extra_flags: ["-lpthread"])
    @dump_path = File.join(@dir, "code.dump")
    @leaked_file = File.join(@dir, "leaked")
    _o, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      module ExplorerCodeOwned; end
      40.times do |i|
        ExplorerCodeOwned.module_eval("def m\#{i}; \#{'x = [1, 2];' * 60} end", "/virtual/explorer_code.rb", 10 * i + 1)
      end
      leak = Fiddle::Function.new(Fiddle.dlopen(#{fixture.dump})["ow_leak"],
                                  [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T)
      File.open(#{@leaked_file.dump}, "wb") { |f| leak.call(200, 1024, f.fileno) }
      GC.start
      PtmallocDump.dump(#{@dump_path.dump}, references: true)
    RUBY
    raise "the dump failed: #{err}" unless status.success?

    @dump = PtmallocDump.load(@dump_path)
    @browser = Browser.explorer(@dir, @dump_path)
  end

  after(:context) do
    @browser&.close
    FileUtils.rm_rf(@dir) if @dir
  end

  attr_reader :browser, :dump

  include ExplorerPointer

  def code_text(code)
    return "VM table #{code[:module]}" if code[:kind] == :vm_table

    "module #{code[:module]}#{code[:method] ? ", method #{code[:method]}" : ''}" \
      "#{code[:path] ? ", #{code[:path]}#{code[:line] ? ":#{code[:line]}" : ''}" : ''}"
  end

  def explain(chunk)
    out = StringIO.new
    expect(PtmallocDump::VisualizeCLI.new(["--explain", hex(chunk.user_address), "--json", @dump_path], out: out).run).to eq(0)
    JSON.parse(out.string)
  end

  it "shows the module (and method, path:line) a chunk is charged to, as RubyHeap#code_charge_of and --explain give" do
    ruby = dump.ruby
    charged = dump.each_chunk.select { |c| ruby.module_of(c) == "ExplorerCodeOwned" }
    puts "    #{charged.size} chunks, #{charged.sum(&:size)} B charged to ExplorerCodeOwned"
    expect(charged.size).to be >= 40
    expect(charged.sum(&:size)).to eq(ruby.code_owners[:by_module]["ExplorerCodeOwned"][:bytes])
    # a method's chunks name it, at the line module_eval was given
    methods = charged.map { |c| ruby.code_charge_of(c) }.select { |c| c[:method] }
    expect(methods.map { |c| c[:path] }.uniq).to eq(["/virtual/explorer_code.rb"])
    methods.each { |c| expect(c[:line]).to eq(10 * Integer(c[:method].delete_prefix("m")) + 1) }

    charged.sample(8, random: Random.new(14)).each do |chunk|
      expected = code_text(ruby.code_charge_of(chunk))
      expect(expected).to start_with("module ExplorerCodeOwned")
      shown = hover(chunk)
      expect(shown["address"]).to eq(hex(chunk.address))
      expect(shown["code"]).to eq(expected)
      expect(explain(chunk).dig("code", "text")).to eq(expected)
    end
    with_method = charged.find { |c| ruby.code_charge_of(c)[:method] }
    expect(hover(with_method)["code"]).to match(%r{\Amodule ExplorerCodeOwned, method m\d+, /virtual/explorer_code\.rb:\d+\z})
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--explain", hex(with_method.user_address), @dump_path)
    expect(status).to be_success, err
    expect(out).to include("code           #{code_text(ruby.code_charge_of(with_method))}")
  end

  it "highlights exactly the module's chunks when its name is searched, with their totals" do
    ruby = dump.ruby
    charged = dump.each_chunk.select { |c| ruby.module_of(c) == "ExplorerCodeOwned" }
    expected = charged.map { |c| hex(c.address) }.sort
    %w[ExplorerCodeOwned module:ExplorerCodeOwned].each do |q|
      browser.script("window.ptmdExplorer.search(#{q.to_json})")
      expect(browser.script("return window.ptmdExplorer.highlighted()").sort).to eq(expected)
      totals = browser.script("return document.querySelector('#xp-results [data-k=totals]').textContent")
      expect(totals).to include("(module)", "#{charged.size} chunk(s), #{charged.sum(&:size)} B")
    end
    # a name that is a class's too stays the class's; module: asks for the module's code
    string_code = dump.each_chunk.select { |c| ruby.module_of(c) == "String" }.map { |c| hex(c.address) }.sort
    expect(string_code).not_to be_empty
    browser.script("window.ptmdExplorer.search('String')")
    expect(browser.script("return window.ptmdExplorer.highlighted()").sort)
      .to eq(dump.each_chunk.select { |c| ruby.owner_of(c)&.class_name == "String" }.map { |c| hex(c.address) }.sort)
    expect(browser.script("return document.getElementById('xp-results').textContent")).to include("search module:String")
    browser.script("window.ptmdExplorer.search('module:String')")
    expect(browser.script("return window.ptmdExplorer.highlighted()").sort).to eq(string_code)
    browser.script("window.ptmdExplorer.search('module:NoSuchModuleAnywhere')")
    expect(browser.script("return window.ptmdExplorer.highlighted()")).to eq([])
  end

  it "shows a forgotten block as leaked and an anchored chunk with its root's name, as Dump#owner_kind_of and #anchor_of" do
    forgotten = File.binread(@leaked_file).unpack("Q*").map { |a| dump.chunk_at(a - 16) }
    expect(forgotten.size).to eq(200)
    leaked = forgotten.select { |c| dump.owner_kind_of(c) == :leaked }
    expect(leaked.size).to be >= 190
    leaked.first(3).each do |chunk|
      shown = hover(chunk)
      expect(shown["address"]).to eq(hex(chunk.address))
      expect(shown["holder"]).to eq("leaked: nothing reaches it")
      expect(explain(chunk)["holder"]).to eq(shown["holder"])
    end
    anchored = dump.each_chunk.select { |c| dump.owner_kind_of(c) == :anchored }
    expect(anchored).not_to be_empty
    anchored.sample(3, random: Random.new(3)).each do |chunk|
      expect(hover(chunk)["holder"]).to eq("anchored by #{dump.anchor_of(chunk)}")
    end
    # a root's name highlights what it keeps: the chunks it anchors and those held through an interior
    # pointer reached from it
    name = dump.anchor_of(anchored.first)
    kept = dump.each_chunk.select { |c| dump.anchor_of(c) == name }
    expect(kept.map { |c| dump.owner_kind_of(c) }.uniq - %i[anchored interior]).to eq([])
    browser.script("window.ptmdExplorer.search(#{name.to_json})")
    expect(browser.script("return window.ptmdExplorer.highlighted()").sort).to eq(kept.map { |c| hex(c.address) }.sort)
  end
end

# The panel's and --explain's bin of a free chunk: for a tcache chunk the thread whose tcache holds it,
# for a fastbin, small or large bin chunk glibc's bin index and the sizes that bin holds. A child
# process starts native threads (spec/fixtures/ext/heap_threads.c), each mallocs blocks of random
# sizes and frees some of its own, then the child dumps itself. Each thread has an arena of its own
# and nothing runs on it after the frees, so a freed block found in a tcache is in the tcache of the
# thread that freed it: the oracle is that thread's tid. The bins' oracle is glibc 2.36's malloc.c,
# written out below.
RSpec.describe "the report's explorer: bins and tcache threads in a browser", :browser do
  before(:context) do
    raise "chromium and chromedriver are missing: bin/setup installs them" unless Browser.available?

    @dir = Dir.mktmpdir("ptmd-browser-bins")
    fixture = build_fixture("heap_threads", extra_flags: ["-lpthread"])
    @dump_path = File.join(@dir, "bins.dump")
    freed_path = File.join(@dir, "freed.json")
    _o, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      require "json"
      lib = Fiddle.dlopen(#{fixture.dump})
      f = ->(name, args, ret) { Fiddle::Function.new(lib[name], args, ret) }
      start = f.call("hw_start", [Fiddle::TYPE_INT], Fiddle::TYPE_INT)
      malloc = f.call("hw_malloc", [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T], Fiddle::TYPE_VOID)
      plan = f.call("hw_free_plan", [Fiddle::TYPE_VOIDP, Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T], Fiddle::TYPE_VOID)
      rng = Random.new(1436)
      tids = Array.new(3) { |i| start.call(i) }
      blocks = []
      apart = []
      late = []
      free = lambda do |list|
        threads = list.map(&:first).pack("l*")
        addrs = list.map(&:last).pack("Q*")
        plan.call(Fiddle::Pointer[threads], Fiddle::Pointer[addrs], list.size)
      end
      tids.each_index do |i|
        # tcache sizes, larger ones for the small and large bins, 24 blocks of 600 bytes kept apart by
        # small ones (a tcache bin holds 7 before glibc 2.43 and 16 from it: the rest must go to the
        # small bin), and a run of one size to free last
        sizes = Array.new(150) { rng.rand < 0.6 ? rng.rand(16..1000) : rng.rand(1000..40_000) } + [600, 24] * 24 + [56] * 12
        out = "\\0".b * (8 * sizes.size)
        packed = sizes.pack("Q*")
        malloc.call(i, Fiddle::Pointer[out], Fiddle::Pointer[packed], sizes.size)
        got = out.unpack("Q*").map { |a| [i, a] }
        blocks.concat(got.first(150))
        apart.concat(got[150, 48].each_slice(2).map(&:first))
        late.concat(got.last(12))
      end
      to_free = blocks.shuffle(random: rng).first(blocks.size * 6 / 10) + apart
      free.call(to_free)
      # a malloc no free chunk fits: each thread's arena sorts its unsorted chunks into their bins (and
      # consolidates its fastbins)
      big = [100_000].pack("Q")
      tids.each_index { |i| malloc.call(i, Fiddle::Pointer["\\0".b * 8], Fiddle::Pointer[big], 1) }
      # then the run: 7 fill the thread's tcache bin for 64-byte chunks, the rest go to a fastbin (before
      # glibc 2.43, which has no fastbins and keeps 16 in a tcache bin)
      free.call(late)
      File.write(#{freed_path.dump}, JSON.generate(tids: tids, freed: (to_free + late).map { |i, a| [a, tids[i]] }))
      PtmallocDump.dump(#{@dump_path.dump})
    RUBY
    raise "the dump failed: #{err}" unless status.success?

    @freed = JSON.parse(File.read(freed_path))
    @dump = PtmallocDump.load(@dump_path)
    @browser = Browser.explorer(@dir, @dump_path)
  end

  after(:context) do
    @browser&.close
    FileUtils.rm_rf(@dir) if @dir
  end

  attr_reader :browser, :dump

  include ExplorerPointer

  # glibc 2.36 malloc.c, x86-64: smallbin_index, largebin_index_64, bin_index, fastbin_index
  def smallbin_index(sz)
    sz >> 4
  end

  def largebin_index(sz)
    if (sz >> 6) <= 48 then 48 + (sz >> 6)
    elsif (sz >> 9) <= 20 then 91 + (sz >> 9)
    elsif (sz >> 12) <= 10 then 110 + (sz >> 12)
    elsif (sz >> 15) <= 4 then 119 + (sz >> 15)
    elsif (sz >> 18) <= 2 then 124 + (sz >> 18)
    else 126
    end
  end

  def bin_index(sz)
    sz < 1024 ? smallbin_index(sz) : largebin_index(sz)
  end

  # every chunk size (a multiple of 16) whose bin_index is b, counted one by one; the last bin has no end
  def bin_sizes(b)
    @bin_sizes ||= {}
    @bin_sizes[b] ||= begin
      sizes = (32..(1 << 20)).step(16).select { |s| bin_index(s) == b }
      b == 126 ? "#{sizes.first} B and up" : sizes.first == sizes.last ? "#{sizes.first} B" : "#{sizes.first}..#{sizes.last} B"
    end
  end

  def expected_bin(chunk)
    case chunk.state
    when :fastbin then "fastbin #{(chunk.size >> 4) - 2} (#{chunk.size} B)"
    when :unsorted then "unsorted"
    else "#{chunk.state} #{bin_index(chunk.size)} (#{bin_sizes(bin_index(chunk.size))})"
    end
  end

  def explain(chunk)
    out = StringIO.new
    expect(PtmallocDump::VisualizeCLI.new(["--explain", hex(chunk.user_address), "--json", @dump_path], out: out).run).to eq(0)
    JSON.parse(out.string)
  end

  it "names the thread that freed a block into its tcache, in the panel, --explain and Dump#bin_of" do
    in_tcache = @freed["freed"].filter_map do |address, tid|
      chunk = dump.chunk_at(address - 16)
      [chunk, tid] if chunk&.state == :tcache
    end
    puts "    #{in_tcache.size} of #{@freed['freed'].size} freed blocks in a tcache, of threads #{in_tcache.map(&:last).tally}"
    expect(in_tcache.map(&:last).uniq.sort).to eq(@freed["tids"].sort)
    expect(in_tcache.size).to be >= 60
    in_tcache.each do |chunk, tid|
      bin = dump.bin_of(chunk)
      expect([bin.kind, bin.tid, bin.index]).to eq([:tcache, tid, (chunk.size - 32) / 16])
      expect(bin.thread.tcache).to be > 0
    end

    in_tcache.sample(16, random: Random.new(14)).each do |chunk, tid|
      expected = "tcache of thread #{tid} (bin #{(chunk.size - 32) / 16}, #{chunk.size} B)"
      shown = hover(chunk)
      expect(shown["address"]).to eq(hex(chunk.address))
      expect(shown["state"]).to eq("tcache")
      expect(shown["bin"]).to eq(expected)
      e = explain(chunk)
      expect(e.dig("chunk", "bin")).to eq(expected)
      expect(e.dig("chunk", "tcache_tid")).to eq(tid)
      expect(e.dig("chunk", "bin_info")).to include("kind" => "tcache", "index" => (chunk.size - 32) / 16, "tid" => tid)
    end
    chunk, tid = in_tcache.first
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--explain", hex(chunk.user_address), @dump_path)
    expect(status).to be_success, err
    expect(out).to include("bin            tcache of thread #{tid} (bin #{(chunk.size - 32) / 16}, #{chunk.size} B)")
  end

  it "shows a binned chunk's bin index and the sizes its bin holds, by glibc's formulas" do
    binned = dump.each_chunk.select { |c| %i[fastbin unsorted smallbin largebin].include?(c.state) }
    by_state = binned.group_by(&:state)
    puts "    #{by_state.transform_values(&:size)}"
    # glibc 2.43 has no fastbins
    kinds = LibcFacts.glibc_version >= Gem::Version.new("2.43") ? %i[smallbin largebin] : %i[fastbin smallbin largebin]
    expect(by_state.keys).to include(*kinds)
    binned.each { |c| expect(dump.bin_of(c).to_s).to eq(expected_bin(c)) }
    by_state.each_value do |chunks|
      chunks.sample(6, random: Random.new(36)).each do |chunk|
        expected = expected_bin(chunk)
        shown = hover(chunk)
        expect(shown["address"]).to eq(hex(chunk.address))
        expect(shown["state"]).to eq(chunk.state.to_s)
        expect(shown["bin"]).to eq(expected)
        expect(explain(chunk).dig("chunk", "bin")).to eq(expected)
      end
    end
    large = by_state[:largebin].first
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--explain", hex(large.user_address), @dump_path)
    expect(status).to be_success, err
    expect(out).to include("bin            #{expected_bin(large)}")
  end
end
