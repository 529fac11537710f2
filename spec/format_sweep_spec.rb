# frozen_string_literal: true

require "spec_helper"

RSpec.describe "a dump file whose checksum is valid but one field is not" do
  it "loads and goes through every reader path, or raises FormatError: never a crash or another error" do
    sweep = File.join(__dir__, "support", "field_sweep.rb")
    path = File.join(tmpdir, "small.dump")
    progress = File.join(tmpdir, "case")
    # the dump under the allocation tracker, so that its sections are in the file too (a few hundred
    # stacks: every reader path names them all, in each of the sweep's files);
    # the sweep in a process of its own without it, whose every reader path would be sampled too
    tracker = { "LD_PRELOAD" => PtmallocDump::Tracker.path, "PTMALLOC_DUMP_TRACK_BYTES" => "65536" }
    _o, err, status = run_ruby(<<~RUBY, env: tracker)
      PtmallocDump.trace_allocations(every: 4, seed: 1)
      keep = Array.new(2000) { |i| "x" * (i % 300) }
      PtmallocDump.dump(#{path.dump}, references: true, trim_check: true, graph: true)
      PtmallocDump.stop_allocation_tracing
      keep.size
    RUBY
    expect(status).to be_success, err
    expect(PtmallocDump.load(path)).to have_attributes(malloc_sites?: true, object_sites?: true, graph?: true)
    # about 1,200 damaged files, each through every reader path: 4 to 8 minutes here, 16 beside two
    # other test runs, and past 30 with more work beside it; under qemu-user past 60 beside two others
    out, err, status = run_ruby(<<~RUBY, timeout: SpecHelpers.qemu_user? ? 4 * 3600 : 3600)
      require #{sweep.dump}
      puts JSON.generate(FieldSweep.run(#{path.dump}, #{progress.dump}))
    RUBY
    crash = -> { "the sweep died at #{File.read(progress)}: #{err[/^.*\[BUG\].*$/] || err[-500..]}" }
    expect(status.signaled?).to be(false), crash
    expect(err).not_to include("[BUG]"), crash
    expect(status).to be_success, err
    stats = JSON.parse(out.lines.last, symbolize_names: true)
    warn "  field sweep: #{stats[:files]} files, #{stats[:read]} read through every path, #{stats[:format_errors]} refused"
    expect(stats[:unexpected]).to eq([])
    expect(stats[:files]).to be > 500
    expect(stats[:read]).to be > 0
    expect(stats[:format_errors]).to be > 0
  end
end
