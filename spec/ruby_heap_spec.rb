# frozen_string_literal: true

require "fiddle"
require "objspace"
require "set"
require "spec_helper"

RSpec.describe "correlating the malloc heap with Ruby's ObjectSpace" do
  def address_of(obj)
    Integer(ObjectSpace.dump(obj)[/"address":"(0x\h+)"/, 1])
  end

  # dumps with GC already settled (a full GC reconciles Ruby's slot counters) and loads
  def settled_dump(**opts)
    GC.start
    dump_and_load(**opts)
  end

  # chunks owned by obj, through the dump's attribution (one pass over the dump's chunks, kept for the
  # next object asked of the same dump)
  def owned_chunks(dump, obj)
    @owned_by ||= {}.compare_by_identity
    owned = @owned_by[dump] ||= dump.each_chunk.with_object({}) do |c, by_owner|
      owner = %i[in_use mmapped].include?(c.state) && dump.ruby.owner_of(c)
      (by_owner[owner.address] ||= []) << c if owner
    end
    owned.fetch(address_of(obj), [])
  end

  it "records every ObjectSpace page and live object, as GC.stat counts them in the same window" do
    dump = settled_dump
    meta = dump.ruby.meta
    pages = dump.ruby.pages
    # the pages are found by their structure, the empty pages Ruby keeps for reuse (tomb pages)
    # included, as GC.stat counts them
    expect(meta[:pages_from_gc]).to be(false)
    expect(pages.size).to eq(meta[:heap_allocated_pages])
    expect(pages.sum(&:live_slots)).to eq(meta[:heap_live_slots])
    expect(meta[:object_count]).to eq(meta[:heap_live_slots])
    expect(pages.sum(&:free_slots)).to eq(meta[:heap_free_slots])
    # one slot size before Ruby 3.2, the size pools' since (variable width allocation)
    slot_sizes = GC.respond_to?(:stat_heap) ? GC.stat_heap.values.map { |h| h[:slot_size] } : [GC::INTERNAL_CONSTANTS[:RVALUE_SIZE]]
    expect(pages.map(&:stride).uniq.sort).to eq(slot_sizes.sort)
    expect(meta[:heap_allocated_pages]).to be_within(2).of(GC.stat(:heap_allocated_pages))
  end

  it "ties 10,000 strings of 1,000 bytes to 10,000 distinct chunks owned by those T_STRING objects" do
    strings = Array.new(10_000) { |i| format("%05d", i) * 200 }
    dump = settled_dump
    by_address = strings.to_h { |s| [address_of(s), s] }
    owned = Hash.new { |h, k| h[k] = [] }
    dump.each_chunk do |c|
      next unless c.state == :in_use

      owner = dump.ruby.owner_of(c)
      owned[owner.address] << c if owner && by_address.key?(owner.address)
    end
    expect(owned.size).to eq(10_000)
    chunks = owned.values.flatten
    expect(chunks.map(&:address).uniq.size).to eq(10_000)
    expect(chunks.map(&:size).min).to be >= 1_008
    expect(owned.keys.map { |a| dump.ruby.object_at(a).type }.uniq).to eq([:T_STRING])
    expect(dump.ruby.object_at(owned.keys.first).class_name).to eq("String")
    expect(dump.summary[:ruby][:by_type][:T_STRING][:bytes]).to be >= 10_000 * 1_008
    expect(strings.size).to eq(10_000)
  end

  it "ties arrays of 1,000 elements to T_ARRAY objects" do
    arrays = Array.new(100) { |i| Array.new(1_000, i) }
    dump = settled_dump
    arrays.each do |a|
      chunks = owned_chunks(dump, a)
      expect(chunks.size).to eq(1)
      expect(chunks.first.size).to be >= 8_000
      expect(dump.ruby.owner_of(chunks.first).type).to eq(:T_ARRAY)
    end
  end

  it "ties a hash's table to the T_HASH, and with references (the default) its entries and bins too" do
    hash = (1..10_000).to_h { |i| [i, i] }
    # Ruby 3.3 keeps the st_table in the hash's slot; before, the slot points at a malloc'd one
    table_in_slot = Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.3")
    plain = settled_dump(references: false)
    direct = owned_chunks(plain, hash)
    expect(direct.map { |c| plain.ruby.owner_of(c).type }.uniq).to eq([:T_HASH])
    if table_in_slot
      # the slot's own pointers: the bins and the entries
      expect(direct.map(&:size).sort).to match([a_value_between(32_768, 131_072), be >= 10_000 * 24])
    else
      # without references only the st_table itself
      expect(direct.map(&:size)).to match([be <= 96])
    end
    with_refs = settled_dump
    chunks = owned_chunks(with_refs, hash)
    # the entries array and the bins, through the st_table (the scan is conservative: a stale word in
    # the entries' unused capacity may bring in one more)
    sizes = chunks.map(&:size).sort
    expect(sizes.first).to be <= 96 unless table_in_slot     # the st_table
    expect(sizes).to include(a_value_between(32_768, 131_072)) # the bins
    expect(sizes.last).to be >= 10_000 * 24                 # the entries
    expect(with_refs.ruby.meta[:references]).to be(true)
    expect(with_refs.ruby.summary[:chunks_via_references]).to be > 0
  end

  it "ties the instance variables of an object with 100 of them to the T_OBJECT" do
    obj = Object.new
    100.times { |i| obj.instance_variable_set(:"@iv#{i}", i) }
    dump = settled_dump
    # the ivar array; the object's slot also points at its class's shared ivar index table, which the
    # first object to point at it owns
    ivars = owned_chunks(dump, obj).select { |c| c.size >= 100 * 8 }
    expect(ivars.size).to eq(1)
    expect(dump.ruby.owner_of(ivars.first)).to have_attributes(type: :T_OBJECT, class_name: "Object")
    expect(dump.summary[:ruby][:by_type][:T_OBJECT][:bytes]).to be >= 100 * 8
  end

  it "names the typed data type of a core class's object" do
    random = Random.new(42) # its generator state is malloc'd in every Ruby (Ruby 3.3 embeds a Time's)
    type_name = ObjectSpace.dump(random)[/"struct":"([^"]+)"/, 1]
    dump = settled_dump
    chunks = owned_chunks(dump, random)
    expect(chunks.size).to eq(1)
    expect(chunks.first.size).to be >= 624 * 4 # the Mersenne Twister's state
    owner = dump.ruby.owner_of(chunks.first)
    expect(owner).to have_attributes(type: :T_DATA, class_name: "Random", data_type: type_name)
    expect(dump.summary[:ruby][:by_data_type]).to include(type_name)
  end

  # by slot pointers: with references (the default) the array's address, which Fiddle's call returned
  # and left in a Ruby-owned buffer, would lead to it
  it "does not attribute native memory held only in a C array to any Ruby object by slot pointers" do
    blocks = NativeThreads.hold(10_000, 64)
    begin
      dump = settled_dump(references: false)
      blocks.each do |b|
        chunk = dump.chunk_at(b - 16)
        expect(chunk.state).to eq(:in_use)
        expect(dump.ruby.owner_of(chunk)).to be_nil
        expect(dump.ruby.category_of(chunk)).to eq(:native)
      end
      expect(dump.summary[:ruby][:unattributed_bytes]).to be >= 10_000 * 80
    ensure
      NativeThreads.release
    end
  end

  # Ruby 3.3 on keeps a Process::Status's 12-byte struct in an 80-byte slot, whose last words are what
  # the slot's earlier object left there: here strings of the blocks' addresses. In a process of its
  # own: whether the statuses land on the seeds' slots depends on the free slots a process's history
  # left (in trixie's whole row, in the suite's process, none did).
  it "does not take the stale words past an embedded struct for its pointers" do
    path = File.join(tmpdir, "stale.dump")
    support = File.join(SpecHelpers::ROOT, "spec", "support")
    out, err, status = run_ruby(<<~RUBY)
      require "fiddle"
      require "json"
      require "objspace"
      require "set"
      %w[helpers native_threads].each { |f| require File.join(#{support.dump}, f) }
      address_of = ->(obj) { Integer(ObjectSpace.dump(obj)[/"address":"(0x\\h+)"/, 1]) }
      blocks = NativeThreads.hold(6_000, 64)
      # 48 bytes, embedded in an 80-byte slot on 3.2+ (an interpolation's new string; pack's has a buffer)
      seeds = Array.new(6_000) { |i| "\#{blocks.rotate(i).first(6).pack('Q*')}" }
      seeds.clear # their slots are freed for the statuses
      GC.start
      statuses = Array.new(300) { Process.wait2(Process.spawn("true"))[1] }
      known = blocks.to_set
      slot = ObjectSpace.dump(statuses.first)[/"slot_size":(\\d+)/, 1].to_i
      stale = statuses.count do |st|
        slot >= 80 && Fiddle::Pointer.new(address_of.(st))[48, slot - 48].unpack("Q*").any? { |w| known.include?(w) }
      end
      GC.start
      PtmallocDump.dump(#{path.dump}, references: false)
      puts JSON.generate(blocks: blocks, statuses: statuses.map(&address_of), slot: slot, stale: stale)
      NativeThreads.release
    RUBY
    expect(status).to be_success, err
    r = JSON.parse(out.lines.last, symbolize_names: true)
    # embedded: some statuses sit on seeds' words, which their slots still hold
    expect(r[:stale]).to be_positive if r[:slot] >= 80
    dump = PtmallocDump.load(path)
    r[:blocks].each do |b|
      chunk = dump.chunk_at(b - 16)
      expect(dump.ruby.owner_of(chunk)).to be_nil, "#{dump.ruby.owner_of(chunk).inspect} owns block 0x#{b.to_s(16)}"
    end
    expect(r[:statuses].map { |a| dump.ruby.object_at(a).class_name }.uniq).to eq(["Process::Status"])
  end

  it "leaves GC enabled after a dump, also when the dump raises, and disabled when it was" do
    GC.enable
    dump_and_load
    expect(GC.disable).to be(false) # it was enabled
    GC.enable
    expect { PtmallocDump.dump(File.join(tmpdir, "missing", "x.dump")) }.to raise_error(Errno::ENOENT)
    expect(GC.disable).to be(false)
    PtmallocDump.dump(File.join(tmpdir, "y.dump"))
    expect(GC.enable).to be(true) # still disabled as before the dump
  end

  it "adds up by_class entries of one name: Class holds what every class object owns" do
    dump = settled_dump
    by_owner = Hash.new(0)
    owners_named = Hash.new { |h, k| h[k] = {} }
    dump.each_chunk do |c|
      next unless %i[in_use mmapped].include?(c.state)

      owner = dump.ruby.owner_of(c)
      next unless owner && %w[Class Module].include?(owner.class_name)

      by_owner[owner.class_name] += c.size
      owners_named[owner.class_name][owner.address] = true
    end
    by_class = dump.summary[:ruby][:by_class]
    expect(owners_named["Class"].size).to be > 100 # many class objects, each of its own metaclass
    expect(by_class["Class"][:bytes]).to eq(by_owner["Class"])
    expect(by_class["Module"][:bytes]).to eq(by_owner["Module"])
  end

  it "names an anonymous class as Ruby inspects it" do
    anon = Class.new
    objects = Array.new(50) { anon.new.tap { |o| o.instance_variable_set(:@a, "x" * 200) } }
    (1..10).each { |i| objects.each { |o| o.instance_variable_set(:"@v#{i}", i) } } # ivars past the slot
    dump = settled_dump
    name = dump.ruby.object_at(address_of(objects.first)).class_name
    expect(name).to eq(anon.inspect)
    expect(dump.summary[:ruby][:by_class][name][:chunks]).to be >= 50
  end

  # Ruby's own oracle for the age: ObjectSpace.dump prints "old":true for an old object
  def old_per_objectspace?(obj)
    ObjectSpace.dump(obj).include?('"old":true')
  end

  it "records each object's GC age as ObjectSpace.dump does, and GC.stat's counts" do
    GC.start
    survivors = Array.new(200) { |i| "survivor-#{i}-" * 10 }
    4.times { GC.start } # promoted: old
    GC.disable
    fresh = Array.new(200) { |i| "fresh-#{i}-" * 10 }
    dump = dump_and_load
    checked = (survivors.first(20) + fresh.first(20)).map do |s|
      [dump.ruby.object_at(address_of(s)).old, old_per_objectspace?(s)]
    end
    stat = GC.stat
    GC.enable
    expect(checked.map(&:last).count(true)).to eq(20)
    expect(checked.map(&:first)).to eq(checked.map(&:last))
    gc = dump.header[:gc]
    %i[count major_gc_count minor_gc_count].each { |k| expect(gc[k]).to eq(stat[k]) }
    expect(gc[:full_gc]).to be(false)
    expect(dump.summary[:ruby][:old_objects]).to be_within(stat[:old_objects] / 20).of(stat[:old_objects])
  end

  it "shows strings built and dropped since the latest GC as young, and gone with gc: true" do
    GC.start
    GC.disable # nothing sweeps them before the dump
    addresses = []
    2_000.times do |i|
      s = "dropped-#{i}-" * 40 # 400+ bytes: a malloc'd buffer
      addresses << address_of(s) if (i % 100).zero?
    end
    # both dumps before either is loaded: loading makes young objects of its own
    PtmallocDump.dump(File.join(tmpdir, "young.dump"))
    PtmallocDump.dump(File.join(tmpdir, "swept.dump"), gc: true)
    GC.enable
    dump = PtmallocDump.load(File.join(tmpdir, "young.dump"))
    swept = PtmallocDump.load(File.join(tmpdir, "swept.dump"))
    objects = addresses.map { |a| dump.ruby.object_at(a) }
    expect(objects.map(&:type).uniq).to eq([:T_STRING])
    expect(objects.map(&:old).uniq).to eq([false])
    expect(dump.summary[:ruby][:young_bytes]).to be >= 2_000 * 400
    expect(addresses.map { |a| swept.ruby.object_at(a) }.compact).to eq([])
    expect(swept.header[:gc][:full_gc]).to be(true)
    expect(swept.header[:gc][:last_gc_major]).to be(true)
    expect(swept.summary[:ruby][:young_objects]).to be <= dump.summary[:ruby][:young_objects] - 2_000
  end

  it "marks garbage a pending lazy sweep has not freed as garbage, its memory still in use, and the live as live" do
    # 1,500+ bytes: a malloc'd buffer on every Ruby (3.2 on embeds strings of up to 640 bytes in a slot)
    kept = Array.new(1_000) { |i| "kept-#{i}-" * 150 }
    dropped = Array.new(3_000) { |i| "dropped-#{i}-" * 150 }
    dropped_addresses = dropped.map { |s| address_of(s) }
    dropped = nil # rubocop:disable Lint/UselessAssignment -- the strings' last reference goes
    GC.start(immediate_sweep: false)
    expect(GC.latest_gc_info(:state)).to eq(:sweeping)
    path = File.join(tmpdir, "lazy.dump")
    PtmallocDump.dump(path)
    # ObjectSpace ends the sweep before it lists anything: what is left are the live objects
    live = Set.new
    ObjectSpace.each_object { |o| live << Fiddle.dlwrap(o) }
    dump = PtmallocDump.load(path)
    expect(dump.ruby.meta[:pages_from_gc]).to be(false)
    garbage = dump.ruby.objects.select(&:garbage?)
    expect(garbage.map(&:address).select { |a| live.include?(a) }).to eq([])
    expect(kept.map { |s| dump.ruby.object_at(address_of(s)) }.count(&:garbage?)).to eq(0)
    # the sweep's first steps may have freed (and reused) the slots of a few pages already; the rest
    # are the dropped strings, dead and still holding their buffers
    dead = dropped_addresses.filter_map { |a| dump.ruby.object_at(a) }.select(&:garbage?)
    expect(dead.size).to be >= dropped_addresses.size / 2
    expect(dead.map(&:type).uniq).to eq([:T_STRING])
    dead_set = dead.to_set(&:address)
    owned = dump.each_chunk.select { |c| c.state == :in_use && dead_set.include?(dump.ruby.owner_of(c)&.address) }
    expect(owned.size).to be >= dead.size
    expect(owned.sum(&:size)).to be >= dead.size * 1_500
    expect(dump.summary[:ruby][:garbage_bytes]).to be >= owned.sum(&:size)
    expect(dump.summary[:ruby][:garbage_objects]).to eq(garbage.size)
    # by class: the String entry's garbage bytes are its dead strings', summed over the chunks they own
    by_dead_class = Hash.new(0)
    dump.each_chunk do |c|
      o = dump.ruby.owner_of(c)
      by_dead_class[o.class_name] += c.size if o&.garbage?
    end
    strings = dump.summary[:ruby][:by_class].fetch("String")
    expect(strings[:garbage_bytes]).to eq(by_dead_class["String"])
    expect(strings[:garbage_bytes]).to be >= owned.sum(&:size)
    # and the report's findings say so: the dead strings' bytes do not rank String, and are said apart
    findings = PtmallocDump::Findings.new(dump).all
    expect(findings.find { |f| f.topic == :garbage }.bytes).to eq(dump.summary[:ruby][:garbage_bytes])
    top_class = findings.find { |f| f.topic == :class }
    name, entry = dump.summary[:ruby][:by_class].max_by { |_, e| e[:bytes] - e[:garbage_bytes] }
    expect(top_class.bytes).to eq(entry[:bytes] - entry[:garbage_bytes])
    expect(top_class.text).to include(" #{name} objects")
    expect(top_class.text.include?("awaiting the lazy sweep")).to eq(entry[:garbage_bytes].positive?)
  end

  it "names garbage whose class the pending sweep has freed already, and the live objects' classes" do
    # garbage objects with singleton classes over garbage anonymous classes, on other pages than theirs:
    # the sweep's first steps free the classes of some and leave the objects
    code = <<~RUBY
      require "json"
      out = Array.new(8) do |round|
        classes = Array.new(3_000) { |i| Class.new { attr_accessor :x; const_set(:K, i) } }
        filler = Array.new(10_000) { |i| "f\#{i}" }
        objects = classes.map { |c| o = c.new; o.singleton_class.class_eval { def y; end }; o.x = "v" * 30; o }
        kept = Class.new.new
        classes = objects = filler = nil
        GC.start(full_mark: true, immediate_sweep: false)
        ((round * 7919) % 40_000).times { +"" }
        sweeping = GC.latest_gc_info(:state) == :sweeping
        path = File.join(#{tmpdir.inspect}, "freed-class.dump")
        PtmallocDump.dump(path)
        ruby = PtmallocDump.load(path).ruby
        { sweeping: sweeping, garbage: ruby.summary[:garbage_objects],
          kept: ruby.object_at(Fiddle.dlwrap(kept)).class_name, kept_class: kept.class.inspect }
      end
      puts JSON.generate(out)
    RUBY
    out, err, status = run_ruby("require 'fiddle'; #{code}")
    expect(status).to be_success, err
    rounds = JSON.parse(out, symbolize_names: true)
    expect(rounds.count { |r| r[:sweeping] && r[:garbage].positive? }).to be >= 4
    rounds.each { |r| expect(r[:kept]).to eq(r[:kept_class]) }
  end

  it "asks the GC for its pages where it cannot tell garbage from live, ending the pending sweep first" do
    code = <<~RUBY
      require "json"
      dropped = Array.new(3_000) { |i| "dropped-\#{i}-" * 150 }
      dropped = nil
      out = [false, true].map do |lazy|
        GC.start(immediate_sweep: !lazy)
        sweeping = GC.latest_gc_info(:state) == :sweeping
        path = File.join(#{tmpdir.inspect}, "gc-\#{lazy}.dump")
        PtmallocDump.dump(path)
        m = PtmallocDump.load(path).ruby.meta
        { sweeping: sweeping, from_gc: m[:pages_from_gc], objects: m[:object_count], live: m[:heap_live_slots],
          pages: m[:page_count], allocated: m[:heap_allocated_pages] - m[:heap_tomb_pages],
          garbage: PtmallocDump.load(path).ruby.summary[:garbage_objects] }
      end
      puts JSON.generate(out)
    RUBY
    hide = "rb_objspace_garbage_object_p,rb_objspace_markable_object_p"
    out, err, status = run_ruby(code, env: { "PTMALLOC_DUMP_HIDE_RUBY_FUNCTIONS" => hide })
    expect(status).to be_success, err
    settled, lazy = JSON.parse(out, symbolize_names: true)
    # no sweep pending: the pages are found by their structure all the same
    expect(settled).to include(sweeping: false, from_gc: false, garbage: 0)
    expect(settled[:objects]).to eq(settled[:live])
    # a sweep pending and no way to ask which objects are garbage: each_objects ends the sweep first
    expect(lazy).to include(sweeping: true, from_gc: true, garbage: 0)
    expect(lazy[:objects]).to eq(lazy[:live])
    expect(lazy[:pages]).to eq(lazy[:allocated])
  end

  it "can leave Ruby out" do
    dump = dump_and_load(ruby: false)
    expect(dump.ruby).to be_nil
    expect(dump.summary).not_to have_key(:ruby)
  end
end
