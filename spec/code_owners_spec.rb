# frozen_string_literal: true

require "json"
require "objspace"
require "spec_helper"

RSpec.describe "code memory charged to the module that defines it" do
  def address_of(obj)
    Integer(ObjectSpace.dump(obj)[/"address":"(0x\h+)"/, 1])
  end

  # ObjectSpace.memsize_of of a method's iseq and of the iseqs of its blocks
  def iseq_memsize(mod, name)
    iseq = RubyVM::InstructionSequence.of(mod.instance_method(name))
    children = []
    iseq.each_child { |c| children << c }
    [iseq, *children].sum { |i| ObjectSpace.memsize_of(i) }
  end

  # The iseq leak of Discourse's template rendering (Sam Saffron, "Debugging hidden memory leaks in
  # Ruby", 2019): methods defined by module_eval in a loop on one module, never removed.
  it "puts the growth of an iseq leak under the leaking module, with each method's path and line" do
    a = File.join(tmpdir, "before.dump")
    b = File.join(tmpdir, "after.dump")
    out, err, status = run_ruby(<<~RUBY)
      require "json"
      require "objspace"
      require "securerandom"
      module LeakyTemplates; end
      def leak(count, first_line)
        Array.new(count) do |i|
          name = "_" + SecureRandom.hex
          LeakyTemplates.module_eval("def \#{name}; \#{"sleep;" * 100}; end", "/virtual/templates.rb", first_line + i)
          name
        end
      end
      leak(50, 1)
      GC.start
      PtmallocDump.dump(#{a.dump}, references: true)
      names = leak(2000, 1000)
      GC.start
      PtmallocDump.dump(#{b.dump}, references: true)
      memsize = names.sum { |n| ObjectSpace.memsize_of(RubyVM::InstructionSequence.of(LeakyTemplates.instance_method(n))) }
      puts JSON.generate(names: names, memsize: memsize)
    RUBY
    expect(status).to be_success, err
    leaked = JSON.parse(out.lines.last, symbolize_names: true)
    diff = PtmallocDump.diff(a, b)
    growth = diff.growth[:in_use_bytes]
    module_growth = diff.owners[:by_module]["LeakyTemplates"]
    warn format("  iseq leak: in-use malloc +%<g>d B, LeakyTemplates +%<m>d B (%<p>.1f%%), memsize_of the iseqs %<s>d B",
                g: growth, m: module_growth, p: 100.0 * module_growth / growth, s: leaked[:memsize])
    expect(module_growth).to be >= 0.9 * growth
    expect(diff.owners[:by_module].first.first).to eq("LeakyTemplates")
    # Ruby's own measure of the same iseqs: memsize_of counts the bytes asked of malloc, the dump
    # the chunks that hold them
    expect(module_growth).to be_within(25).percent_of(leaked[:memsize])

    after = PtmallocDump.load(b)
    expect(after.ruby.summary[:by_module].first.first).to eq("LeakyTemplates")
    methods = after.ruby.code_owners[:methods].select { |m| m[:module] == "LeakyTemplates" }
    by_name = methods.to_h { |m| [m[:method], m] }
    leaked[:names].each_with_index do |name, i|
      expect(by_name[name]).to include(path: "/virtual/templates.rb", line: 1000 + i), "#{name}: #{by_name[name].inspect}"
      expect(by_name[name][:bytes]).to be > 100 * 8 # a hundred calls, each more than one word of bytecode
    end
    expect(methods.size).to eq(2050)
  end

  it "charges a class's method and constant tables to it, and its methods with their blocks" do
    klass = Class.new
    stub_const("CodeOwnersBigTable", klass)
    3000.times { |i| klass.const_set("CONST_#{i}", i) }
    500.times { |i| klass.class_eval("def m#{i}(a); [a].map { |x| x + #{i} }; end", "/virtual/big_table.rb", 10 + i) }
    klass.attr_accessor(*Array.new(1000) { |i| "attr_#{i}" })
    GC.start
    dump = dump_and_load(references: true)
    owner = address_of(klass)
    tables = dump.each_chunk.select { |c| %i[in_use mmapped].include?(c.state) && dump.ruby.owner_of(c)&.address == owner }
                 .sum(&:size)
    expect(dump.ruby.code_of(owner)).to include(kind: :module, module: "CodeOwnersBigTable")
    # Ruby's memsize_of a class counts its method, constant, ivar and cache tables (not the constant
    # entries the constant table points at): the chunks that hold them, and the entries, are more
    expect(tables).to be_between(ObjectSpace.memsize_of(klass), 2 * ObjectSpace.memsize_of(klass))

    codes = dump.ruby.code_owners
    methods = codes[:methods].select { |m| m[:module] == "CodeOwnersBigTable" }
    expect(codes[:by_module]["CodeOwnersBigTable"][:bytes]).to eq(tables + methods.sum { |m| m[:bytes] })
    defined = methods.select { |m| m[:method].start_with?("m") }
    expect(defined.map { |m| [m[:method], m[:path], m[:line]] })
      .to match_array(Array.new(500) { |i| ["m#{i}", "/virtual/big_table.rb", 10 + i] })
    iseqs = (0...500).sum { |i| iseq_memsize(klass, :"m#{i}") }
    expect(defined.sum { |m| m[:bytes] }).to be_between(iseqs, 2 * iseqs)
    accessors = methods.select { |m| m[:method].start_with?("attr_") }
    expect(accessors.size).to eq(2000) # readers and writers: entries without iseqs, no path
    expect(accessors.map { |m| m[:path] }.uniq).to eq([nil])
  end

  it "records the same in a fork snapshot, whose child writes what the parent's Ruby pass found" do
    mod = Module.new
    stub_const("CodeOwnersForked", mod)
    200.times { |i| mod.module_eval("def f#{i}; #{'nil;' * 50}; end", "/virtual/forked.rb", 1 + i) }
    path = File.join(tmpdir, "fork.dump")
    PtmallocDump.dump(path, fork: true, wait: true, references: true)
    dump = PtmallocDump.load(path)
    expect(dump.header[:fork_snapshot]).to be(true)
    methods = dump.ruby.code_owners[:methods].select { |m| m[:module] == "CodeOwnersForked" }
    expect(methods.map { |m| [m[:method], m[:path], m[:line]] })
      .to match_array(Array.new(200) { |i| ["f#{i}", "/virtual/forked.rb", 1 + i] })
    iseqs = (0...200).sum { |i| iseq_memsize(mod, :"f#{i}") }
    expect(dump.ruby.summary[:by_module]["CodeOwnersForked"][:bytes]).to be_between(iseqs, 2 * iseqs)
  end

  it "names the VM's own tables instead of lumping them under RubyVM" do
    a = File.join(tmpdir, "before.dump")
    b = File.join(tmpdir, "after.dump")
    _, err, status = run_ruby(<<~RUBY)
      GC.start
      PtmallocDump.dump(#{a.dump}, references: true)
      $interned = Array.new(50_000) { |i| -"interned string \#{i}" } # 50,000 entries of the frozen string table
      GC.start
      PtmallocDump.dump(#{b.dump}, references: true)
    RUBY
    expect(status).to be_success, err
    before, after = [a, b].map { |p| PtmallocDump.load(p).ruby }
    tables = after.summary[:vm_tables]
    expect(tables.keys).to include("frozen string table", "loaded features index",
                                   "GC object space (page headers, mark bitmaps, finalizer and id tables)")
    # almost all that the VM's object owns has a name
    expect(after.code_owners[:vm_table_bytes]).to be >= 0.9 * after.summary[:by_class]["RubyVM"][:bytes]
    # an st_table entry is three words (st.c), and the table grows by doubling
    growth = tables["frozen string table"][:bytes] - before.summary[:vm_tables]["frozen string table"][:bytes]
    expect(growth).to be >= 50_000 * 3 * 8
    # and what RubyVM grew by is the named tables' growth (this one's, and the GC's new page headers)
    vm_growth = after.summary[:by_class]["RubyVM"][:bytes] - before.summary[:by_class]["RubyVM"][:bytes]
    expect(after.code_owners[:vm_table_bytes] - before.code_owners[:vm_table_bytes]).to be_within(5).percent_of(vm_growth)
  end

  # where a singleton class keeps its object changed after Ruby 3.1 (an ivar before, the class's own
  # slot after): the name must come out the same as Ruby's inspect says
  it "names a module's singleton class by the module, and an object's by the class's own address" do
    mod = Module.new
    stub_const("CodeOwnersSingleton", mod)
    40.times { |i| mod.singleton_class.class_eval("def s#{i}; #{'nil;' * 20}; end", "/virtual/singleton.rb", 1 + i) }
    obj = Object.new
    30.times { |i| obj.singleton_class.class_eval("def o#{i}; #{'nil;' * 20}; end", "/virtual/object.rb", 1 + i) }
    GC.start
    dump = dump_and_load(references: true)
    methods = dump.ruby.code_owners[:methods]
    module_methods = methods.select { |m| m[:module] == mod.singleton_class.inspect }
    expect(module_methods.map { |m| [m[:method], m[:path], m[:line]] })
      .to match_array(Array.new(40) { |i| ["s#{i}", "/virtual/singleton.rb", 1 + i] })
    anonymous = format("#<Class:0x%016x>", address_of(obj.singleton_class))
    expect(methods.select { |m| m[:module] == anonymous }.map { |m| m[:method] })
      .to match_array(Array.new(30) { |i| "o#{i}" })
    expect(dump.ruby.code_owners[:by_module][mod.singleton_class.inspect][:bytes]).to be > 40 * 20 * 8
  end

  it "records them on this Ruby, and where the layouts are not known records none and says why" do
    dump = dump_and_load(references: true)
    expect(dump.ruby.summary[:code_owners_reason]).to be_nil
    expect(dump.ruby.code_owners[:by_module].keys).to include("#<Class:PtmallocDump>")
    # the tables a user reads leave this gem's own modules out, and say how much they are
    gem_own = /\A(#<Class:)?PtmallocDump(::|>|\z)/ # the module, what it defines, their singletons
    expect(dump.ruby.summary[:by_module].keys.grep(gem_own)).to eq([])
    own = dump.ruby.code_owners[:by_module].select { |name, _| gem_own.match?(name) }.sum { |_, e| e[:bytes] }
    expect(own).to be > 0
    expect(dump.ruby.summary[:own_code_bytes]).to eq(own)
    path = File.join(tmpdir, "unknown.dump")
    _, err, status = run_ruby("PtmallocDump.dump(#{path.dump}, references: true)",
                              env: { "PTMALLOC_DUMP_HIDE_RUBY_LAYOUTS" => "1" })
    expect(status).to be_success, err
    unknown = PtmallocDump.load(path)
    expect(unknown.ruby.objects.count).to be > 0
    expect(unknown.ruby.code_owners).to be_nil
    expect(unknown.ruby.summary).to include(by_module: {}, methods: [])
    expect(unknown.ruby.summary[:code_owners_reason])
      .to eq("the method entry and iseq layouts of Ruby #{RUBY_VERSION[/\A\d+\.\d+/]} are not known to this version of ptmalloc_dump")
  end
end
