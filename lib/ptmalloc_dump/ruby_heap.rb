# frozen_string_literal: true

module PtmallocDump
  # The Ruby side of a dump ({Dump#ruby}): ObjectSpace's pages and live objects as they were at the
  # dump, and which malloc chunks each object owns. Matching happens here, at load time: a slot word
  # equal to an in-use chunk's user address ties the chunk to the object (the first owner wins), and
  # with `references: true` a chunk reachable from an owned chunk belongs to the same owner.
  class RubyHeap
    # One ObjectSpace page.
    RubyPage = Struct.new(:start, :end, :stride, :total_slots, :live_slots, :free_slots) do
      def size
        self.end - start
      end
    end

    # A Ruby object in a slot at the dump. `address` is the same number as ObjectSpace.dump's
    # "address"; `old` is its GC age (promoted: it survived enough marks), ObjectSpace.dump's "old";
    # `garbage` says the latest GC found it dead and the lazy sweep that frees it had not reached its
    # page yet (its memory is still allocated, and goes at the next step of that sweep).
    RubyObject = Struct.new(:index, :address, :type, :class_name, :data_type, :imemo_type, :old, :garbage) do
      def inspect
        format("#<PtmallocDump::RubyObject 0x%x %s %s%s%s%s>", address, type, class_name,
               data_type ? " (#{data_type})" : "", old ? " old" : "", garbage ? " garbage" : "")
      end

      # @return [Boolean] alive and made since it was last promoted: possibly garbage awaiting the
      #   next GC
      def young?
        !old && !garbage
      end

      # @return [Boolean] dead, awaiting the pending lazy sweep
      def garbage?
        garbage
      end
      alias_method :to_s, :inspect
    end

    # How many modules and methods {#summary} lists (all of them are in {#code_owners}).
    TOP_MODULES = 100
    TOP_METHODS = 50

    def initialize(dump)
      @dump = dump
    end

    # Code memory by the class or module that defines it: the chunks owned (directly or, with
    # references, through the pointer graph) by method entries, by method iseqs and the iseqs of
    # their blocks, all charged to the module whose method table holds the method, and the chunks of
    # each class's, module's and include class's own tables (method, constant and ivar tables, the
    # class extension and its caches), charged to it (an include class to the module it includes).
    #
    # @return [Hash, nil] nil when the dump has no code records (see {#code_owners_reason});
    #   else :by_module (`{ "Name" => { bytes:, chunks: } }`, largest first), :methods (`[{ module:,
    #   method:, path:, line:, bytes: }]`, largest first: a method's entries and iseqs together),
    #   :bytes and :chunks (all that is charged to a module); and the VM's own tables, part of
    #   `RubyVM` in {#summary}'s :by_class, by name: :vm_tables (`{ "frozen string table" => { bytes:,
    #   chunks: } }`: each table and what it alone reaches), :vm_table_bytes, :vm_table_chunks
    def code_owners
      return @code_owners if defined?(@code_owners)

      @code_owners = _code_summary&.then do |by_module, records, bytes, chunks, tables, vm_bytes, vm_chunks|
        { by_module: largest_first(by_module), methods: methods_of(records), bytes: bytes, chunks: chunks,
          vm_tables: largest_first(tables), vm_table_bytes: vm_bytes, vm_table_chunks: vm_chunks }.freeze
      end
    end

    # @return [String, nil] why the dump has no code records (the Ruby version's structures are not
    #   known to the gem that wrote it), nil when it has them
    # The code memory of this gem's own modules (PtmallocDump and what it defines), which the tables a
    # user reads leave out: the process's own code, not the tool's.
    OWN_MODULE = /\A(?:#<Class:)?PtmallocDump(?:::|>|\z)/.freeze

    # @param name [String] a module's name as a dump records it (its bytes may be in any encoding)
    # @return [Boolean] whether it is this gem's own module
    def self.own_module?(name)
      OWN_MODULE.match?(name.to_s.b)
    end

    def code_owners_reason
      return nil if code_owners

      @dump.header[:strings]["ruby_code_reason"].to_s.then { |r| r.empty? ? "the dump predates code owners" : r }
    end

    # What a code object (a method entry, an iseq, a class or module) is, by its address.
    #
    # @param object [RubyObject, Integer] an object or its address
    # @return [Hash, nil] :kind (:method_entry, :iseq, :module), :module, :method, :path, :line
    def code_of(object)
      kind, mod, meth, path, line = _code_at(object.is_a?(Integer) ? object : object.address)
      return nil unless kind

      @code_names ||= _code_names
      { kind: kind, module: mod && @code_names[mod], method: meth && @code_names[meth], path: path && @code_names[path],
        line: line.zero? ? nil : line }
    end

    # The code a chunk is charged to in {#code_owners}: the method entry, iseq or class whose object owns
    # it, or the VM table that reaches it.
    #
    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [Hash, nil] as {#code_of} (:kind is :vm_table, :module the table's name, for a VM
    #   table's chunk); nil for a chunk charged to no code, or a dump without code records
    def code_charge_of(chunk)
      @code_charges = _code_charges unless defined?(@code_charges)
      return nil unless @code_charges

      address = _code_charge(@code_charges, chunk.is_a?(Integer) ? chunk : chunk.address)
      address && code_of(address)
    end

    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [String, nil] the class or module a chunk's code memory is charged to (its
    #   {#code_owners} :by_module key); nil for a VM table's chunk or one charged to no code
    def module_of(chunk)
      code = code_charge_of(chunk)
      code && code[:kind] != :vm_table ? code[:module] : nil
    end

    # @return [Hash] GC.stat figures taken with the pass, and the pass's counts and timings
    def meta
      @meta ||= _meta.freeze
    end

    # @return [Array<RubyPage>]
    def pages
      @pages ||= _pages.map { |a| RubyPage.new(*a) }.freeze
    end

    # @return [Enumerator<RubyObject>] every live object, in address order
    def objects
      return enum_for(:objects) { meta[:object_count] } unless block_given?

      index = 0
      _each_object do |tuple|
        yield build(index, tuple)
        index += 1
      end
    end

    # @param address [Integer] an object's address (its VALUE)
    # @return [RubyObject, nil]
    def object_at(address)
      i = _object_index(address)
      i && object(i)
    end

    # @param index [Integer]
    # @return [RubyObject, nil]
    def object(index)
      tuple = _object(index)
      tuple && build(index, tuple)
    end

    # @param object [RubyObject]
    # @return [Array<Integer>] the words of its slot that were recorded as possible malloc pointers
    def words_of(object)
      _object_words(object.index)
    end

    # The Ruby object that owns a chunk.
    #
    # @param chunk [Chunk, Integer] a chunk or a chunk address
    # @return [RubyObject, nil] nil for native memory, free chunks and Ruby's own object pages
    def owner_of(chunk)
      index, = _owner(chunk.is_a?(Integer) ? chunk : chunk.address)
      index && object(index)
    end

    # @param chunk [Chunk, Integer]
    # @return [Symbol] :string, :array, :hash, :object, :data, :imemo, :other_ruby, :ruby_page,
    #   :native (in use, owned by no Ruby object) or :none (not in use)
    def category_of(chunk)
      _owner(chunk.is_a?(Integer) ? chunk : chunk.address)&.at(1) || :none
    end

    # Malloc bytes owned by Ruby objects: by builtin type, class (top 50; each entry's :garbage_bytes
    # are those of its objects marked garbage) and typed-data name, Ruby's page bytes, and in-use
    # bytes no object owns (native). Entries of one class name add up (every
    # class object's class is a metaclass whose name is "Class"); an anonymous class is named as
    # Ruby inspects it, "#<Class:0x...>". :old_bytes, :young_bytes and :garbage_bytes split the owned
    # bytes by the owner's GC age (:old_objects, :young_objects, :garbage_objects count the objects):
    # young objects made since the latest GC may be garbage awaiting collection, unless the dump ran
    # one (+gc: true+); garbage objects are known dead, their memory freed when the pending lazy sweep
    # reaches their page. Code memory
    # by defining module (:by_module, top 100), its largest methods (:methods, top 50) and the VM's
    # tables (:vm_tables) come from {#code_owners}, without this gem's own modules (their bytes are
    # :own_code_bytes), empty with :code_owners_reason saying why when the
    # dump has none.
    #
    # @return [Hash{Symbol=>Object}]
    def summary
      @summary ||= begin
        s = _summary
        top = lambda do |h, n|
          largest = h.sort_by { |_, (bytes, _)| -bytes }.first(n)
          largest.to_h { |k, (bytes, chunks)| [k, { bytes: bytes, chunks: chunks }] }
        end
        {
          by_type: top.call(s[:by_type], 64),
          by_class: top.call(s[:by_class], 50).to_h { |k, e| [k, e.merge(garbage_bytes: s[:by_class][k][2])] },
          by_data_type: top.call(s[:by_data_type], 50),
          by_module: code_owners ? users_modules.first(TOP_MODULES).to_h : {},
          own_code_bytes: code_owners ? own_modules.sum { |_, e| e[:bytes] } : 0,
          methods: code_owners ? code_owners[:methods].reject { |m| own?(m[:module]) }.first(TOP_METHODS) : [],
          vm_tables: code_owners ? code_owners[:vm_tables] : {},
          code_owners_reason: code_owners_reason,
          by_category: s[:by_category].to_h { |k, (bytes, chunks)| [k, { bytes: bytes, chunks: chunks }] },
          owned_bytes: s[:owned_bytes],
          unattributed_bytes: s[:unattributed_bytes],
          ruby_page_bytes: s[:ruby_page_bytes],
          ruby_pages_in_malloc_bytes: s[:ruby_pages_in_malloc_bytes],
          ambiguous_chunks: s[:ambiguous_chunks],
          direct_chunks: s[:direct_chunks],
          chunks_via_references: s[:chunks_via_references],
          old_bytes: s[:old_bytes],
          young_bytes: s[:young_bytes],
          old_objects: s[:old_objects],
          young_objects: s[:young_objects],
          garbage_bytes: s[:garbage_bytes],
          garbage_objects: s[:garbage_objects],
          references: meta[:references],
          pages: meta[:page_count],
          objects: meta[:object_count]
        }.freeze
      end
    end

    # An entry of the dump's Ruby names (class, typed-data type, and for the object graph symbol, root
    # category, module and Hash key names), by its index in the file.
    #
    # @param index [Integer]
    # @return [String, nil]
    def name(index)
      names[index]
    end

    private

    def own?(name)
      RubyHeap.own_module?(name)
    end

    def users_modules
      code_owners[:by_module].reject { |name, _| own?(name) }
    end

    def own_modules
      code_owners[:by_module].select { |name, _| own?(name) }
    end

    def names
      @names ||= _names
    end

    def largest_first(pairs)
      pairs.sort_by { |_, (b, _)| -b }.to_h { |k, (b, c)| [k, { bytes: b, chunks: c }] }
    end

    # One entry per method (module, name, path, line): its entries' and iseqs' bytes added up.
    def methods_of(records)
      sums = Hash.new(0)
      records.each do |_kind, mod, meth, path, line, bytes|
        sums[[mod, meth, path, line.zero? ? nil : line]] += bytes
      end
      sums.map { |(mod, meth, path, line), bytes| { module: mod, method: meth, path: path, line: line, bytes: bytes } }
          .sort_by { |m| -m[:bytes] }
    end

    def build(index, tuple)
      address, type, klass, dtype, imemo, old, garbage = tuple
      class_name = klass ? names[klass] : "(hidden)"
      RubyObject.new(index, address, type, class_name, dtype && names[dtype], imemo, old, garbage)
    end
  end
end
