# frozen_string_literal: true

require "json"
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
      3.times { |i| PtmallocDump.dump(#{path.inspect}, graph: i.odd?) }
      puts [windows.call, calls.call].join(" ")
    RUBY
    out, err, status = run_ruby("require 'fiddle'; #{code}", env: { "LD_PRELOAD" => probe })
    expect(status).to be_success, err
    windows, calls = out.split.map(&:to_i)
    expect(windows).to eq(3) # the probe saw every dump's window open and close
    expect(calls).to eq(0)
    expect(PtmallocDump.load(path).verify).to be_ok
    expect(PtmallocDump.load(path).graph?).to be(false) # the last one, graph: false
  end

  # From entering dump to the capture of glibc's counters, the first call in the process included.
  # The window opens as dump is entered (a TracePoint on it), after the caller's own call site has
  # been looked up. The Ruby pass finds Ruby's pages by their structure: it neither ends a pending lazy
  # sweep (whose frees would change the heap) nor has rb_objspace_each_objects malloc its list of
  # pages; the probe counts calls inside each_objects apart, so that a pass that fell back to it shows.
  it "makes no call to malloc, free or their relatives from entering dump to the capture" do
    probe = build_fixture("alloc_probe", extra_flags: ["-ldl"])
    path = File.join(tmpdir, "probe.dump")
    code = <<~RUBY
      h = Fiddle::Handle::DEFAULT
      arm = Fiddle::Function.new(h["probe_pre_arm"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOID)
      calls = Fiddle::Function.new(h["probe_last_pre_calls"], [], Fiddle::TYPE_LONG)
      outside = Fiddle::Function.new(h["probe_last_pre_outside"], [], Fiddle::TYPE_LONG)
      windows = Fiddle::Function.new(h["probe_pre_windows"], [], Fiddle::TYPE_LONG)
      inside = "rb_objspace_each_objects"
      # Fiddle's first call sets up its own state after the call returns (Fiddle.last_error=): done
      # here, so that it does not fall into the first window
      arm.call(inside)
      TracePoint.new(:call) { arm.call(inside) }.enable(target: PtmallocDump.method(:dump))
      keep = Array.new(20_000) { |i| "x" * (30 + i % 200) } # strings with malloc'd buffers
      Array.new(3) { Thread.new { 1000.times { "x" * 100 } } }.each(&:join) # several arenas
      sweeps = 0
      runs = [{ ruby: false }, { ruby: false }, {}, { references: false }, {}, { graph: true }, { graph: true },
              { graph: true, trace: true }]
      r = runs.map do |opts|
        PtmallocDump.trace_allocations(every: 2, seed: 3) if opts.delete(:trace) # the sites too
        keep.concat(Array.new(5_000) { "y" * 100 }) # garbage, and a lazy sweep for the dump to find
        keep.shift(5_000)
        GC.start(immediate_sweep: false)
        sweeps += 1 if GC.latest_gc_info(:state) == :sweeping
        PtmallocDump.dump(#{path.inspect}, **opts)
        [calls.call, outside.call]
      end
      last = PtmallocDump.load(#{path.inspect})
      ruby = last.ruby
      puts JSON.generate(windows: windows.call, calls: r, sweeps: sweeps, from_gc: ruby.meta[:pages_from_gc],
                         garbage: ruby.summary[:garbage_objects], edges: last.graph_meta&.fetch(:edges),
                         traced: last.allocation_sites? ? last.traced_objects.size : 0)
    RUBY
    out, err, status = run_ruby("require 'fiddle'; require 'json'; #{code}", env: { "LD_PRELOAD" => probe })
    expect(status).to be_success, err
    result = JSON.parse(out, symbolize_names: true)
    expect(result[:windows]).to eq(8)
    calls = result[:calls]
    expect(result[:sweeps]).to eq(8) # every dump began with a lazy sweep pending
    # the first call in the process included, ruby: true, the object graph and the allocation sites included
    expect(calls).to eq([[0, 0]] * 8)
    expect(result[:from_gc]).to be(false)
    expect(result[:edges]).to be > 20_000 # the last dump recorded the graph
    expect(result[:traced]).to be > 1_000 # and the sites of the objects traced since the one before
    expect(result[:garbage]).to be >= 5_000 # the strings dropped just before: dead, not yet swept
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
      arm = Fiddle::Function.new(h["probe_pre_arm"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOID)
      pre = Fiddle::Function.new(h["probe_last_pre_calls"], [], Fiddle::TYPE_LONG)
      outside = Fiddle::Function.new(h["probe_last_pre_outside"], [], Fiddle::TYPE_LONG)
      ffi_malloc = Fiddle::Function.new(h["malloc"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_VOIDP)
      ffi_malloc.call(1) # the first call sets libffi up
      arm.call("libffi.so") # libffi's own functions (ffi_call's are unnamed in some releases)
      kept = ffi_malloc.call(100) # inside: libffi calls malloc
      Array.new(100) # outside: the array's buffer
      info.call(0, null)
      $stderr.puts [pre.call, outside.call].join(" ")
      10.times { Fiddle.free(Fiddle.malloc(100)) }
      ren.call("/nonexistent/a", "/nonexistent/b")
      puts calls.call
    RUBY
    out, err, status = run_ruby(code, env: { "LD_PRELOAD" => probe })
    expect(status).to be_success, err
    expect(out.to_i).to be >= 20
    pre, outside = err.lines.last.split.map(&:to_i)
    expect(outside).to be >= 1 # the array's buffer
    expect(pre).to be > outside # and the block libffi asked for
  end
end
