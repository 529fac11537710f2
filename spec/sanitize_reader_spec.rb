# frozen_string_literal: true

require "spec_helper"
require "zlib"

# The reader, the figures and the renderer over real dumps. `rake spec:sanitize` runs this file in a
# process preloaded with AddressSanitizer (PTMALLOC_DUMP_ASAN=1), over dumps it made beforehand in the
# directory PTMALLOC_DUMP_SANITIZE_DUMPS names: under ASan malloc is ASan's own, so dumping this
# process itself must be refused.
RSpec.describe "the reader and renderer over real dumps" do
  ASAN = ENV["PTMALLOC_DUMP_ASAN"] == "1"

  def dumps
    return Dir[File.join(ENV.fetch("PTMALLOC_DUMP_SANITIZE_DUMPS"), "*.dump")].sort if ASAN

    %w[plain ruby refs].map do |name|
      File.join(tmpdir, "#{name}.dump").tap do |p|
        PtmallocDump.dump(p, ruby: name != "plain", references: name == "refs")
      end
    end
  end

  it "loads, summarises, verifies, attributes and renders each dump" do
    files = dumps
    expect(files.size).to be >= 3
    files.each_with_index do |f, i|
      d = PtmallocDump.load(f)
      expect(d.summary[:arena]).to be > 0
      expect(d.analysis[:page_classes]).not_to be_empty
      expect(d.verify.differences).to eq([])
      d.ruby&.summary
      out = File.join(tmpdir, "report#{i}")
      Dir.mkdir(out)
      PtmallocDump::Report.new(d, out).write
      expect(File.size(File.join(out, "index.html"))).to be > 1000
      expect(PtmallocDump::TextSummary.new(d).to_s).to include("verify:")
    end
  end

  it "survives mutated and truncated dumps: each loads (and its figures compute) or raises FormatError" do
    good = File.binread(dumps.last).b
    rng = Random.new(99)
    loaded = 0
    300.times do |i|
      bytes = i.even? ? good[0, rng.rand(good.size)] : good.dup
      if i.odd?
        (1 + rng.rand(6)).times { bytes.setbyte(rng.rand(bytes.size - 56), rng.rand(256)) }
        bytes[-56 + 48, 4] = [Zlib.crc32(bytes[0, bytes.size - 56])].pack("V")
      end
      f = File.join(tmpdir, "m.dump")
      File.binwrite(f, bytes)
      begin
        d = PtmallocDump.load(f)
      rescue PtmallocDump::FormatError
        next
      end
      loaded += 1
      d.summary
      d.analysis
      d.ruby&.summary
    end
    expect(loaded).to be > 0
  end

  it "gives one clear line for a bad file on the command line" do
    f = File.join(tmpdir, "cut.dump")
    File.binwrite(f, File.binread(dumps.first)[0, 1000])
    _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, File.join(SpecHelpers::ROOT, "exe", "ptmalloc-visualize"), "--summary", f)
    expect(status.exitstatus).to eq(1)
    expect(err).to start_with("ptmalloc-visualize: #{f}: truncated")
  end

  it "refuses to dump a process whose malloc is not glibc's (AddressSanitizer's, under spec:sanitize)" do
    if ASAN
      expect { PtmallocDump.dump(File.join(tmpdir, "x.dump")) }.to raise_error(PtmallocDump::UnsupportedAllocatorError)
    else
      expect(PtmallocDump.dump(File.join(tmpdir, "x.dump"))[:arena]).to be > 0
    end
  end
end
