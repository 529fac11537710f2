# frozen_string_literal: true

module PtmallocDump
  # The tracked malloc blocks of a dump by site (Dump#allocation_sites with +source: :malloc+): each
  # stack's estimated live blocks, named by its innermost application Ruby frame, else by its innermost
  # native function that is not the allocator's own. Its native site is the innermost function outside
  # the allocator and libc, and outside Ruby's own library when anything else is on the stack (a C
  # extension's function).
  class MallocSites
    # Native functions that only pass an allocation on: the allocator, libc's wrappers, the tracker,
    # C++'s operator new and Ruby's xmalloc family.
    # (libc.so.6 and ld-linux-x86-64.so.2 or ld-linux-aarch64.so.1; libc-2.31.so and ld-2.31.so
    # before glibc 2.34)
    PLUMBING_LIBRARIES = /\A(?:libc[.-]|ld-linux|ld-2\.|libstdc\+\+\.so|ptmalloc_dump_track\.so|ruby[\d.]*\z)/.freeze
    PLUMBING_FUNCTIONS = /\A(?:ruby_x(?:m|c|re)alloc|rb_x(?:m|c|re)alloc|objspace_x|rb_aligned_malloc|
                            ruby_mimmalloc|rb_alloc_tmp_buffer|ruby_xmalloc2|ruby_xrealloc2|_start\z|main\z)/x.freeze
    private_constant :PLUMBING_LIBRARIES, :PLUMBING_FUNCTIONS

    # @param tracking [Hash] Dump#allocation_tracking
    # @param names [Array<String>] the Ruby frames' names, by index
    # @param symbols [NativeSymbols] for the native frames
    # @yieldparam stack [Integer] a stack's index
    # @yieldreturn [Array(Array<Integer>, Array<Array>)] its program counters and Ruby frames
    def initialize(tracking, names, symbols, &stack_of)
      @tracking = tracking
      @names = names
      @symbols = symbols
      @stack_of = stack_of
      @stacks = {}
    end

    # @param rows [Array<Array>] per stack: index, samples, count, bytes, ruby, anchored and leaked bytes
    # @return [Array<Hash>] the sites, largest first (Dump#allocation_sites); a site's frames and
    #   native site are its largest stack's
    def sites(rows)
      by_site = {}
      rows.each do |stack, samples, count, bytes, ruby, anchored, leaked|
        named = stack_named(stack)
        e = by_site[named.values_at(:site, :method)] ||= { samples: 0, count: 0.0, bytes: 0.0, ruby: 0.0, anchored: 0.0,
                                                           leaked: 0.0, largest: -1.0 }
        e.merge!(named, largest: bytes) if bytes > e[:largest]
        e[:samples] += samples
        e[:count] += count
        e[:bytes] += bytes
        e[:ruby] += ruby
        e[:anchored] += anchored
        e[:leaked] += leaked
      end
      by_site.values.map { |e| entry(e) }.sort_by { |s| [-s[:bytes], -s[:count], s[:site]] }
    end

    # @param rows [Array<Array>] as for #sites
    # @return [Array<Hash>] :frames, :bytes and :count of each stack (Dump#allocation_stacks)
    def stacks(rows)
      rows.map do |stack, _, count, bytes|
        named = stack_named(stack)
        frames = named[:frames].empty? ? named[:native_frames] : named[:frames]
        { frames: frames, bytes: bytes.round, count: count.round }
      end
    end

    # @param stack [Integer]
    # @return [Hash] :site, :method, :frames, :native_frames and :native_site of a stack
    def site_of_stack(stack)
      stack_named(stack).slice(:site, :method, :frames, :native_frames, :native_site)
    end

    private

    def stack_named(stack)
      @stacks[stack] ||= begin
        pcs, raw = @stack_of.call(stack)
        frames = raw.filter_map do |path, line, label, owner|
          SiteFrame.new(@names, path, line, label, owner) unless path && line.zero?
        end
        native = pcs.each_with_index.map { |pc, i| @symbols.name(pc, innermost: i.zero?) }
        native_site = native_site_of(native)
        site, method, kind = site_and_method(frames, native_site)
        { site: site, method: method, kind: kind, frames: frames.map(&:to_s), native_frames: native,
          native_site: native_site }
      end
    end

    # the innermost application frame (or any with a path), with the C method it called there, if any;
    # else the native site
    def site_and_method(frames, native_site)
      at = frames.index(&:application?) || frames.index(&:path)
      return [native_site || "(no symbol)", "", :native] unless at

      frame = frames[at]
      callee = at.positive? && frames[at - 1].path.nil? ? frames[at - 1] : frame
      ["#{frame.path}:#{frame.line}", callee.method_name, :ruby]
    end

    def plumbing?(name)
      library, function = name.split(/[!+]/, 2)
      library.match?(PLUMBING_LIBRARIES) || (name.include?("!") && function.match?(PLUMBING_FUNCTIONS))
    end

    # the innermost function that is not plumbing: a named one outside Ruby's library first (a C
    # extension's), then an unnamed one there (a library without symbols), then Ruby's own
    def native_site_of(native)
      candidates = native.reject { |n| plumbing?(n) }
      named, unnamed = candidates.partition { |n| n.include?("!") }
      outside_ruby = ->(n) { !n.start_with?("libruby") }
      named.find(&outside_ruby) || unnamed.find(&outside_ruby) || named.first || candidates.first
    end

    def entry(e)
      { site: e[:site], method: e[:method], frames: e[:frames], native_frames: e[:native_frames],
        native_site: e[:native_site], kind: e[:kind], source: :malloc, bytes: e[:bytes].round,
        count: e[:count].round, samples: e[:samples], ruby_owned_bytes: e[:ruby].round,
        anchored_bytes: e[:anchored].round, leaked_bytes: e[:leaked].round, estimated: @tracking[:mean_bytes] > 1 }
    end
  end
end
