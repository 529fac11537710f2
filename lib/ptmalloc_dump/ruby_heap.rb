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

    # A live Ruby object. `address` is the same number as ObjectSpace.dump's "address"; `old` is its GC
    # age (promoted: it survived enough marks), ObjectSpace.dump's "old".
    RubyObject = Struct.new(:index, :address, :type, :class_name, :data_type, :imemo_type, :old) do
      def inspect
        format("#<PtmallocDump::RubyObject 0x%x %s %s%s%s>", address, type, class_name,
               data_type ? " (#{data_type})" : "", old ? " old" : "")
      end

      # @return [Boolean] made since it was last promoted: possibly garbage awaiting the next GC
      def young?
        !old
      end
      alias_method :to_s, :inspect
    end

    def initialize(dump)
      @dump = dump
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

    # Malloc bytes owned by Ruby objects: by builtin type, class (top 50) and typed-data name, Ruby's
    # page bytes, and in-use bytes no object owns (native). Entries of one class name add up (every
    # class object's class is a metaclass whose name is "Class"); an anonymous class is named as
    # Ruby inspects it, "#<Class:0x...>". :old_bytes and :young_bytes split the owned bytes by the
    # owner's GC age (:old_objects, :young_objects count the objects): young objects made since the
    # latest GC may be garbage awaiting collection, unless the dump ran one (+gc: true+).
    #
    # @return [Hash{Symbol=>Object}]
    def summary
      @summary ||= begin
        s = _summary
        top = ->(h, n) { h.sort_by { |_, (bytes, _)| -bytes }.first(n).to_h { |k, (bytes, chunks)| [k, { bytes: bytes, chunks: chunks }] } }
        {
          by_type: top.call(s[:by_type], 64),
          by_class: top.call(s[:by_class], 50),
          by_data_type: top.call(s[:by_data_type], 50),
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
          references: meta[:references],
          pages: meta[:page_count],
          objects: meta[:object_count]
        }.freeze
      end
    end

    private

    def names
      @names ||= _names
    end

    def build(index, tuple)
      address, type, klass, dtype, imemo, old = tuple
      RubyObject.new(index, address, type, klass ? names[klass] : "(hidden)", dtype && names[dtype], imemo, old)
    end
  end
end
