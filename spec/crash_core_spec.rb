# frozen_string_literal: true

require "open3"
require "spec_helper"

# A core written when a process dies of a signal: by the kernel (core_pattern "core": in the process's
# directory), or by qemu-user for a guest (qemu_PROGRAM_DATE-PID.core there, with no NT_FILE note:
# the files come from the dynamic linker's list). The oracles are glibc's own malloc_info(), which the
# process printed just before the signal, no allocation in between, and glibc's lists as gdb walks
# them in the same core (spec/support/gdb/heap_walk.py; a qemu-user core holds none of the files'
# read-only pages, so it finds libc there through the dynamic linker's records).
RSpec.describe "a core of a process that died of a signal" do
  CRASH = <<~RUBY
    require "fiddle"
    keep = Array.new(3000) { |i| "c" * (300 + i % 500) }
    ready = Queue.new
    worker = Thread.new { b = Array.new(1000) { "t" * 700 }; ready << 1; sleep; b.size }
    ready.pop
    libc = Fiddle.dlopen(nil)
    stdout = Fiddle::Pointer.new(libc["stdout"]).ptr
    info = Fiddle::Function.new(libc["malloc_info"], [Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP], Fiddle::TYPE_INT)
    flush = Fiddle::Function.new(libc["fflush"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_INT)
    fopen = Fiddle::Function.new(libc["fopen"], [Fiddle::TYPE_VOIDP, Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOIDP)
    signal = Fiddle::Function.new(libc["raise"], [Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    trap("QUIT", "SYSTEM_DEFAULT")
    quit = Signal.list["QUIT"]
    null = fopen.call("/dev/null", "w")
    # each call once before, to /dev/null and with signal 0: the calls' method caches are made then,
    # not between the print and the core
    2.times do |i|
      $stdout.flush
      GC.disable
      info.call(0, i.zero? ? null : stdout)
      flush.call(i.zero? ? null : stdout)
      signal.call(i.zero? ? 0 : quit)
    end
    [keep, worker]
  RUBY

  it "is read, and agrees with the malloc_info the process printed before it died and with gdb's walk" do
    missing = GdbOracle.missing
    raise "the gdb oracle needs #{missing}" if missing

    pattern = File.read("/proc/sys/kernel/core_pattern").strip
    if !SpecHelpers.qemu_user? && (pattern.start_with?("|") || pattern.include?("/"))
      skip "the kernel hands cores to #{pattern}, not to the process's directory"
    end
    script = File.join(tmpdir, "crash.rb")
    File.write(script, CRASH)
    xml, err, status = Open3.capture3(RbConfig.ruby, script, chdir: tmpdir,
                                                             rlimit_core: [Process::RLIM_INFINITY, Process::RLIM_INFINITY])
    expect(status.termsig).to eq(Signal.list["QUIT"]), err
    # qemu-user's first: under it the kernel may write a core of the emulator too, an x86-64 one
    core = Dir[File.join(tmpdir, "{qemu_*.core,core,core.*}")].first
    expect(core).not_to be_nil, "no core in #{tmpdir} (core_pattern #{pattern})"
    out = File.join(tmpdir, "core.dump")
    PtmallocDump.dump_core(core, out)
    dump = PtmallocDump.load(out)
    expect(dump.header[:source]).to eq(:core)
    expect(dump.arenas.size).to eq(2) # the main thread's and the worker's
    verification = dump.verify(malloc_info: xml)
    expect(verification.compared).to eq(["malloc_info"])
    expect(verification.differences).to eq([])
    expect(verification).to be_ok

    # glibc's arenas, bins and the two threads' tcaches, chunk for chunk
    (_, walk), = GdbOracle.start(tmpdir, [{ core: core, cored: true, seed: "crash" }]).wait
    expect(walk).not_to be_nil, "gdb did not walk the core"
    # a qemu-user core has no thread pointers (no NT_ARM_TLS): the dump finds the tcaches by structure
    comparison = GdbOracle.compare(dump, walk, by_thread: !SpecHelpers.qemu_user?)
    expect(comparison[:differences]).to eq([])
    expect(comparison[:compared]).to be > 4000 # the 3,000 and 1,000 Strings' buffers at least
    expect(walk.threads.values.count(&:positive?)).to eq(2)
    puts "    the core: #{comparison[:compared]} chunks as gdb walks them, #{walk.threads.size} threads"
  end
end
