# frozen_string_literal: true

# rake bench: rendering (ptmalloc-visualize DUMP OUTDIR) of a dump of ~1,000,000 chunks (1.2 GiB of
# heap), of a 1 GiB heap of big blocks and of 50 heaps (50 arenas): wall time and peak RSS of the
# renderer process; the page in headless Chromium (first contentful paint, the explorer ready, its
# JavaScript heap, the time to answer a hover and to redraw); and the one-PNG-per-4-KiB-page approach of
# older visualizers (chunky_png, timed on a sample of pages and scaled to the dump's page count).
require "benchmark"
require "chunky_png"
require "fileutils"
require "open3"
require "rbconfig"
require "tmpdir"
require "ptmalloc_dump"
require_relative "../spec/support/browser"

module RenderBench
  ROOT = File.expand_path("..", __dir__)
  HELPER = File.expand_path("ext/bench_heap.c", __dir__)

  module_function

  # A child process builds a heap and dumps it: ~1M chunks, or big blocks up to 1 GiB.
  def make_dump(path, kind)
    so = File.join(File.dirname(path), "bench_heap.so")
    system("cc", "-O2", "-shared", "-fPIC", "-o", so, HELPER, exception: true) unless File.exist?(so)
    code = <<~RUBY
      require "fiddle"
      lib = Fiddle.dlopen(#{so.inspect})
      GC.disable
      if #{kind.inspect} == :chunks
        Fiddle::Function.new(lib["bh_build"], [Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT], Fiddle::TYPE_SIZE_T).call(1_000_000, 42)
      elsif #{kind.inspect} == :heaps
        # 49 threads, each in an arena of its own (MALLOC_ARENA_MAX=64 in the environment): 50 heaps
        ready = Queue.new
        done = Queue.new
        threads = Array.new(49) do |t|
          Thread.new do
            b = Array.new(2_000) { |i| Fiddle.malloc(64 + (i * 37 + t) % 2_000) }
            b.each_with_index { |x, i| Fiddle.free(x) if i.odd? }
            ready << t
            done.pop
          end
        end
        49.times { ready.pop }
      else
        # 1 GiB of 96 KiB blocks (below the mmap threshold: one heap), every fourth freed
        blocks = Array.new(10_923) { Fiddle.malloc(96 * 1024).tap { |b| Fiddle::Pointer.new(b)[0, 8] = "x" * 8 } }
        blocks.each_with_index { |b, i| Fiddle.free(b) if (i % 4).zero? }
      end
      PtmallocDump.dump(#{path.inspect})
      threads&.each { done << 1 }
    RUBY
    _o, e, s = Open3.capture3({ "MALLOC_ARENA_MAX" => "64" }, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rptmalloc_dump", "-e", code)
    abort("making the #{kind} dump failed: #{e}") unless s.success?
  end

  # Runs the renderer in a child; returns [seconds, peak RSS in KiB].
  def render(dump, outdir)
    FileUtils.rm_rf(outdir)
    code = <<~RUBY
      require "ptmalloc_dump/visualize_cli"
      PtmallocDump::VisualizeCLI.new([#{dump.inspect}, #{outdir.inspect}], out: File.open(File::NULL, "w")).run
      $stdout.puts File.read("/proc/self/status")[/VmHWM:\\s+(\\d+)/, 1]
    RUBY
    out = nil
    t = Benchmark.realtime do
      out, e, s = Open3.capture3(RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rptmalloc_dump", "-e", code)
      abort("rendering failed: #{e}") unless s.success?
    end
    [t, out.to_i]
  end

  # One small PNG per page, as the older visualizers do: 256 x 16 px, one pixel per 16 bytes.
  def per_page_seconds(dump, sample)
    by_page = Hash.new { |h, k| h[k] = [] }
    dump.each_chunk do |c|
      break if by_page.size > sample

      (c.address & ~4095).step(c.end_address - 1, 4096) do |pg|
        by_page[pg] << c if by_page.size <= sample || by_page.key?(pg)
      end
    end
    pages = by_page.keys.first(sample)
    dir = Dir.mktmpdir("ptmd-perpage")
    t = Benchmark.realtime do
      pages.each_with_index do |pg, i|
        img = ChunkyPNG::Image.new(256, 16, ChunkyPNG::Color::WHITE)
        by_page[pg].each do |c|
          color = c.state == :in_use ? ChunkyPNG::Color.rgb(59, 115, 185) : ChunkyPNG::Color.rgb(227, 26, 28)
          ([c.address, pg].max - pg).step([c.end_address, pg + 4096].min - pg - 1, 16) do |off|
            img[(off / 16) % 256, (off / 16) / 256] = color
          end
        end
        img.save(File.join(dir, "page#{i}.png"))
      end
    end
    FileUtils.rm_rf(dir)
    t / pages.size
  end

  # The report in headless Chromium: first contentful paint and the explorer ready (ms from navigation
  # start), its JavaScript heap (MiB), and the slowest of 200 hovers and of 10 redraws (ms, measured in
  # the page around the event handler).
  def page(outdir)
    Dir.mktmpdir("ptmd-bench-chrome") do |profile|
      Browser.open(profile) do |b|
        b.visit("file://#{File.join(outdir, 'index.html')}")
        fcp = b.wait_for("const p = performance.getEntriesByName('first-contentful-paint')[0]; return p && p.startTime")
        b.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready", timeout: 120)
        ready = b.script("return performance.now()")
        hover, redraw = b.script(<<~JS)
          const c = document.getElementById('xp-map'), r = c.getBoundingClientRect();
          let hover = 0, redraw = 0;
          for (let k = 0; k < 200; k++) {
            const t = performance.now();
            c.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + 1 + (k * 37) % 890, clientY: r.top + 1 + (k * 53) % 500, bubbles: true }));
            hover = Math.max(hover, performance.now() - t);
          }
          for (let k = 0; k < 10; k++) {
            const t = performance.now();
            window.ptmdExplorer.show(window.ptmdExplorer.state().view, 2 ** (k + 2), k * 100);
            redraw = Math.max(redraw, performance.now() - t);
          }
          return [hover, redraw];
        JS
        heap = b.script("return performance.memory ? performance.memory.usedJSHeapSize : 0")
        { fcp_ms: fcp, ready_ms: ready, js_heap_mib: heap / 1024.0 / 1024, hover_ms: hover, redraw_ms: redraw }
      end
    end
  end

  def run
    dir = Dir.mktmpdir("ptmd-render-bench")
    results = {}
    { chunks: "1M chunks", gib: "1 GiB heap", heaps: "50 heaps" }.each do |kind, label|
      path = File.join(dir, "#{kind}.dump")
      make_dump(path, kind)
      dump = PtmallocDump.load(path)
      times = Array.new(3) { render(path, File.join(dir, "out-#{kind}")) }
      t, rss = times.min_by(&:first)
      pages = dump.pages.sum(&:size)
      images = Dir[File.join(dir, "out-#{kind}", "*.png")].size
      results[kind] = { seconds: t, rss_kib: rss, pages: pages, chunks: dump.chunk_count, images: images }
      puts format("%-11s %9d chunks %8d pages %3d heaps %s  render %.2f s  peak RSS %d MiB  (%d images)",
                  label, dump.chunk_count, pages, dump.heaps.size, PtmallocDump::FormatHelpers.human_bytes(dump.summary[:arena] + dump.summary[:hblkhd]),
                  t, rss / 1024, images)
      pg = page(File.join(dir, "out-#{kind}"))
      results[kind][:page] = pg
      puts format("%-11s page: first paint %.0f ms, explorer ready %.0f ms, JS heap %.0f MiB, hover <= %.1f ms, redraw <= %.0f ms",
                  "", pg[:fcp_ms], pg[:ready_ms], pg[:js_heap_mib], pg[:hover_ms], pg[:redraw_ms])
      next unless kind == :chunks

      per_page = per_page_seconds(dump, 2000)
      naive = per_page * pages
      puts format("%-11s one PNG per page (chunky_png, %.2f ms/page over 2000 pages) -> %.0f s for %d pages: %.0fx slower",
                  "", per_page * 1000, naive, pages, naive / t)
    end
    results
  ensure
    FileUtils.rm_rf(dir) if dir
  end
end

RenderBench.run if $PROGRAM_NAME == __FILE__
