# frozen_string_literal: true

require "spec_helper"

# The reader, the figures and the renderer over real dumps. `rake spec:sanitize` runs this file in a
# process preloaded with AddressSanitizer (PTMALLOC_DUMP_ASAN=1), over dumps it made beforehand: under
# ASan malloc is ASan's own, so dumping this process itself must be refused.
RSpec.describe "the reader and renderer over real dumps" do
  DUMP_DIR = File.join(SpecHelpers::ROOT, "tmp", "sanitize")
  ASAN = ENV["PTMALLOC_DUMP_ASAN"] == "1"

  def dumps
    return Dir[File.join(DUMP_DIR, "*.dump")].sort if ASAN

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

  it "refuses to dump a process whose malloc is not glibc's (AddressSanitizer's, under spec:sanitize)" do
    if ASAN
      expect { PtmallocDump.dump(File.join(tmpdir, "x.dump")) }.to raise_error(PtmallocDump::UnsupportedAllocatorError)
    else
      expect(PtmallocDump.dump(File.join(tmpdir, "x.dump"))[:arena]).to be > 0
    end
  end
end
