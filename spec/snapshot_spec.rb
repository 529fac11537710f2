# frozen_string_literal: true

require "json"
require "set"
require "spec_helper"

# Fork snapshots: the process pauses for the fork alone; the child records Ruby's heap on its copy.
RSpec.describe "fork snapshots" do
  app_heap = File.join(SpecHelpers::ROOT, "spec", "support", "app_heap.rb")

  it "leave the Ruby pass to the child, which records every live object and allocates nothing before its walk" do
    probe = build_fixture("alloc_probe", extra_flags: ["-ldl"])
    path = File.join(tmpdir, "snapshot.dump")
    code = <<~RUBY
      require "fiddle"
      require "json"
      require #{app_heap.inspect}
      keep = AppHeap.build(classes: 300, methods: 10, records: 20_000)
      dropped = Array.new(3_000) { |i| "dropped-\#{i}-" * 150 }
      dropped = nil
      report_r, report_w = IO.pipe
      Fiddle::Function.new(Fiddle::Handle::DEFAULT["probe_child_arm"], [Fiddle::TYPE_INT], Fiddle::TYPE_VOID)
                      .call(report_w.fileno)
      path = #{path.inspect}
      # garbage the child must tell from the live by reading; nothing of this code allocates between
      # here and the fork (an allocation may sweep a step, and on Ruby 3.4 the path's literal, made
      # there, ended the sweep)
      GC.start(immediate_sweep: false)
      sweeping = GC.latest_gc_info(:state) == :sweeping
      pid = PtmallocDump.dump(path, fork: true)
      _, status = Process.wait2(pid)
      report_w.close
      puts JSON.generate(sweeping: sweeping, child_ok: status.success?, child_calls: report_r.read, kept: keep.size)
    RUBY
    out, err, status = run_ruby(code, env: { "LD_PRELOAD" => probe })
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    expect(r[:child_ok]).to be(true), err
    # the child, from its first step to glibc's counters: no call into the malloc family
    expect(r[:child_calls]).to eq("0\n")
    dump = PtmallocDump.load(path)
    expect_valid_dump(dump)
    snap = dump.header[:snapshot]
    expect(snap).to include(ruby_pass: :child, ruby_pass_ns: 0, gc_ns: 0)
    expect(snap[:pause_ns]).to eq(snap[:before_fork_ns] + snap[:fork_ns])
    expect(PtmallocDump::TextSummary.new(dump).to_s.lines[1])
      .to eq(format("fork snapshot: the process paused %.1f ms (%.1f ms before the fork, %.1f ms the fork); its Ruby " \
                    "heap recorded by the snapshot " \
                    "process\n", snap[:pause_ns] / 1e6, snap[:before_fork_ns] / 1e6, snap[:fork_ns] / 1e6))
    meta = dump.ruby.meta
    expect(meta).to include(in_snapshot: true, pages_from_gc: false)
    # GC.stat as the child read it is the parent's at the fork: every live object (garbage the lazy
    # sweep has not freed counts there too) was found on the pages
    expect(meta[:object_count]).to eq(meta[:heap_live_slots])
    expect(r[:sweeping]).to be(true)
    if Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.4") && !dump.header[:gc][:sweep_pending]
      # Ruby 3.4 may end the sweep in the parent, on the dump call's own allocations before the fork:
      # then no garbage is left to tell (the in-process pass's garbage is checked in zero_alloc_spec)
      puts "    Ruby ended the lazy sweep before the fork: no garbage in the snapshot"
      expect(dump.summary[:ruby][:garbage_objects]).to eq(0)
    else
      expect(dump.header[:gc][:sweep_pending]).to be(true)
      expect(dump.summary[:ruby][:garbage_objects]).to be >= 1_500
    end
    # the code pass ran there too: each model's methods are charged to it
    methods = dump.ruby.code_owners[:methods].select { |m| m[:module] == "AppHeap::Model7" }
    expect(methods.map { |m| m[:method] }).to match_array(Array.new(10) { |m| "action_#{m}" })
    expect(methods.map { |m| m[:path] }.uniq).to eq(["app/models/model_7.rb"])
  end

  it "record the same Ruby owners as an in-process dump of the same quiesced process" do
    code = <<~RUBY
      require "json"
      require #{app_heap.inspect}
      keep = AppHeap.build(classes: 200, methods: 10, records: 10_000)
      snapshot = #{File.join(tmpdir, 'snapshot.dump').inspect}
      in_process = #{File.join(tmpdir, 'in_process.dump').inspect}
      GC.start
      GC.disable
      # twice through the same call sites: the first pass fills their caches and the classes' method
      # caches and makes the calls' own objects (Ruby 3.4 gives a call site its cache at its first
      # call, in the running iseq's memory), so that between the second pass's two dumps the snapshot
      # call makes the error pipe's IO object and nothing else
      status = nil
      2.times do
        pid = PtmallocDump.dump(snapshot, fork: true)
        PtmallocDump.dump(in_process)
        _, status = Process.wait2(pid)
      end
      puts JSON.generate(child_ok: status.success?, kept: keep.size)
    RUBY
    out, err, status = run_ruby(code)
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    expect(r[:child_ok]).to be(true), err
    snap, inproc = %w[snapshot in_process].map { |n| PtmallocDump.load(File.join(tmpdir, "#{n}.dump")) }
    expect_valid_dump(snap)
    expect(snap.header[:snapshot][:ruby_pass]).to eq(:child)
    expect(inproc.header[:snapshot]).to be_nil
    # the in-process dump holds every object of the snapshot, and the few the snapshot call made after
    # its fork as it returned (its pid and error pipe: an IO, two arrays, two hashes, a few internal)
    snap_objects = snap.ruby.objects.to_h { |o| [o.address, o] }
    in_objects = inproc.ruby.objects.to_h { |o| [o.address, o] }
    expect(snap_objects.keys - in_objects.keys).to eq([])
    added = in_objects.keys - snap_objects.keys
    expect(added.size).to be_between(1, 20)
    expect(added.map { |a| in_objects[a].class_name }).to include("IO")
    expect(snap_objects.map { |_a, o| [o.type, o.class_name] }).to eq(snap_objects.keys.map { |a| [in_objects[a].type, in_objects[a].class_name] })
    # owners by builtin type, class and typed-data name, chunk by chunk: the same, but for what those
    # new objects own, the chunks malloc handed out or took back between the two dumps, and the VM's own
    # tables (Ruby 3.3 on interns every call site's call info in a table of the VM's: the calls between
    # the dumps may grow it). A chunk freed and handed out again in between, at the same address and
    # size, looks the same to both: at most two such, small, may differ (a Hash's table that grew, its
    # old entries taken by the snapshot call's IO).
    owners = lambda do |dump, skip|
      dump.each_chunk.select { |c| %i[in_use mmapped].include?(c.state) }.to_h do |c|
        o = dump.ruby.owner_of(c)
        owner = if o.nil? then :none
                elsif skip.include?(o.address) || o.data_type == "VM" then :skipped
                else [o.type, o.class_name, o.data_type]
                end
        [[c.address, c.size], owner]
      end
    end
    before = owners.call(snap, Set.new)
    after = owners.call(inproc, added.to_set)
    both = (before.keys & after.keys).reject { |k| before[k] == :skipped || after[k] == :skipped }
    differ = both.reject { |k| before[k] == after[k] }
    expect(differ.size).to be <= 2, differ.map { |k| [k, before[k], after[k]] }.inspect
    expect(differ.sum { |_, size| size }).to be <= 1024
    expect(both.count { |k| before[k].is_a?(Array) }).to be > 10_000
    # code memory by defining module and method: equal
    expect(inproc.ruby.code_owners[:by_module]).to eq(snap.ruby.code_owners[:by_module])
    expect(inproc.ruby.code_owners[:methods]).to eq(snap.ruby.code_owners[:methods])
    expect(snap.ruby.code_owners[:by_module].keys).to include("AppHeap::Model0", "AppHeap::Model199")
  end

  it "have the parent run the Ruby pass where the child could not tell garbage from the live" do
    code = <<~RUBY
      require "json"
      dropped = Array.new(3_000) { |i| "dropped-\#{i}-" * 150 }
      dropped = nil
      GC.start(immediate_sweep: false)
      sweeping = GC.latest_gc_info(:state) == :sweeping
      path = #{File.join(tmpdir, 'parent.dump').inspect}
      PtmallocDump.dump(path, fork: true, wait: true)
      puts JSON.generate(sweeping: sweeping, live: GC.stat(:heap_live_slots))
    RUBY
    hide = "rb_objspace_garbage_object_p,rb_objspace_markable_object_p"
    out, err, status = run_ruby(code, env: { "PTMALLOC_DUMP_HIDE_RUBY_FUNCTIONS" => hide })
    expect(status).to be_success, err
    expect(JSON.parse(out, symbolize_names: true)[:sweeping]).to be(true)
    dump = PtmallocDump.load(File.join(tmpdir, "parent.dump"))
    expect_valid_dump(dump)
    expect(dump.header[:snapshot][:ruby_pass]).to eq(:parent)
    expect(dump.header[:snapshot][:ruby_pass_ns]).to be_positive
    expect(dump.header[:snapshot][:before_fork_ns]).to be >= dump.header[:snapshot][:ruby_pass_ns]
    expect(PtmallocDump::TextSummary.new(dump).to_s.lines[1]).to include("its Ruby heap recorded by itself before the fork")
    # as in process: the GC was asked for its pages, which ends the sweep; no garbage is left
    expect(dump.ruby.meta).to include(in_snapshot: false, pages_from_gc: true)
    expect(dump.summary[:ruby][:garbage_objects]).to eq(0)
    expect(dump.ruby.meta[:object_count]).to eq(dump.ruby.meta[:heap_live_slots])
  end

  it "do not hold the worker's connections open: a connection it closes ends for its client at once" do
    code = <<~RUBY
      require "json"
      require "socket"
      keep = Array.new(1_000_000) { |i| "string \#{i} " * 3 } # a child that walks for a while
      server = TCPServer.new("127.0.0.1", 0)
      client = TCPSocket.new("127.0.0.1", server.addr[1])
      connection = server.accept
      pid = PtmallocDump.dump(#{File.join(tmpdir, 'sockets.dump').inspect}, fork: true)
      connection.write("answer")
      connection.close # the worker is done with it; the snapshot process is not done yet
      answer = client.read # until the connection's end: every copy of it closed
      alive = Process.wait2(pid, Process::WNOHANG).nil?
      _, status = Process.wait2(pid) if alive
      puts JSON.generate(answer: answer, child_alive_at_eof: alive, child_ok: status.nil? || status.success?, kept: keep.size)
    RUBY
    out, err, status = run_ruby(code)
    expect(status).to be_success, err
    r = JSON.parse(out, symbolize_names: true)
    expect(r[:answer]).to eq("answer")
    expect(r[:child_ok]).to be(true), err
    # the client saw the end while the snapshot process still ran: it had closed its copy first
    expect(r[:child_alive_at_eof]).to be(true)
    expect(PtmallocDump.load(File.join(tmpdir, "sockets.dump")).header[:snapshot][:ruby_pass]).to eq(:child)
  end

  it "say nothing of a snapshot in an in-process dump, and that ruby: false ran no pass" do
    expect(dump_and_load("in.dump").header[:snapshot]).to be_nil
    path = File.join(tmpdir, "plain.dump")
    PtmallocDump.dump(path, fork: true, wait: true, ruby: false)
    dump = PtmallocDump.load(path)
    expect(dump.header[:snapshot]).to include(ruby_pass: nil, ruby_pass_ns: 0)
    expect(dump.ruby).to be_nil
  end
end
