# frozen_string_literal: true

module PtmallocDump
  # What changed between two dumps of one process ({PtmallocDump.diff}).
  class Diff
    FIGURES = %i[arena in_use_bytes in_use_count free_resident_bytes free_released_bytes hblkhd hblks
                 tcache_bytes fastbin_bytes resident_bytes chunk_count].freeze

    # @return [Dump]
    attr_reader :old, :new

    # @param old [Dump, String] the earlier dump (or its path)
    # @param new [Dump, String] the later dump (or its path)
    # @param force [Boolean] compare dumps of different processes anyway
    # @raise [Error] when the dumps are of different processes and force is false
    def initialize(old, new, force: false)
      @old = old.is_a?(Dump) ? old : PtmallocDump.load(old)
      @new = new.is_a?(Dump) ? new : PtmallocDump.load(new)
      return if force || same_process?

      raise Error, "#{@old.path} is of pid #{@old.header[:pid]}, #{@new.path} of pid #{@new.header[:pid]}: " \
                   "addresses of different processes cannot be compared (pass force: true, or --force, to do it anyway)"
    end

    # @return [Boolean] whether both dumps are of the same process
    def same_process?
      @old.header[:pid] == @new.header[:pid] && @old.header[:main_arena] == @new.header[:main_arena] &&
        @old.header[:hostname] == @new.header[:hostname]
    end

    # @return [Hash{Symbol=>Integer}] growth (new - old) of the totals
    def growth
      @growth ||= FIGURES.to_h { |f| [f, @new.summary[f] - @old.summary[f]] }
    end

    # @return [Array<Hash>] growth per arena, matched by address (arenas of only one dump count from 0)
    def arenas
      old = @old.summary[:arenas].to_h { |a| [a[:address], a] }
      @new.summary[:arenas].map do |a|
        before = old[a[:address]] || {}
        { address: a[:address], main: a[:main], new: !old.key?(a[:address]),
          **%i[arena in_use_bytes free_resident_bytes free_released_bytes].to_h { |f| [f, a[f] - before.fetch(f, 0)] } }
      end
    end

    # In-use chunks by size class (exact chunk size up to 1040 bytes, then powers of two).
    # @return [Array<Hash>] :size_class, :old_count, :new_count, :count_growth, :bytes_growth, largest change first
    def size_classes
      @size_classes ||= begin
        a = @old.size_classes
        b = @new.size_classes
        (a.keys | b.keys).map do |k|
          oc, ob = a.fetch(k, [0, 0])
          nc, nb = b.fetch(k, [0, 0])
          { size_class: k, old_count: oc, new_count: nc, count_growth: nc - oc, bytes_growth: nb - ob }
        end.sort_by { |e| -e[:bytes_growth].abs }
      end
    end

    # Chunks in both (same address, size and state), new and gone; pages by what changed on them.
    # @return [Hash]
    def chunks
      compute_pages unless @chunks
      @chunks
    end

    # @return [String] one byte per page of the newer dump, an index into {DIFF_PAGE_STATES}
    def page_changes
      compute_pages unless @page_changes
      @page_changes
    end

    DIFF_PAGE_STATES = Format::PAGE_CHANGES

    # Growth by owner (with Ruby data in both dumps): :by_type, :by_class, :by_data_type, :by_module
    # (code memory by defining module, see {RubyHeap#code_owners}; largest growth first) and :native;
    # :old, :young and :garbage split the Ruby-owned growth by the owners' GC age (growth of old objects
    # is what a leak looks like; young ones may be garbage not yet collected; garbage is dead objects a
    # pending lazy sweep had not freed, see {RubyHeap::RubyObject#garbage?}). When both dumps have roots
    # ({Dump#owners}), also :ruby, :anchored, :interior, :leaked and :unknown ({ bytes:, count: } growth
    # each), :anchored_by (bytes per root name, largest growth first) and :leaked_by_size ({ size:,
    # count:, bytes: } growth per chunk size, largest first).
    # @return [Hash, nil]
    def owners
      return nil unless @old.ruby && @new.ruby

      a = @old.ruby.summary
      b = @new.ruby.summary
      grow = lambda do |key|
        (a[key].keys | b[key].keys).to_h { |k| [k, b[key].dig(k, :bytes).to_i - a[key].dig(k, :bytes).to_i] }
                                   .sort_by { |_, v| -v }.to_h
      end
      { by_type: grow.call(:by_type), by_class: grow.call(:by_class), by_data_type: grow.call(:by_data_type),
        by_module: module_growth, native: b[:unattributed_bytes] - a[:unattributed_bytes],
        old: b[:old_bytes] - a[:old_bytes], young: b[:young_bytes] - a[:young_bytes],
        garbage: b[:garbage_bytes].to_i - a[:garbage_bytes].to_i, **owner_kind_growth }
    end

    # Which holders of Ruby memory grew: the later dump's holders ({Dump#retainers}) joined to the
    # earlier dump's by their root and path (addresses are reused across GCs: an object at the same
    # address counts as the same holder only where its path is the same too).
    #
    # @param limit [Integer] at most this many
    # @return [Array<Hash>] largest growth first: :root, :path, :class_name, :growth_bytes,
    #   :growth_objects, :retained_bytes (in the later dump)
    # @raise [NoGraphError] when either dump has no object graph
    def retainers(limit: 20)
      before = @old.retainers(limit: 500).to_h { |r| [[r[:root], r[:path]], r] }
      @new.retainers(limit: [limit * 5, 100].max).map do |r|
        was = before[[r[:root], r[:path]]] || same_holder(r)
        { root: r[:root], path: r[:path], class_name: r[:class_name],
          growth_bytes: r[:retained_bytes] - (was ? was[:retained_bytes] : 0),
          growth_objects: r[:retained_objects] - (was ? was[:retained_objects] : 0),
          retained_bytes: r[:retained_bytes] }
      end.sort_by { |g| -g[:growth_bytes] }.first(limit)
    end

    # Which allocation sites grew: each site's live bytes and objects (or blocks) in the later dump
    # against the earlier's (sites are joined by their +"path:LINE"+ and method). Both dumps need
    # allocation sites of one source: the tracker's malloc blocks where both have them, else the traced
    # objects ({PtmallocDump.trace_allocations} on across both).
    #
    # @param limit [Integer] at most this many
    # @return [Array<Hash>] largest growth first: :site, :method, :growth_bytes, :growth_count, :bytes
    #   and :count (in the later dump), :estimated, :source
    # @raise [NoSitesError] when the dumps have no allocation sites of one source
    def allocation_sites(limit: 20)
      source = site_source
      unless source
        have = [@old, @new].map { |d| site_sources(d).empty? ? "none" : site_sources(d).join(" and ") }
        raise NoSitesError, "the two dumps have no allocation sites of one source: #{have.join(' against ')}"
      end
      before = @old.allocation_sites(limit: 100_000, source: source).to_h { |s| [[s[:site], s[:method]], s] }
      @new.allocation_sites(limit: 100_000, source: source).map do |s|
        was = before.delete([s[:site], s[:method]])
        { site: s[:site], method: s[:method], growth_bytes: s[:bytes] - (was ? was[:bytes] : 0),
          growth_count: s[:count] - (was ? was[:count] : 0), bytes: s[:bytes], count: s[:count],
          estimated: s[:estimated] || (was && was[:estimated]) || false, source: source }
      end.concat(before.values.map { |s| gone_site(s).merge(source: source) })
          .sort_by { |g| [-g[:growth_bytes], g[:site]] }.first(limit)
    end

    # @return [Symbol, nil] the allocation sites' source both dumps have (:malloc first), nil for none
    def site_source
      (site_sources(@old) & site_sources(@new)).first
    end

    # Where new memory hangs from the old, as memdump's interface draws it: the objects both dumps
    # hold (the same address, type and class, live in the earlier) that reference objects only the
    # later dump holds. A slot a GC freed between the dumps and an object of the same type and class
    # took again looks old: the figures are a floor, exact when no GC ran in between.
    #
    # @param limit [Integer] at most this many
    # @return [Array<Hash>] most new bytes first: :root (the old object's name as {Dump#retainers}
    #   gives it), :class_name, :address, :new_objects (the new objects it references), :new_bytes
    #   (what those retain in the later dump)
    # @raise [NoGraphError] when either dump has no object graph
    def interface(limit: 20)
      [@old, @new].each { |d| d.retainers(limit: 0) }
      _interface(@old, @new, limit).map do |i, objects, bytes|
        o = @new.ruby.object(i)
        { root: @new.retainer_name(o.address), class_name: o.class_name, address: o.address, new_objects: objects,
          new_bytes: bytes }
      end
    end

    # a site of the earlier dump whose objects are all gone from the later one
    def gone_site(s)
      { site: s[:site], method: s[:method], growth_bytes: -s[:bytes], growth_count: -s[:count], bytes: 0, count: 0,
        estimated: s[:estimated] }
    end

    # @return [Array(Symbol, String, Integer), nil] the owner that grew most: [:type or :class or
    #   :native, name, bytes]
    def top_growth_owner
      o = owners
      return nil unless o

      candidates = [[:type, *o[:by_type].first], [:class, *o[:by_class].first], [:native, "native", o[:native]]]
      candidates.reject { |c| c[1].nil? }.max_by { |c| c[2] }
    end

    private

    def site_sources(dump)
      [(:malloc if dump.malloc_sites?), (:objects if dump.object_sites?)].compact
    end

    def owner_kind_growth
      a = @old.owners
      b = @new.owners
      return {} unless a && b

      kinds = %i[ruby anchored interior leaked unknown].to_h do |k|
        before = a.fetch(k, { bytes: 0, count: 0 })
        [k, { bytes: b.dig(k, :bytes).to_i - before[:bytes], count: b.dig(k, :count).to_i - before[:count] }]
      end
      anchors = (a[:anchored_by].keys | b[:anchored_by].keys)
                .to_h { |n| [n, b[:anchored_by].fetch(n, 0) - a[:anchored_by].fetch(n, 0)] }.sort_by { |_, v| -v }.to_h
      kinds.merge(anchored_by: anchors, leaked_by_size: leaked_size_growth(a[:leaked_by_size], b[:leaked_by_size]))
    end

    # from the sizes each dump lists (its 20 with the most leaked bytes)
    def leaked_size_growth(before, after)
      old = before.to_h { |e| [e[:size], e] }
      new = after.to_h { |e| [e[:size], e] }
      (old.keys | new.keys).map do |size|
        o = old.fetch(size, { count: 0, bytes: 0 })
        n = new.fetch(size, { count: 0, bytes: 0 })
        { size: size, count: n[:count] - o[:count], bytes: n[:bytes] - o[:bytes] }
      end.sort_by { |e| -e[:bytes] }
    end

    # Over every module of both dumps (the summaries list only the largest), but this gem's own.
    def module_growth
      a = @old.ruby.code_owners&.fetch(:by_module) || {}
      b = @new.ruby.code_owners&.fetch(:by_module) || {}
      (a.keys | b.keys).reject { |k| RubyHeap.own_module?(k) }.to_h do |k|
        [k, b.dig(k, :bytes).to_i - a.dig(k, :bytes).to_i]
      end.sort_by { |_, v| -v }.to_h
    end

    # The earlier dump's figures for the object at a later holder's address, if it is the same holder:
    # the same class on the same path from its root.
    def same_holder(r)
      object = @old.ruby.object_at(r[:address])
      return nil unless object && object.class_name == r[:class_name]

      path = @old.path_to_root(r[:address])
      return nil unless path && path.map { |s| s[:edge] } == @new.path_to_root(r[:address]).map { |s| s[:edge] }

      @old.retained_by(r[:address])
    end

    def compute_pages
      @chunks, @page_changes = _compare(@old, @new)
    end
  end
end
