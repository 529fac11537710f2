# frozen_string_literal: true

require "spec_helper"
require "zlib"

# The fuzzer's corpus and every crasher it found (spec/fixtures/fuzz), through the public API: each
# file loads and goes through the figures, or is refused with a FormatError. The fuzzer reads them
# with the checksum check compiled out, so each is read as it is and with its checksum recomputed.
RSpec.describe "the fuzzer's corpus and crashers", :unit do
  let(:files) { Dir[File.join(__dir__, "fixtures", "fuzz", "{corpus,crashes}", "*")].sort }

  def resealed(bytes)
    return bytes if bytes.bytesize < 16 + 56 || (bytes.bytesize % 8).nonzero?

    body = bytes.bytesize - 56
    bytes = bytes.dup
    bytes[body + 24 + 24, 4] = [Zlib.crc32(bytes.byteslice(0, body))].pack("V")
    bytes
  end

  def read_through(bytes)
    path = File.join(tmpdir, "input.dump")
    File.binwrite(path, bytes)
    dump = PtmallocDump.load(path)
    [dump.summary, dump.analysis, dump.rss, dump.owners, dump.anomalies, dump.threads, dump.ruby&.summary]
    :read
  rescue PtmallocDump::FormatError
    :refused
  end

  it "has a corpus of synthetic dumps that read" do
    corpus = files.select { |f| f.include?("/corpus/") }
    expect(corpus).not_to be_empty
    expect(corpus.grep(/synthetic-\d+\.ptmd\z/).map { |f| read_through(File.binread(f)) }.uniq).to eq([:read])
  end

  it "reads or refuses every file, as it is and resealed" do
    outcomes = files.flat_map do |f|
      bytes = File.binread(f)
      [read_through(bytes), read_through(resealed(bytes))]
    end
    expect(outcomes - %i[read refused]).to eq([])
  end
end
