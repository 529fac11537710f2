# frozen_string_literal: true

require "spec_helper"
require "json"

# Each advice line's expected gain against what applying the advice really does: the same workload
# run twice in child processes, with and without the setting, and the estimate's range compared with
# the measured change in heap and RSS.
RSpec.describe "advice that holds" do
  # Threads that each take an arena, then in turn allocate blocks and free all but one in KEEP: the
  # free memory each leaves in its arena is what another thread could have reused had they shared.
  WORKLOAD = <<~RUBY
    require "fiddle"
    require "json"
    threads_n = Integer(ENV.fetch("T"))
    keep_every = Integer(ENV.fetch("KEEP"))
    size = Integer(ENV.fetch("SIZE"))
    keep = []
    done = Queue.new
    go = Array.new(threads_n) { Queue.new }
    threads = Array.new(threads_n) do |i|
      Thread.new do
        Fiddle.free(Fiddle.malloc(64)) # this thread's arena, now
        go[i].pop
        blocks = Array.new(24_000_000 / size) { Fiddle.malloc(size).tap { |b| Fiddle::Pointer.new(b)[0, 8] = "x" * 8 } }
        blocks.each_with_index { |b, j| (j % keep_every).zero? ? keep << b : Fiddle.free(b) }
        done << i
        sleep 0.3
      end
    end
    sleep 0.1
    threads_n.times { |i| go[i] << true; done.pop }
    figures = ->(s) { { heap: s[:malloc][:arena] + s[:malloc][:hblkhd], rss: s[:rss][:anonymous], arenas: s[:arenas].size } }
    out = { before: figures.(PtmallocDump.stats) }
    if (path = ENV["DUMP"])
      PtmallocDump.dump(path, ruby: false)
      out[:before_trim] = figures.(PtmallocDump.stats)
      Fiddle::Function.new(Fiddle::Handle::DEFAULT["malloc_trim"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_INT).call(0)
      out[:after_trim] = figures.(PtmallocDump.stats)
    end
    puts JSON.generate(out)
    threads.each(&:join)
  RUBY

  def workload(env)
    out, err, status = run_ruby(WORKLOAD, env: env)
    expect(status).to be_success, err
    JSON.parse(out.lines.last, symbolize_names: true)
  end

  [{ "T" => "4", "KEEP" => "4", "SIZE" => "1500" }, { "T" => "6", "KEEP" => "2", "SIZE" => "700" },
   { "T" => "3", "KEEP" => "8", "SIZE" => "3000" }].each do |shape|
    it "MALLOC_ARENA_MAX and malloc_trim: the measured gain falls in the advised range (#{shape.map { |k, v| "#{k}=#{v}" }.join(' ')})" do
      path = File.join(tmpdir, "workload.dump")
      without = workload(shape.merge("DUMP" => path))
      with = workload(shape.merge("MALLOC_ARENA_MAX" => PtmallocDump::Advice::ARENA_MAX.to_s))
      expect(with[:before][:arenas]).to be <= PtmallocDump::Advice::ARENA_MAX
      lines = PtmallocDump::Advice.new(PtmallocDump.load(path)).lines.to_h { |l| [l.topic, l] }

      arena = lines.fetch(:arena_max)
      heap_gain = without[:before][:heap] - with[:before][:heap]
      rss_gain = without[:before][:rss] - with[:before][:rss]
      puts format("MALLOC_ARENA_MAX=%d: estimate %.1f MiB (%.1f to %.1f, upper bound %.1f); measured heap %.1f MiB (%.2f of the " \
                  "estimate), RSS %.1f MiB (%.2f)", PtmallocDump::Advice::ARENA_MAX, arena.gain / 1048576.0, arena.low / 1048576.0,
                  arena.high / 1048576.0, arena.figure / 1048576.0, heap_gain / 1048576.0, heap_gain.fdiv(arena.gain),
                  rss_gain / 1048576.0, rss_gain.fdiv(arena.gain))
      expect(heap_gain).to be_between(arena.low, arena.high)
      expect(rss_gain).to be_between(arena.low, arena.high)

      trim = lines[:malloc_trim]
      trim_gain = without[:before_trim][:rss] - without[:after_trim][:rss]
      unless trim # not advised (under a MiB, or 1% of the resident heap): the estimate still holds
        est = PtmallocDump.load(path).analysis[:trim_estimate].sum
        puts format("malloc_trim(0): not advised, estimate %.2f MiB; measured RSS %.2f MiB", est / 1048576.0, trim_gain / 1048576.0)
        # a quarter MiB for the pages the process itself touches meanwhile
        expect(trim_gain).to be_between(est * PtmallocDump::Advice::TRIM_RANGE.first - 262_144,
                                        est * PtmallocDump::Advice::TRIM_RANGE.last + 262_144)
        next
      end
      puts format("malloc_trim(0): estimate %.1f MiB (%.1f to %.1f); measured RSS %.1f MiB (%.2f of the estimate)",
                  trim.gain / 1048576.0, trim.low / 1048576.0, trim.high / 1048576.0, trim_gain / 1048576.0, trim_gain.fdiv(trim.gain))
      expect(trim_gain).to be_between(trim.low, trim.high)
      expect(without[:after_trim][:heap]).to be <= without[:before_trim][:heap] # trimming never grows the heap
    end
  end
end
