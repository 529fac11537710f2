# frozen_string_literal: true

require "spec_helper"

# Without symbol files: malloc's globals found by structure, the same answers as with symbols.
RSpec.describe "the symbol-free path", :quiescent do
  it "finds the same main_arena and mp_ as the symbol file and as glibc itself reveals them" do
    file = PtmallocDump.libc_info(debug_dir: LibcFacts.debug_dir, symbols: :file)
    heuristic = PtmallocDump.libc_info(symbols: :heuristic)
    expect(heuristic[:symbol_source]).to eq(:heuristic)
    expect(heuristic.slice(:main_arena, :mp)).to eq(file.slice(:main_arena, :mp))
    expect(heuristic.values_at(:main_arena, :mp)).to eq([LibcFacts.main_arena, LibcFacts.mp])
  end

  # One fork snapshot dumped twice from the same frozen heap: with symbols and by structure alone.
  [[11, 0], [12, 4], [13, 0], [14, 4], [15, 4], [16, 0]].each do |seed, threads|
    it "gives the same main_arena, arenas and chunk states as the symbol path (seed #{seed}, #{threads} threads)" do
      scenario = HeapScenario.new(seed, threads: threads)
      GC.disable
      begin
        scenario.build
        result = PtmallocDump.check_symbol_free(tmpdir, debug_dir: LibcFacts.debug_dir)
      ensure
        GC.enable
        scenario.cleanup
      end
      expect(result[:differences]).to eq([])
      expect(result[:agree]).to be(true)
      a = PtmallocDump.load(File.join(tmpdir, "symbols.dump"))
      b = PtmallocDump.load(File.join(tmpdir, "structure.dump"))
      expect(a.header[:symbol_source]).to eq(:build_id)
      expect(b.header[:symbol_source]).to eq(:heuristic)
      expect(b.arenas.size).to eq(a.arenas.size).and be >= (threads.zero? ? 1 : 2)
      expect(b.each_chunk.map(&:state)).to eq(a.each_chunk.map(&:state))
      expect(b.summary.reject { |k, _| k == :arenas }).to eq(a.summary.reject { |k, _| k == :arenas })
      [a, b].each { |d| expect_valid_dump(d) }
    end
  end

  it "passes the whole dump-engine and Ruby oracle suites with the symbol files hidden" do
    empty = File.join(tmpdir, "no-symbols")
    Dir.mkdir(empty)
    out, err, status = Open3.capture3({ "PTMALLOC_DUMP_DEBUG_DIR" => empty, "PTMALLOC_DUMP_EXPECT_SYMBOLS" => "heuristic" },
                                      "rspec", "spec/dump_engine_spec.rb", "spec/glibc_rules_spec.rb", "spec/ruby_heap_spec.rb",
                                      "spec/residency_spec.rb",
                                      chdir: SpecHelpers::ROOT)
    expect(status).to be_success, out + err
    expect(out).to match(/\d+ examples, 0 failures/)
  end
end
