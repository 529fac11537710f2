# frozen_string_literal: true

require "open3"
require "spec_helper"

# arm64 kernels run with 4 KiB, 16 KiB or 64 KiB pages; qemu-user on this machine gives 4 KiB only.
# The reader, the figures and the report take the page size a dump records: synthetic dumps with
# the larger pages (test/unit/synth.c, written by the unit binary), checked against a brute-force
# sum over their page maps and drawn.
RSpec.describe "dumps with the larger pages of arm64 kernels" do
  def synthetic(page_size)
    out, status = Open3.capture2e("bundle", "exec", "rake", "tmp/unit/ptmd_unit", chdir: SpecHelpers::ROOT)
    raise "the unit binary could not be built: #{out}" unless status.success?

    path = File.join(tmpdir, "synthetic-#{page_size}.ptmd")
    out, status = Open3.capture2e(File.join(SpecHelpers::ROOT, "tmp/unit/ptmd_unit"), "--write", path, "7",
                                  page_size.to_s)
    raise "no synthetic dump: #{out}" unless status.success?

    path
  end

  # Bytes of each heap on pages in state `state`, page by page.
  def brute_force(dump, state)
    ps = dump.header[:page_size]
    dump.heaps.sum do |h|
      map = dump.pages[h.index]
      (h.start & ~(ps - 1)).step(h.end - 1, ps).sum do |p|
        lo = [p, h.start].max
        hi = [p + ps, h.end].min
        map.state_at(lo) == state ? hi - lo : 0
      end
    end
  end

  [16_384, 65_536].each do |page_size|
    it "reads, sums and draws a dump with #{page_size / 1024} KiB pages" do
      dump = PtmallocDump.load(synthetic(page_size))
      expect(dump.header[:page_size]).to eq(page_size)
      summary = dump.summary
      expect(summary[:resident_bytes]).to eq(brute_force(dump, :present))
      expect(summary[:swapped_bytes]).to eq(brute_force(dump, :swapped))
      expect(summary[:resident_bytes]).to be > 0
      # one page of the heap with the most of them: every byte of it is the same pixel of the page
      # map, the next page another
      heap = dump.heaps.max_by { |h| h.end - h.start }
      first = (heap.start + page_size - 1) & ~(page_size - 1)
      expect(first + page_size).to be <= heap.end
      dir = File.join(tmpdir, "report-#{page_size}")
      Dir.mkdir(dir)
      report = PtmallocDump::Report.new(dump, dir)
      page = File.read(report.write)
      expect(page).to include("free but resident: #{PtmallocDump::FormatHelpers.human_bytes(summary[:free_resident_bytes])}")
      geometry = PtmallocDump::Geometry.new(dump, report.images)
      pixel = ->(addr) { geometry.pixel_for(addr, :page_map) }
      expect(pixel.call(first + page_size - 1)).to eq(pixel.call(first))
      expect(pixel.call(first + page_size)).not_to eq(pixel.call(first)) if first + 2 * page_size <= heap.end
      text, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--summary",
                                         dump.path)
      expect(status).to be_success, err
      resident = text[/^resident +(.*)$/, 1]
      expect(resident).to start_with(PtmallocDump::FormatHelpers.human_bytes(summary[:resident_bytes]))
      expect(resident).to end_with("in #{page_size / 1024} KiB pages")
    end
  end
end
