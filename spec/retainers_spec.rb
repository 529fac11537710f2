# frozen_string_literal: true

require "json"
require "spec_helper"

# Who keeps memory alive, against what Ruby itself says: holders of known contents built in a child,
# whose addresses (ObjectSpace.dump's) and memsize_of it reports; the dump must name each holder, give
# it the malloc chunks its contents own (the dump's own attribution, summed independently here), and a
# path from the root a person would write.
RSpec.describe "who keeps memory alive" do
  child = <<~'RUBY'
    require "objspace"
    require "fiddle"
    # no GC from here to the dumps: the unreachable cycle below stays in the heap, unmarked
    GC.start
    GC.disable
    addr = ->(o) { Integer(JSON.parse(ObjectSpace.dump(o))["address"]) }
    strings = ->(n, c, size) { Array.new(n) { |i| (c * size) + i.to_s } }
    module Holders; CACHE = {}; end
    1500.times { |i| Holders::CACHE["k#{i}"] = "v" * (3000 + i % 7) }
    def make_handler(buf)
      -> { buf.size }
    end
    $handler = make_handler(strings.call(500, "c", 2000))
    class Registry; @instance = Array.new(300) { |i| "r" * (4000 + i) }; end
    class Config; @@table = Array.new(200) { |i| "q" * (5000 + i) }; end
    ready = Queue.new
    local_thread = Thread.new do
      Thread.current[:buffer] = Array.new(400) { |i| "t" * (2500 + i) }
      ready << true
      sleep
    end
    ready.pop
    # a thread whose frame holds the constant's Hash too: the Hash is still named by its constant
    busy = Thread.new { held_by_frame = Holders::CACHE; ready << true; sleep; held_by_frame.size }
    ready.pop
    # an object only a C global holds: its VALUE in a cell registered with rb_gc_register_address
    register = Fiddle::Function.new(Fiddle::Handle::DEFAULT["rb_gc_register_address"], [Fiddle::TYPE_VOIDP],
                                    Fiddle::TYPE_VOID)
    cell = Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
    c_held = Array.new(100) { |i| "g" * (6000 + i) }
    cell[0, 8] = [Fiddle.dlwrap(c_held)].pack("Q")
    register.call(cell)
    c_held_address = addr.call(c_held)
    c_held_contents = c_held.map { |s| addr.call(s) }
    c_held_memsize = c_held.sum { |s| ObjectSpace.memsize_of(s) } + ObjectSpace.memsize_of(c_held)
    c_held = nil
    # garbage: a cycle of two Arrays with a large String, which nothing reaches, made on a thread that
    # has ended, whose stacks no root scans
    garbage = Thread.new { a = []; b = [a, "z" * 50_000]; a << b; [addr.call(a), addr.call(b)] }.value
    describe = lambda do |holder, contents|
      { address: addr.call(holder), contents: contents.map { |o| addr.call(o) },
        memsize: contents.sum { |o| ObjectSpace.memsize_of(o) } + ObjectSpace.memsize_of(holder) }
    end
    facts = {}
    frame = lambda do
      held = Array.new(250) { |i| "f" * (3500 + i) } # a frame's local
      facts = {
        cache: describe.call(Holders::CACHE, Holders::CACHE.keys + Holders::CACHE.values),
        handler: describe.call($handler.binding.local_variable_get(:buf), $handler.binding.local_variable_get(:buf)),
        registry: describe.call(Registry.instance_variable_get(:@instance), Registry.instance_variable_get(:@instance)),
        config: describe.call(Config.class_variable_get(:@@table), Config.class_variable_get(:@@table)),
        thread_local: describe.call(local_thread[:buffer], local_thread[:buffer]),
        local: describe.call(held, held),
        c_global: { address: c_held_address, contents: c_held_contents, memsize: c_held_memsize },
        thread: addr.call(local_thread),
        garbage: garbage,
        references: [Holders::CACHE, Registry, $handler, local_thread].map do |o|
          all = ObjectSpace.reachable_objects_from(o)
          visible = all.reject { |x| x.is_a?(ObjectSpace::InternalObjectWrapper) }.map { |x| addr.call(x) }
          [addr.call(o), visible.uniq, all.size]
        end
      }
      PtmallocDump.dump(ARGV_PATH, graph: true, fork: FORK, wait: true)
      held.size
    end
    frame.call
    puts JSON.generate(facts)
  RUBY

  [false, true].each do |fork|
    context(fork ? "in a fork snapshot" : "in process") do
      before(:context) do
        @path = File.join(Dir.mktmpdir("ptmd-retainers"), "r.dump")
        code = "ARGV_PATH = #{@path.dump}; FORK = #{fork}; require 'json'; #{child}"
        out, err, status = run_ruby(code)
        raise "the child failed: #{err}" unless status.success?

        @facts = JSON.parse(out.lines.last, symbolize_names: true)
        @dump = PtmallocDump.load(@path)
        # the malloc bytes each object owns, from the dump's attribution, summed here
        @owned = Hash.new(0)
        @dump.each_chunk do |c|
          next if c.free?

          o = @dump.ruby.owner_of(c)
          @owned[o.address] += c.size if o
        end
      end

      after(:context) { FileUtils.rm_rf(File.dirname(@path)) if @path }

      # What the holder's contents own, less those a root holds as well (a word on a stack that looks
      # like a reference, say: then the holder alone does not keep them); at most one in twenty such
      def exact(fact)
        rooted = @dump.graph_roots.map { |r| r[:address] } & fact[:contents]
        expect(rooted.size).to be <= fact[:contents].size / 20
        @owned[fact[:address]] + (fact[:contents] - rooted).sum { |a| @owned[a] }
      end

      def contents_held(fact)
        (fact[:contents] - @dump.graph_roots.map { |r| r[:address] }).size
      end

      def expect_holder(fact, root)
        bytes = exact(fact)
        expect(bytes).to be > 200_000
        figures = @dump.retained_by(fact[:address])
        expect(figures[:retained_bytes]).to eq(bytes)
        expect(figures[:retained_objects]).to eq(contents_held(fact) + 1)
        expect(figures[:retained_bytes]).to be_within(fact[:memsize] / 20).of(fact[:memsize])
        listed = @dump.retainers(limit: 40).find { |r| r[:address] == fact[:address] }
        expect(listed).not_to be_nil, "#{root} is not among the retainers"
        expect(listed[:root]).to match(root)
        expect(listed[:retained_bytes]).to eq(bytes)
        expect(listed[:path]).not_to be_empty
        listed
      end

      it "lists the same holders however many are asked for" do
        expect(@dump.retainers(limit: 500).first(20)).to eq(@dump.retainers(limit: 20))
      end

      it "records the graph" do
        expect(@dump.graph?).to be(true)
        expect(@dump.graph_meta[:flags]).to include(:constant_names, :global_names, :thread_local_names)
      end

      it "names a constant's Hash with the chunks its keys and values own" do
        listed = expect_holder(@facts[:cache], /\AHolders::CACHE\z/)
        expect(listed[:class_name]).to eq("Hash")
        expect(listed[:path].last).to eq("CACHE (Hash)")
      end

      it "names the global holding a closure whose environment nothing else holds" do
        expect_holder(@facts[:handler], /\A\$handler\z/)
      end

      it "names a class's instance variable and a class variable" do
        expect_holder(@facts[:registry], /\ARegistry\.@instance\z/)
        expect_holder(@facts[:config], /\AConfig\.@@table\z/)
      end

      it "names a thread-local variable and its thread" do
        expect_holder(@facts[:thread_local], /\AThread#\[:buffer\] of thread 0x#{@facts[:thread].to_s(16)}\z/)
      end

      it "finds an object only a C global holds, under the roots registered from C" do
        fact = @facts[:c_global]
        figures = @dump.retained_by(fact[:address])
        expect(figures[:retained_bytes]).to eq(exact(fact))
        path = @dump.path_to_root(fact[:address])
        # Ruby 3.4 marks the addresses registered from C with the VM's own roots (vm.c rb_vm_mark:
        # global_object_list); before, under their own category
        expect(path.first[:root]).to eq(RUBY_VERSION >= "3.4" ? "vm" : "global_list")
        expect(path.size).to eq(1)
      end

      it "finds an object a live frame's local holds, through its thread" do
        fact = @facts[:local]
        expect(@dump.retained_by(fact[:address])[:retained_bytes]).to eq(exact(fact))
        path = @dump.path_to_root(fact[:address])
        expect(path.map { |s| s[:class_name] }).to include("Thread")
      end

      # (a word on a stack that looks like a reference to it keeps it, for the GC as for the dump)
      it "retains a cycle nothing reaches by no root Ruby knows it holds" do
        @facts[:garbage].each do |a|
          expect(@dump.ruby.object_at(a)).not_to be_nil # no GC ran: it is in the heap
          path = @dump.path_to_root(a)
          expect(path.nil? || path.first[:root] == "machine_context").to be(true), path.inspect
          expect(@dump.retained_by(a)).to be_nil if path.nil?
        end
      end

      it "records what the GC marks from an object: ObjectSpace.reachable_objects_from's objects" do
        @facts[:references].each do |address, visible, all|
          recorded = @dump.references_of(address).map { |s| s[:address] }
          expect(recorded).to include(*visible.select { |a| @dump.ruby.object_at(a) })
          expect(recorded.uniq.size).to be <= all
        end
      end
    end
  end

  it "names the holder that grew between two dumps, with its growth (Diff#retainers)" do
    dir = tmpdir
    code = <<~RUBY
      require "objspace"
      module Growing; STORE = {}; end
      module Steady; LIST = Array.new(300) { |i| "s" * (4000 + i) }; end
      add = ->(from, to) { (from...to).each { |i| Growing::STORE["k\#{i}"] = "v" * (3000 + i % 5) } }
      add.call(0, 200)
      GC.start
      GC.disable # no slot freed and taken again between the dumps: the interface is exact
      PtmallocDump.dump(#{File.join(dir, 'a.dump').dump}, graph: true)
      add.call(200, 1200)
      PtmallocDump.dump(#{File.join(dir, 'b.dump').dump}, graph: true)
      grown = Growing::STORE.values.last(1000).sum { |v| ObjectSpace.memsize_of(v) - 40 }
      require "fiddle"
      puts Fiddle::Pointer[Growing::STORE["k1199"]].to_i # the value's malloc'd bytes
      puts grown
    RUBY
    out, err, status = run_ruby(code)
    expect(status).to be_success, err
    memsize_growth = Integer(out.lines.last)
    diff = PtmallocDump.diff(File.join(dir, "a.dump"), File.join(dir, "b.dump"))
    grew = diff.retainers(limit: 5)
    expect(grew.first[:root]).to eq("Growing::STORE")
    expect(grew.first[:growth_objects]).to be_within(4).of(2000) # 1000 keys and 1000 values
    expect(grew.first[:growth_bytes]).to be_within(memsize_growth / 10).of(memsize_growth)
    # the interface: the Hash both dumps hold references the 2,000 new keys and values
    hanging = diff.interface(limit: 5).first
    expect(hanging[:root]).to eq("Growing::STORE")
    expect(hanging[:new_objects]).to be_within(4).of(2000)
    expect(hanging[:new_bytes]).to be_within(memsize_growth / 10).of(memsize_growth)
    steady = grew.find { |g| g[:root] == "Steady::LIST" }
    expect(steady.nil? || steady[:growth_bytes].abs < 4096).to be(true)

    text, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--retainers",
                                       File.join(dir, "b.dump"))
    expect(status).to be_success, err
    expect(text).to match(/^\S+ \S+ retained by Growing::STORE \(Hash, 2,[34]\d\d objects\)$/)
    # --explain of a value's bytes: who keeps them alive, the path from the root to the value
    buffer = Integer(out.lines[-2])
    text, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--explain",
                                       buffer.to_s, File.join(dir, "b.dump"))
    expect(status).to be_success, err
    expect(text).to match(/^kept alive by +.*STORE \(Hash\) > \["k1199"\] \(String\)$/)

    _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, "--diff",
                                     File.join(dir, "a.dump"), File.join(dir, "b.dump"), File.join(dir, "diff"))
    expect(status).to be_success, err
    page = File.read(File.join(dir, "diff", "index.html"))
    expect(page).to include("The holder that grew most: <b>Growing::STORE</b> (Hash)")
  end

  it "says why a dump has no graph, and raises a PtmallocDump::Error for its retainers" do
    path = File.join(tmpdir, "plain.dump")
    _o, err, status = run_ruby("PtmallocDump.dump(#{path.dump})")
    expect(status).to be_success, err
    dump = PtmallocDump.load(path)
    expect(dump.graph?).to be(false)
    expect(dump.no_graph_reason).to include("graph: true")
    expect { dump.retainers }.to raise_error(PtmallocDump::NoGraphError, /graph: true/)
    expect(PtmallocDump::NoGraphError.ancestors).to include(PtmallocDump::Error)
  end
end
