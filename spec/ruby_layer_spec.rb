# frozen_string_literal: true

require "set"
require "spec_helper"

RSpec.describe PtmallocDump::RubyLayer do
  it "links against nothing of libruby but what Ruby's public headers declare" do
    ruby_symbols = %w[ptmalloc_dump.so ptmalloc_dump_reader.so].flat_map do |name|
      out, err, status = Open3.capture3("nm", "-D", "--undefined-only", File.join(SpecHelpers::LIB, "ptmalloc_dump", name))
      raise "nm failed: #{err}" unless status.success?

      out.lines.map { |l| l.split.last.sub(/@.*/, "") }.grep(/\A_?(rb|ruby)_/)
    end
    expect(ruby_symbols).to include("rb_define_module")
    headers = Dir[File.join(RbConfig::CONFIG["rubyhdrdir"], "**", "*.h")] +
              Dir[File.join(RbConfig::CONFIG["rubyarchhdrdir"], "**", "*.h")]
    declared = headers.each_with_object(Set.new) { |h, set| File.read(h).scan(/\b(?:rb|ruby)_\w+/) { |w| set << w } }
    expect(ruby_symbols.reject { |s| declared.include?(s) }).to eq([])
  end

  it "is available on this Ruby, and a dump says it recorded Ruby's heap" do
    expect(PtmallocDump.ruby_layer).to be_available
    expect(PtmallocDump.ruby_layer.warning).to be_nil
    dump = dump_and_load
    expect(dump.header.values_at(:ruby_layer, :ruby_layer_reason)).to eq([:recorded, nil])
    expect(dump.ruby).not_to be_nil
    expect(dump_and_load("off.dump", ruby: false).header[:ruby_layer]).to eq(:off)
  end

  it "names what stops the Ruby pass: a missing function, another GC, a missing GC.stat key, a newer Ruby" do
    keys = GC.stat.keys
    layer = ->(**o) { described_class.new(missing_functions: [], stat_keys: keys, gc: "default", version: "3.4.1", **o) }
    expect(layer.call.problem).to be_nil
    expect(layer.call(missing_functions: ["rb_objspace_each_objects"]).problem).to include("rb_objspace_each_objects")
    expect(layer.call(gc: "mmtk").problem).to include('"mmtk"')
    expect(layer.call(stat_keys: keys - [:heap_live_slots]).problem).to eq("GC.stat has no heap_live_slots")
    newer = layer.call(version: "3.5.0")
    expect(newer).to be_available
    expect(newer.status(true)).to match(["recorded", /\ARuby 3.5.0 is newer than the tested/])
    expect(layer.call(gc: "mmtk").status(true)).to match(["skipped", /"mmtk"/])
    expect(layer.call.status(false)).to eq(["off", ""])
    expect(layer.call(version: "2.7.4").caveat).to be_nil
  end

  context "when an internal function is hidden from the lookup" do
    let(:env) { { "PTMALLOC_DUMP_HIDE_RUBY_FUNCTIONS" => "rb_objspace_each_objects" } }

    it "loads, warns once naming the function, and writes a dump that reproduces glibc's counters" do
      path = File.join(tmpdir, "hidden.dump")
      out, err, status = run_ruby(<<~RUBY, env: env)
        p PtmallocDump.ruby_layer.available?
        PtmallocDump.dump(#{path.dump})
        PtmallocDump.dump(#{path.dump}, fork: true, wait: true)
      RUBY
      expect(status).to be_success, err
      expect(out).to eq("false\n")
      expect(err.scan(/ptmalloc_dump: dumps will hold no Ruby objects: .*rb_objspace_each_objects/).size).to eq(1)
      dump = PtmallocDump.load(path)
      expect(dump.ruby).to be_nil
      expect(dump.header[:ruby_layer]).to eq(:skipped)
      expect(dump.header[:ruby_layer_reason]).to match(/does not export rb_objspace_each_objects/)
      expect_valid_dump(dump)
      summary, = Open3.capture2(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--summary", path)
      expect(summary).to match(/^ruby owners +none: the Ruby pass was skipped: .*does not export rb_objspace_each_objects$/)
      report = File.read(PtmallocDump::Report.new(dump, tmpdir).write)
      expect(report).to match(/No Ruby owners: .*the Ruby pass was skipped: .*does not export rb_objspace_each_objects/)
    end
  end
end
