# frozen_string_literal: true

require "spec_helper"

RSpec.describe "the walk's allocations" do
  it "makes no call to malloc, free or their relatives from the capture of glibc's counters to the rename" do
    probe = build_fixture("alloc_probe", extra_flags: ["-ldl"])
    path = File.join(tmpdir, "probe.dump")
    code = <<~RUBY
      h = Fiddle::Handle::DEFAULT
      calls = Fiddle::Function.new(h["probe_last_window_calls"], [], Fiddle::TYPE_LONG)
      windows = Fiddle::Function.new(h["probe_windows"], [], Fiddle::TYPE_LONG)
      threads = Array.new(3) { Thread.new { 1000.times { "x" * 100 } } }.each(&:join) # several arenas
      3.times { PtmallocDump.dump(#{path.inspect}) }
      puts [windows.call, calls.call].join(" ")
    RUBY
    out, err, status = run_ruby("require 'fiddle'; #{code}", env: { "LD_PRELOAD" => probe })
    expect(status).to be_success, err
    windows, calls = out.split.map(&:to_i)
    expect(windows).to eq(3) # the probe saw every dump's window open and close
    expect(calls).to eq(0)
    expect(PtmallocDump.load(path).verify).to be_ok
  end

  it "the probe does see allocations when there are some (it can fail)" do
    probe = build_fixture("alloc_probe", extra_flags: ["-ldl"])
    code = <<~RUBY
      require "fiddle"
      require "stringio"
      h = Fiddle::Handle::DEFAULT
      calls = Fiddle::Function.new(h["probe_last_window_calls"], [], Fiddle::TYPE_LONG)
      info = Fiddle::Function.new(h["malloc_info"], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP], Fiddle::TYPE_INT)
      ren = Fiddle::Function.new(h["rename"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_VOIDP], Fiddle::TYPE_INT)
      null = Fiddle::Function.new(h["fopen"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOIDP).call("/dev/null", "w")
      info.call(0, null)
      10.times { Fiddle.free(Fiddle.malloc(100)) }
      ren.call("/nonexistent/a", "/nonexistent/b")
      puts calls.call
    RUBY
    out, err, status = run_ruby(code, env: { "LD_PRELOAD" => probe })
    expect(status).to be_success, err
    expect(out.to_i).to be >= 20
  end
end
