# frozen_string_literal: true

require "cgi"
require "chunky_png"
require "json"
require "rexml/document"
require "zlib"
require "spec_helper"

RSpec.describe "ptmalloc-visualize" do
  def visualize(*args)
    Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, *args)
  end

  def color_at(file, x, y)
    ChunkyPNG::Color.to_hex(ChunkyPNG::Image.from_file(file)[x, y], false)
  end

  # palette entries of the byte map for a state (two shades), resident
  def state_colors(state)
    st = PtmallocDump::STATES.index(state)
    idx = PtmallocDump::Render.palette[:indexed]
    [idx[1 + st * 4], idx[1 + st * 4 + 2]]
  end

  def page_color(klass)
    PtmallocDump::Render.palette[:page_classes][klass]
  end

  describe "the maps" do
    it "draws known chunks and pages in their colours (read back from the PNGs)" do
      NativeThreads.start(0)
      page = 4096
      used, g1, released, g2, free_big, g3 = NativeThreads.malloc(0, [3 * page, 64, 100_000, 64, 40_000, 64])
      { used => 3 * page, released => 100_000, free_big => 40_000 }.each { |a, n| Fiddle::Pointer.new(a)[0, n] = "w" * n }
      dir = File.join(tmpdir, "out")
      path = File.join(tmpdir, "synthetic.dump")
      begin
        PtmallocDump.dump(path, ruby: false) # warm the call path: a first call fills Ruby's method caches
        GC.disable
        NativeThreads.prepare_free(0, [released]).call
        SpecHelpers::Libc.malloc_trim(0)          # the interior pages of `released` go back to the kernel
        NativeThreads.prepare_free(0, [free_big]).call # free after the trim: it stays resident
        PtmallocDump.dump(path, ruby: false)
        dump = PtmallocDump.load(path)
        expect(dump.chunk_at(used - 16).state).to eq(:in_use)
        # the freed block, or the free chunk it became part of (another thread sharing the arena may
        # have split or merged it meanwhile)
        free_chunk = dump.chunk_containing(free_big + 20_000)
        expect(free_chunk).to be_free
        Dir.mkdir(dir)
        report = PtmallocDump::Report.new(dump, dir)
        report.write
        geo = PtmallocDump::Geometry.new(dump, report.images)

        image, x, y = geo.pixel_for(used + 64, :byte_map)
        expect(state_colors(:in_use)).to include(color_at(File.join(dir, image[:file]), x, y))
        image, x, y = geo.pixel_for(free_big + 20_000, :byte_map)
        expect(state_colors(free_chunk.state)).to include(color_at(File.join(dir, image[:file]), x, y))

        mid_page = ->(addr) { (addr + page) & ~(page - 1) }
        image, x, y = geo.pixel_for(mid_page.call(used), :page_map)
        expect(color_at(File.join(dir, image[:file]), x, y)).to eq(page_color(:in_use))
        inside = mid_page.call(free_big + 4 * page)
        expect(inside).to be >= free_chunk.address
        expect(inside + page).to be <= free_chunk.end_address
        image, x, y = geo.pixel_for(inside, :page_map)
        # free and resident; top's own colour where the block merged into top (in an arena an earlier
        # thread used, the guard after it may have come from a free chunk elsewhere)
        expect(color_at(File.join(dir, image[:file]), x, y)).to eq(page_color(free_chunk.state == :top ? :top : :free_resident))
        image, x, y = geo.pixel_for(mid_page.call(released + 8 * page), :page_map)
        expect(color_at(File.join(dir, image[:file]), x, y)).to eq(page_color(:released))
      ensure
        GC.enable
        NativeThreads.prepare_free(0, [used, g1, g2, g3]).call
        NativeThreads.stop(0)
      end
    end

    it "draws top in the owner maps as the free memory the legend names, not in an owner's colour" do
      dump = dump_and_load
      dir = File.join(tmpdir, "owners")
      Dir.mkdir(dir)
      report = PtmallocDump::Report.new(dump, dir)
      report.write
      geo = PtmallocDump::Geometry.new(dump, report.images)
      idx = PtmallocDump::Render.palette[:indexed]
      free_shades = [64, 65, 66, 67].map { |i| idx[i] } # PTMD_PAL_OWNER(0, shade, dim): "free (any bin, cache or top)"
      tops = dump.arenas.map { |a| dump.chunk_at(a.top) }.compact.select { |c| c.state == :top && c.size >= 64 }
      expect(tops).not_to be_empty
      tops.each do |top|
        image, x, y = geo.pixel_for(top.address + 32, :owner_map)
        expect(free_shades).to include(color_at(File.join(dir, image[:file]), x, y))
      end
      html = File.read(File.join(dir, "index.html"))
      expect(html).to include("free (any bin, cache or top)")
    end

    it "splits a heap into numbered tiles under the pixel budget and draws every byte" do
      dump = dump_and_load
      dir = File.join(tmpdir, "tiles")
      Dir.mkdir(dir)
      report = PtmallocDump::Report.new(dump, dir, max_tile_pixels: 1024 * 64)
      report.write
      main = dump.heaps.first
      tiles = report.images.select { |im| im[:group] == main.index && im[:kind] == :byte_map }
      expect(tiles.size).to be > 1
      expect(tiles.map { |t| t[:tile] }).to eq((0...tiles.size).to_a)
      expect(tiles.sum { |t| t[:units] }).to eq((main.end - (main.start & ~4095) + 4095) / 4096 * 256)
      tiles.each do |t|
        png = ChunkyPNG::Image.from_file(File.join(dir, t[:file]))
        expect(png.width * png.height).to be <= 1024 * 64
        expect([png.width, png.height]).to eq([t[:width], t[:height]])
      end
    end
  end

  describe "the command" do
    let(:dump_path) { File.join(tmpdir, "cli.dump").tap { |p| PtmallocDump.dump(p) } }

    it "prints the summary as JSON with exactly Dump#summary's figures" do
      out, err, status = visualize("--json", dump_path)
      expect(status).to be_success, err
      json = JSON.parse(out, symbolize_names: true)
      dump = PtmallocDump.load(dump_path)
      expect(json[:summary]).to eq(JSON.parse(JSON.dump(dump.summary), symbolize_names: true))
      expect(json[:findings].map { |f| [f[:text], f[:bytes]] }).to eq(PtmallocDump::Findings.new(dump).top(3).map { |f| [f.text, f.bytes] })
      # ranked by what to do, each with its next step
      expect(json[:findings].map { |f| f[:rank] }).to eq(json[:findings].map { |f| f[:rank] }.sort)
      expect(json[:findings].map { |f| f[:step] }).to all(be_a(String))
      expect(json[:advice].map { |a| a[:text] }).to eq(PtmallocDump::Advice.new(dump).lines.map(&:text))
    end

    it "prints JSON and writes a UTF-8 report when a string in the dump is not UTF-8" do
      bytes = File.binread(dump_path).b
      host = PtmallocDump.load(dump_path).header[:hostname]
      key = bytes.index([8].pack("v") + "hostname".b)
      expect(bytes[key + 10, 4].unpack1("V")).to eq(host.bytesize)
      bytes.setbyte(key + 14, 0xff)
      bytes[-56 + 24 + 24, 4] = [Zlib.crc32(bytes[0, bytes.size - 56])].pack("V")
      File.binwrite(dump_path, bytes)
      out, err, status = visualize("--json", dump_path)
      expect(status).to be_success, err
      expect(JSON.parse(out).dig("header", "hostname")).to eq("\uFFFD#{host[1..]}")
      out_dir = File.join(tmpdir, "report")
      _o, err, status = visualize(dump_path, out_dir)
      expect(status).to be_success, err
      html = File.read(File.join(out_dir, "index.html"), encoding: "UTF-8")
      expect(html).to be_valid_encoding
      expect(html).to include(CGI.escapeHTML("\uFFFD#{host[1..]}"))
    end

    it "prints a text summary whose exact figures are Dump#summary's" do
      out, err, status = visualize("--summary", dump_path)
      expect(status).to be_success, err
      s = PtmallocDump.load(dump_path).summary
      expect(out).to include("in use", "free, resident", "verify: verified")
      expect(out[/^in use .*\((\d+) B\)/, 1].to_i).to eq(s[:in_use_bytes] + s[:mmapped_bytes])
      expect(out[/^in use .* in (\d+) chunks of the arenas/, 1].to_i).to eq(s[:in_use_count])
      expect(out[/^free, resident .*\((\d+) B\)/, 1].to_i).to eq(s[:free_resident_bytes])
      expect(out[/^malloc heap .*\((\d+) B\)/, 1].to_i).to eq(s[:arena] + s[:hblkhd])
    end

    # One definition of each headline figure (Dump#figures), checked against glibc's own counters, and
    # every output fed from it: given other figures, each output prints those.
    it "prints in use, the malloc heap, mmapped chunks and free but resident as Dump#figures has them, everywhere" do
      # above the largest mmap threshold glibc adjusts to (32 MiB): an mmapped chunk, once the top chunk
      # is trimmed (malloc serves a request from a top chunk large enough before it thinks of mmap)
      Fiddle::Function.new(Fiddle::Handle::DEFAULT["malloc_trim"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_INT).call(0)
      big = Fiddle.malloc(40 << 20)
      path = File.join(tmpdir, "figures.dump")
      PtmallocDump.dump(path)
      dump = PtmallocDump.load(path)
      f = dump.figures
      s = dump.summary
      mi = dump.header[:mallinfo2]
      expect(dump.header[:oracles_captured]).to be(true)
      expect(dump.chunk_at(big - 16).state).to eq(:mmapped)
      # glibc 2.43's mremap_chunk counts 16 bytes too many in hblkhd per remap, for good (glibc_rules_spec):
      # after this process's earlier remaps, hblkhd exceeds the mappings by that, and the verification says so
      over = mi[:hblkhd] - f[:mmapped_chunks]
      if dump.header[:mremap_overcounts] && over.positive?
        expect(over % 16).to eq(0)
        expect(dump.verify.notes.join).to include("mremap_chunk counted #{over / 16} remap(s)")
      else
        expect(over).to eq(0)
      end
      expect(f[:malloc_heap]).to eq(mi[:arena] + mi[:hblkhd] - over)
      expect(f[:mmapped_chunk_count]).to eq(mi[:hblks])
      # glibc's uordblks counts the chunks in the threads' tcaches and the allocator's own chunks as
      # allocated: the program holds neither
      expect(f[:in_use]).to eq(mi[:uordblks] - s[:tcache_bytes] - s[:meta_bytes] + mi[:hblkhd] - over)
      expect(f[:in_use_share]).to eq(f[:in_use].fdiv(f[:malloc_heap]))
      r = s[:ruby]
      expect(r[:owned_bytes] + r[:ruby_pages_in_malloc_bytes].to_i + r[:unattributed_bytes]).to eq(f[:in_use])

      hb = ->(b) { PtmallocDump::FormatHelpers.human_bytes(b) }
      outputs = lambda do |figures, dir|
        text = PtmallocDump::TextSummary.new(dump).to_s
        FileUtils.mkdir_p(dir)
        html = File.read(PtmallocDump::Report.new(dump, dir).write)
        { text: { heap: text[/^malloc heap +(.*)$/, 1], in_use: text[/^in use +(.*)$/, 1],
                  mmapped: text[/^mmapped +(.*)$/, 1], free_resident: text[/^free, resident +(.*)$/, 1],
                  owners: text[/^ruby owners +(.*)$/, 1] },
          cards: html.scan(%r{<div class="card[^"]*"><b>([^<]*)</b>([^<]*)}).to_h { |v, label| [label, v] },
          json: PtmallocDump::JsonSummary.new(dump).to_h[:figures],
          explorer: PtmallocDump::Explorer.new(dump).data[:views].find { |v| v[:group] == "mmapped" }[:label],
          figures: figures }
      end
      check = lambda do |o|
        g = o[:figures]
        share = PtmallocDump::FormatHelpers.percent(g[:in_use], g[:malloc_heap])
        expect(o[:text][:heap]).to start_with("#{hb.call(g[:malloc_heap])} (#{g[:malloc_heap]} B)")
        expect(o[:text][:in_use]).to start_with("#{hb.call(g[:in_use])} (#{g[:in_use]} B), #{share} of the malloc heap")
        expect(o[:text][:mmapped]).to start_with("#{hb.call(g[:mmapped_chunks])} in #{g[:mmapped_chunk_count]} chunk(s)")
        expect(o[:text][:free_resident]).to start_with("#{hb.call(g[:free_resident])} (#{g[:free_resident]} B)")
        expect(o[:text][:owners]).to include(" of the #{hb.call(g[:in_use])} in use ")
        expect(o[:cards].values_at("malloc heap", "in use", "free but resident"))
          .to eq([g[:malloc_heap], g[:in_use], g[:free_resident]].map(&hb))
        expect(o[:json]).to eq(g)
        expect(o[:explorer]).to eq("#{g[:mmapped_chunk_count]} mmapped chunk(s), #{hb.call(g[:mmapped_chunks])}")
      end
      check.call(outputs.call(f, File.join(tmpdir, "real")))
      other = f.to_h { |k, v| [k, k == :in_use_share ? v / 2 : v * 3 + 4096] }
      allow(dump).to receive(:figures).and_return(other)
      check.call(outputs.call(other, File.join(tmpdir, "other")))
    ensure
      Fiddle.free(big) if big
    end

    it "prints one block per dump for --summary and --json given several, each its own dump's" do
      other = File.join(tmpdir, "other.dump")
      keep = Array.new(5000) { |i| "y" * (100 + i % 200) }
      PtmallocDump.dump(other)
      paths = [dump_path, other]
      out, err, status = visualize("--summary", *paths)
      expect(status).to be_success, err
      blocks = out.split(/^(?=#{paths.map { |p| Regexp.escape(p) }.join('|')}:$)/)
      expect(blocks.map { |b| b.lines.first.chomp }).to eq(paths.map { |p| "#{p}:" })
      blocks.zip(paths).each do |block, path|
        single, = visualize("--summary", path)
        expect(block.lines.drop(1).join.rstrip).to eq(single.rstrip)
      end
      out, err, status = visualize("--json", *paths)
      expect(status).to be_success, err
      list = JSON.parse(out, symbolize_names: true)
      expect(list.map { |j| j[:summary][:in_use_bytes] }).to eq(paths.map { |p| PtmallocDump.load(p).summary[:in_use_bytes] })
      expect(keep.size).to eq(5000)
    end

    it "prints the RSS, the Ruby owners (the summary's own figures), the findings and the advice in --summary" do
      out, err, status = visualize("--summary", dump_path)
      expect(status).to be_success, err
      dump = PtmallocDump.load(dump_path)
      r = dump.summary[:ruby]
      name, e = r[:by_class].first
      expect(out).to include("ruby owners:", "what stands out:", "advice")
      # the owners' line out of what is in use: the arenas' in-use chunks and the mmapped ones
      s = dump.summary
      in_use = PtmallocDump::FormatHelpers.human_bytes(s[:in_use_bytes] + s[:hblkhd])
      expect(out[/^ruby owners +(.*)$/, 1]).to start_with("#{PtmallocDump::FormatHelpers.human_bytes(r[:owned_bytes])} of the #{in_use} in use")
      expect(out[/^  by class +(.*)$/, 1]).to start_with("#{name} #{PtmallocDump::FormatHelpers.human_bytes(e[:bytes])}")
      type, te = r[:by_type].first
      expect(out[/^  by type +(.*)$/, 1]).to start_with("#{type} #{PtmallocDump::FormatHelpers.human_bytes(te[:bytes])}")
      PtmallocDump::Findings.new(dump).top(3).each_with_index { |f, i| expect(out).to include("#{i + 1}. #{f.text}") }
      expect(out).to match(/^rss +/)
    end

    it "--explain says what an address is, in text and JSON, and where it is outside every heap" do
      dump = PtmallocDump.load(dump_path)
      chunk = dump.each_chunk.find { |c| c.state == :in_use && dump.ruby.owner_of(c) }
      out, err, status = visualize("--explain", format("0x%x", chunk.address + 20), "--json", dump_path)
      expect(status).to be_success, err
      e = JSON.parse(out)
      expect(e["chunk"]).to include("address" => format("0x%x", chunk.address), "size" => chunk.size, "state" => "in_use", "offset" => 20)
      o = dump.ruby.owner_of(chunk)
      expect(e["owner"]).to include("class" => o.class_name, "object_address" => format("0x%x", o.address))
      expect(e["heap"]["index"]).to eq(chunk.heap.index)
      expect(e["page"]["residency"]).to eq(dump.pages[chunk.heap.index].state_at(chunk.address + 20).to_s)
      out, err, status = visualize("--explain", (chunk.address + 20).to_s, dump_path)
      expect(status).to be_success, err
      expect(out).to include("chunk          #{format('0x%x', chunk.address)}, #{chunk.size} B", "4 B into its user data")
      out, _e, status = visualize("--explain", "0x10", dump_path)
      expect(status).to be_success
      expect(out).to eq("0x10 is in no heap, mmapped chunk or Ruby object page of this dump\n")
      require "objspace"
      obj = Object.new
      path = File.join(tmpdir, "slot.dump")
      PtmallocDump.dump(path)
      address = Integer(JSON.parse(ObjectSpace.dump(obj))["address"])
      out, err, status = visualize("--explain", format("0x%x", address + 8), path)
      expect(status).to be_success, err
      page = PtmallocDump.load(path).ruby.pages.find { |pg| (pg.start...pg.end).cover?(address) }
      expect(out).to start_with("#{format('0x%x', address + 8)} is in a Ruby object page " \
                                "(#{format('0x%x', page.start)}-#{format('0x%x', page.end)}), slot " \
                                "#{(address - page.start) / page.stride}: T_OBJECT Object at " \
                                "#{format('0x%x', address)}")
      expect(obj).to be_an(Object)
      _o, err, status = visualize("--explain", "nowhere", dump_path)
      expect(status.exitstatus).to eq(2)
      expect(err).to include("nowhere is not an address")
    end

    it "--compare names figures as the report does, shows each worker's owners and what makes the deviant one deviate" do
      # three workers forked from this process, so that the median is a worker's own figure; each
      # collects first, so that they differ by the deviant's strings and not by the garbage that the
      # GC's timing in each child leaves or frees
      paths = %w[big small other].map { |n| File.join(tmpdir, "#{n}.dump") }
      pids = paths.map.with_index do |path, i|
        fork do
          GC.start
          keep = i.zero? ? Array.new(20_000) { |k| "deviant-#{k}-" * 200 } : []
          PtmallocDump.dump(path)
          keep.clear
          exit!(0)
        rescue Exception => e # rubocop:disable Lint/RescueException -- whatever ends the child, the parent reports
          File.write("#{path}.error", "#{e.class}: #{e.message}")
          exit!(1)
        end
      end
      pids.zip(paths) { |pid, path| expect(Process.wait2(pid)[1]).to be_success, -> { File.read("#{path}.error") } }
      out, err, status = visualize("--compare", *paths, File.join(tmpdir, "fleet"))
      expect(status).to be_success, err
      big = PtmallocDump.load(paths[0])
      small = PtmallocDump.load(paths[1])
      excess = big.summary[:ruby][:by_class]["String"][:bytes] - small.summary[:ruby][:by_class]["String"][:bytes]
      expect(excess).to be >= 20_000 * 2_000
      expect(out).to include("deviates most: pid #{big.header[:pid]}")
      above = out[/above the median worker: (.*)$/, 1].split(", ")
      expect(above).to include("String instances #{PtmallocDump::FormatHelpers.signed_bytes(excess)}")
      strings = PtmallocDump::FormatHelpers.human_bytes(big.summary[:ruby][:by_class]["String"][:bytes])
      expect(out).to include("pid #{big.header[:pid]}: String #{strings}")
      html = File.read(File.join(tmpdir, "fleet", "index.html"))
      REXML::Document.new(html)
      expect(html).to include("Owners by worker", "malloc heap (arenas)", "mmapped chunks", "String instances")
      expect(html).not_to match(/>(hblkhd|arena|in use bytes)</)
    end

    it "says before any figure where the figures may mislead" do
      path = File.join(tmpdir, "plain.dump")
      PtmallocDump.dump(path, ruby: false)
      out_dir = File.join(tmpdir, "plain")
      _o, err, status = visualize(path, out_dir)
      expect(status).to be_success, err
      html = File.read(File.join(out_dir, "index.html"))
      banner = html[%r{<div class="banner">(.*?)</div>}, 1]
      expect(banner).to include("No Ruby owners: the dump was taken with ruby: false.")
      expect(html.index('class="banner"')).to be < html.index('class="bigbar"')
      _o, err, status = visualize(dump_path, File.join(tmpdir, "with-ruby"))
      expect(status).to be_success, err
      banner = File.read(File.join(tmpdir, "with-ruby", "index.html"))[%r{<div class="banner">(.*?)</div>}, 1]
      if SpecHelpers.qemu_user?
        # qemu-user's own thread is in /proc/self/task, with no struct pthread of the guest: the dump
        # cannot account for every task, and says so
        expect(PtmallocDump.load(dump_path).header[:threads_complete]).to be(false)
        expect(banner).to eq("Not every thread was found: tcache memory of the others counts as in use.")
      elsif LibcFacts.mallinfo_name == "mallinfo"
        # the one thing to say of a dump with Ruby data before glibc 2.33: the counters it was checked against
        expect(banner).to eq("glibc #{LibcFacts.glibc_version} has only mallinfo(), whose counters keep 32 bits: the check against it is partial.")
      else
        expect(banner).to be_nil
      end
    end

    it "renders into a new directory, refuses a non-empty one without --force" do
      out_dir = File.join(tmpdir, "report")
      _o, err, status = visualize(dump_path, out_dir)
      expect(status).to be_success, err
      expect(File.exist?(File.join(out_dir, "index.html"))).to be(true)
      _o, err, status = visualize(dump_path, out_dir)
      expect(status.exitstatus).to eq(2)
      expect(err).to include("is not empty (use --force")
      _o, err, status = visualize("--force", dump_path, out_dir)
      expect(status).to be_success, err
      nested = File.join(tmpdir, "no", "report")
      out, err, status = visualize(dump_path, nested)
      expect([out, err, status.exitstatus])
        .to eq(["", "ptmalloc-visualize: cannot make #{nested}: its parent directory #{File.dirname(nested)} " \
                    "does not exist\n", 1])
      expect(File).not_to exist(File.dirname(nested))
    end

    it "has --help and --version" do
      out, _e, status = visualize("--help")
      expect(status).to be_success
      expect(out).to include("Usage: ptmalloc-visualize", "--summary", "--json", "--force")
      out, _e, status = visualize("--version")
      expect(status).to be_success
      expect(out).to eq("ptmalloc-visualize #{PtmallocDump::VERSION}\n")
    end

    it "exits non-zero with one clear line for every bad DUMP, never a backtrace" do
      good = File.binread(dump_path)
      bad = { "empty" => "", "random" => Random.new(3).bytes(10_000) }
      rng = Random.new(11)
      10.times { |i| bad["truncated#{i}"] = good[0, rng.rand(good.size)] }
      flipped = good.dup
      flipped.setbyte(good.size / 2, flipped.getbyte(good.size / 2) ^ 0x10)
      bad["flipped"] = flipped
      bad.each do |name, bytes|
        f = File.join(tmpdir, "#{name}.dump")
        File.binwrite(f, bytes)
        _o, err, status = visualize("--summary", f)
        expect(status.exitstatus).to eq(1), "#{name}: #{err}"
        expect(err.lines.size).to eq(1), "#{name}: #{err}"
        expect(err).to start_with("ptmalloc-visualize: #{f}: ")
        expect(err).not_to match(/\.rb:\d+/)
      end
      _o, err, status = visualize(tmpdir, File.join(tmpdir, "x"))
      expect(status.exitstatus).to eq(1)
      expect(err).to eq("ptmalloc-visualize: #{tmpdir}: is a directory, not a dump file\n")
      _o, err, status = visualize(File.join(tmpdir, "missing.dump"), File.join(tmpdir, "y"))
      expect(status.exitstatus).to eq(1)
      expect(err).to include("No such file or directory")
    end
  end

  describe "index.html" do
    let(:out_dir) do
      File.join(tmpdir, "report").tap do |d|
        path = File.join(tmpdir, "r.dump")
        PtmallocDump.dump(path)
        _o, err, status = visualize(path, d)
        raise err unless status.success?
      end
    end

    it "is well-formed, self-contained, and escapes what it shows" do
      html = File.read(File.join(out_dir, "index.html"))
      doc = REXML::Document.new(html)
      expect(doc.root.name).to eq("html")
      srcs = REXML::XPath.match(doc, "//img").map { |img| img.attributes["src"] }
      expect(srcs).not_to be_empty
      srcs.each { |s| expect(File.exist?(File.join(out_dir, s))).to be(true) }
      expect(html).not_to match(%r{(src|href)="(https?:)?//})
      expect(html).not_to match(/<script[^>]*src=|fetch\(|XMLHttpRequest|https?:/)
      expect(File.exist?(File.join(out_dir, "explorer-data.js"))).to be(true)
    end

    it "loads in headless Chromium: every image, no console error, the totals on the page", :browser do
      expect(Browser).to be_available, "chromium and chromedriver are missing: bin/setup installs them"

      Browser.open(File.join(tmpdir, "chrome-profile")) do |b|
        b.visit("file://#{File.join(out_dir, 'index.html')}")
        expect(b.script("return Array.from(document.images).every(i => i.loading === 'lazy')")).to be(true)
        b.script("Array.from(document.images).forEach(i => { i.loading = 'eager' })")
        b.wait_for("return Array.from(document.images).every(i => i.complete)")
        b.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready")
        images = b.script("return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
        expect(images).not_to be_empty
        images.each { |src, complete, width| expect([src, complete, width.positive?]).to eq([src, true, true]) }
        errors = b.console.select { |e| e["level"] == "SEVERE" }
        expect(errors).to eq([])
        text = b.script("return document.body.innerText")
        expect(text).to include("free but resident", "Reclaimable now", "Fragmentation", "The 20 largest free and resident runs", "Heap explorer")
        expect(text).to match(/^RSS .* \(the kernel's VmRSS at the dump: .*\)/) # a dump accounts the whole RSS
        shot = b.screenshot
        File.binwrite(File.join(tmpdir, "report.png"), shot)
        expect(ChunkyPNG::Image.from_blob(shot).width).to be > 800
      end
    end
  end
end
