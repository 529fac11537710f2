# frozen_string_literal: true

require "spec_helper"

RSpec.describe "doc/FORMAT.md", :unit do
  let(:doc) { File.read(File.expand_path("../doc/FORMAT.md", __dir__)) }
  let(:sections) { PtmallocDump::Format::SECTIONS }

  it "lists every section of the format, by type and name, in the order of PTMD_SECTIONS" do
    rows = doc.scan(/^\| (\d+) \| ([A-Z0-9_]+) \|/).map { |type, name| [name.downcase.to_sym, Integer(type)] }
    expect(rows).to eq(sections.to_a)
  end

  it "lists the sections in type order" do
    expect(sections.values).to eq(sections.values.sort)
  end

  it "gives every section a heading of its own" do
    headed = doc.scan(/^## (.*)$/).flatten.flat_map { |heading| heading.scan(/\b[A-Z][A-Z0-9_]+\b/) }
    missing = sections.keys.map { |name| name.to_s.upcase } - headed
    expect(missing).to eq([])
  end
end
