# frozen_string_literal: true

require_relative "spec_helper"

# The ptrace memory source: every thread of another process stopped, its memory read, and the
# process let go on every path. Oracles: the bytes the target wrote and printed the address of,
# its /proc/PID/task list, the counters its spinning threads advance, /proc/PID/status.
RSpec.describe "reading another process" do
  include SpecHelpers

  THREADS_IN_TARGET = 4

  def build_target
    src = File.join(SpecHelpers::ROOT, "spec", "fixtures", "outside", "stop_target.c")
    out = File.join(tmpdir, "stop_target")
    _o, e, s = Open3.capture3("cc", "-O1", "-Wall", "-Wextra", "-pthread", "-o", out, src)
    raise "building stop_target failed (install gcc): #{e}" unless s.success?

    out
  end

  def start_target(*args)
    stdin, stdout, thread = Open3.popen2(build_target, *args)
    stdin.close
    line = stdout.gets
    raise "the target printed nothing" unless line

    @target = thread
    fields = line.scan(/(\w+)=(\w+)/).to_h
    [thread.pid, Integer(fields["buffer"]), Integer(fields["spins"])]
  end

  def state_of(pid)
    File.read("/proc/#{pid}/status")[/^State:\s+(\S)/, 1]
  end

  def task_states(pid)
    Dir["/proc/#{pid}/task/*"].filter_map do |t|
      [File.basename(t).to_i, File.read("#{t}/stat")[/\) (\S)/, 1]]
    rescue Errno::ENOENT, Errno::ESRCH
      nil # a thread that ended while it was listed
    end.to_h
  end

  after do
    if @target
      Process.kill(:KILL, @target.pid)
      @target.value
    end
  end

  it "stops every thread, reads the bytes the target wrote and lets every thread run again" do
    pid, buffer, spins = start_target
    expected = (0...4096).map { |i| (i * 7 + 3) & 0xff }.pack("C*")
    bytes, tids, pause_ns = PtmallocDump._read_process(pid, buffer, 4096)
    expect(bytes).to eq(expected)
    expect(tids.sort).to eq(Dir["/proc/#{pid}/task/*"].map { |t| File.basename(t).to_i }.sort)
    expect(tids.size).to eq(THREADS_IN_TARGET + 1)
    expect(pause_ns).to be > 0
    puts "  target stopped for #{(pause_ns / 1e6).round(3)} ms (#{tids.size} threads, 4 KiB read)"
    task_states(pid).each { |tid, st| expect(st).not_to eq("t"), "thread #{tid} left stopped" }
    # the spinning threads advance again: nobody stayed stopped
    before, = PtmallocDump._read_process(pid, spins, 8 * THREADS_IN_TARGET)
    sleep 0.05
    after, = PtmallocDump._read_process(pid, spins, 8 * THREADS_IN_TARGET)
    before.unpack("Q*").zip(after.unpack("Q*")).each { |b, a| expect(a).to be > b }
  end

  it "answers an unreadable address with nil and still lets the target go" do
    pid, = start_target
    bytes, tids, = PtmallocDump._read_process(pid, 8, 16)
    expect(bytes).to be_nil
    expect(tids.size).to eq(THREADS_IN_TARGET + 1)
    expect(state_of(pid)).not_to eq("t")
  end

  it "says that the target belongs to another user, and leaves it running" do
    pid, = start_target
    reader, writer = IO.pipe
    child = fork do
      reader.close
      Process::Sys.setgid(65_534)
      Process::Sys.setuid(65_534)
      begin
        PtmallocDump._read_process(pid, 0x1000, 8)
        writer.write("no error")
      rescue PtmallocDump::Error => e
        writer.write("#{e.class}: #{e.message}")
      end
      exit!(0)
    end
    writer.close
    Process.wait(child)
    message = reader.read
    expect(message).to match(/\APtmallocDump::PtracePermissionError: process #{pid} belongs to uid 0/)
    expect(message).to match(/run ptmalloc-dump as that user or as root/)
    expect(state_of(pid)).not_to eq("t")
  end

  it "reads the target's mappings as /proc/PID/maps lists them, its buffer in a readable one" do
    pid, buffer, = start_target
    oracle = File.readlines("/proc/#{pid}/maps").map do |line|
      range, perms = line.split
      lo, hi = range.split("-").map { |x| Integer(x, 16) }
      [lo, hi, perms]
    end
    maps = PtmallocDump._process_maps(pid)
    expect(maps).to eq(oracle)
    holder = maps.find { |lo, hi, _| buffer >= lo && buffer < hi }
    expect(holder[2]).to start_with("rw")
    expect(state_of(pid)).not_to eq("t")
  end

  it "says that a process does not exist" do
    pid = Process.spawn("true")
    Process.wait(pid)
    expect { PtmallocDump._read_process(pid, 0x1000, 8) }
      .to raise_error(PtmallocDump::TargetGoneError, /no process #{pid}/)
    expect { PtmallocDump._process_maps(pid) }.to raise_error(PtmallocDump::TargetGoneError, /no process #{pid}/)
  end

  it "refuses to stop itself" do
    expect { PtmallocDump._read_process(Process.pid, 0x1000, 8) }.to raise_error(ArgumentError, /this process/)
  end
end
