# frozen_string_literal: true

require "rbconfig"

module PtmallocDump
  # One line per allocation site, as the text summary and `--sites` print them.
  module SiteLines
    # @param dump [Dump] a dump with allocation sites
    # @return [String] what the figures are
    def self.heading(dump)
      if dump.malloc_sites?
        mean = FormatHelpers.human_bytes(dump.allocation_tracking[:mean_bytes])
        return "where the malloc memory still allocated was allocated (the tracker sampled one block in about " \
               "#{mean} allocated, figures scaled):"
      end
      every = dump.allocation_trace[:every]
      sampled = every == 1 ? "every new object traced" : "one new object in #{every} traced, figures scaled"
      "where the traced Ruby objects still alive were allocated (the malloc memory they own; #{sampled}):"
    end

    # @param s [Hash] an entry of {Dump#allocation_sites}
    # @return [String] "app/models/user.rb:12 in User#load"
    def self.where(s)
      "#{s[:site]}#{s[:method].empty? ? '' : " in #{s[:method]}"}"
    end

    # @param s [Hash] an entry of {Dump#allocation_sites}
    # @return [String] "4.0 MiB in 3,001 objects at app/models/user.rb:12 in User#load", and for malloc
    #   blocks how much of it is leaked or anchored
    def self.line(s)
      about = s[:estimated] ? "about " : ""
      what = s[:source] == :malloc ? "block" : "object"
      kept = s[:source] == :malloc ? kept_by(s) : ""
      "#{about}#{FormatHelpers.human_bytes(s[:bytes])} in #{FormatHelpers.count(s[:count])} " \
        "#{what}#{s[:count] == 1 ? '' : 's'} at #{where(s)}#{kept}"
    end

    # " (3.0 MiB leaked, 1.0 MiB anchored)", or "" when Ruby objects keep it all
    def self.kept_by(s)
      parts = { leaked_bytes: "leaked", anchored_bytes: "held by native code" }.filter_map do |key, word|
        "#{FormatHelpers.human_bytes(s[key])} #{word}" if s[key].positive?
      end
      parts.empty? ? "" : " (#{parts.join(', ')})"
    end

    # @param s [Hash] an entry of {Dump#allocation_sites}
    # @param limit [Integer] how many
    # @return [Array<String>] the Ruby frames that called the site's frame (C methods and the site's own
    #   method around its block left out); for a native site, the native functions that called it
    def self.callers(s, limit: 3)
      at = s[:frames].index { |f| f.start_with?("#{s[:site]} in ") }
      unless at
        native = s[:native_frames] || []
        i = native.index(s[:site])
        return i ? native[(i + 1)..].first(limit) : []
      end

      s[:frames][(at + 1)..].reject { |f| f.start_with?("(C)", "#{s[:site]} in ") }.first(limit)
    end
  end

  # Where the memory of a dump was allocated: the traced objects' sites ({PtmallocDump.trace_allocations})
  # and the tracked malloc blocks' (a process ptmalloc-dump --track started).
  class Dump
    # The sources of allocation sites: +:objects+ (traced Ruby objects and the chunks they own) and
    # +:malloc+ (malloc's blocks sampled by bytes, with their native and Ruby stacks).
    SITE_SOURCES = %i[objects malloc].freeze

    # @return [Boolean] whether the dump holds allocation sites of either source
    def allocation_sites?
      object_sites? || malloc_sites?
    end

    # @return [Boolean] whether it was taken while {PtmallocDump.trace_allocations} was on
    def object_sites?
      !_alloc_trace.nil?
    end

    # @return [Boolean] whether it was taken in a process the allocation tracker ran in
    #   (+ptmalloc-dump --track+, or its library in +LD_PRELOAD+)
    def malloc_sites?
      !_native_track.nil?
    end

    # @return [Hash, nil] how the traced objects were sampled: +:every+, +:seen+, +:sampled+, +:dropped+,
    #   +:traced+ (traced objects not yet freed at the dump), +:stacks+, +:max_frames+, +:started_at+;
    #   nil without object sites
    def allocation_trace
      _alloc_trace
    end

    # @return [Hash, nil] the allocation tracker at the dump: +:mean_bytes+ (the byte sampler's mean: a
    #   block of n bytes was sampled with probability 1 - exp(-n / mean_bytes)), +:sampled+, +:freed+,
    #   +:dropped+ (samples its full tables could not keep), +:samples+ (sampled blocks not freed),
    #   +:stacks+, +:pid+ (the process that started tracking), +:started_at+, +:flags+ (of
    #   +Format::NATIVE_TRACK_FLAGS+: +:ruby+ when Ruby's frames were recorded, +:partial+ when a table
    #   could not be read whole, +:unlocked+ when it was read while its lock was held; and +:forked+ when
    #   the dumped process is a fork of the one that started tracking, a preforked worker),
    #   +:mapped_bytes+ and +:resident_bytes+ (its own tables); nil without malloc sites
    def allocation_tracking
      @allocation_tracking ||= _native_track&.then do |t|
        regions = t.delete(:regions)
        flags = Format::NATIVE_TRACK_FLAGS.select { |_, bit| t[:flags].anybits?(bit) }.keys
        flags << :forked if t[:pid] != header[:pid]
        t.merge(flags: flags, mapped_bytes: regions.sum { |r| r[1] }, resident_bytes: regions.sum { |r| r[2] },
                regions: regions.map { |start, length, resident| { start: start, length: length, resident: resident } })
      end
    end

    # @return [String, nil] why the dump has no allocation sites, nil when it has them
    def no_sites_reason
      return nil if allocation_sites?
      return "the dump has no Ruby heap data (#{no_ruby_reason}), and ptmalloc-dump --track did not run it" unless ruby

      "it was not taken while PtmallocDump.trace_allocations was on, nor in a process ptmalloc-dump --track started"
    end

    # The allocation sites of the memory alive at the dump, the largest first. A site is the innermost
    # frame of the application's own code (frames in gems, in Ruby's library and Ruby's internal files
    # are skipped, and kept in +:frames+); a malloc block allocated where no Ruby frame ran (a native
    # thread, the VM's start) has its innermost native function as its site.
    #
    # With +source: :objects+ the bytes are the malloc chunks the traced objects own (the dump's
    # attribution), times the sampling gap. With +source: :malloc+ they are the tracked blocks' chunks,
    # each sample weighted by the inverse of the chance the byte sampler took it, and split by who keeps
    # them: a Ruby object, a root outside malloc (anchored), or nothing (leaked).
    #
    # @param limit [Integer] the most sites returned
    # @param class_name [String, nil] only what objects of this class own (as {RubyHeap#summary}'s
    #   +:by_class+ names it), e.g. to say where a class's memory was allocated
    # @param source [Symbol, nil] +:objects+ or +:malloc+; nil: +:malloc+ when the dump has it, else
    #   +:objects+
    # @return [Array<Hash>] +:site+ (+"path:LINE"+, or +"libfoo.so!function"+), +:method+ (+"Owner#name"+,
    #   +"Owner.name"+ or the block's label; for malloc, the C method the site called when it called one),
    #   +:frames+ (the Ruby stack, innermost first, +"path:LINE in label"+), +:kind+ (+:ruby+ for a Ruby
    #   line, +:native+ for a function), +:source+, +:bytes+, +:count+ (objects or blocks),
    #   +:ruby_owned_bytes+, +:anchored_bytes+, +:leaked_bytes+, +:estimated+ (true when sampled). For
    #   objects also +:slot_bytes+, +:garbage_count+ and +:garbage_bytes+ (dead traced objects the lazy
    #   sweep has not freed yet, and the chunks they still hold: not in +:count+ and +:bytes+); for malloc
    #   also +:native_frames+ (innermost first, +"libfoo.so!function"+), +:native_site+ (the innermost
    #   function that is not the allocator's or libc's) and +:samples+
    # @raise [NoSitesError] when the dump has none of that source
    # @raise [ArgumentError] for an unknown source
    def allocation_sites(limit: 50, class_name: nil, source: nil)
      case site_source(source)
      when :objects then object_site_list(class_name).first(limit)
      else malloc_sites.sites(_native_stacks(class_name)).first(limit)
      end
    end

    # The stacks with live memory, for a flame graph of live bytes by stack.
    # @param source [Symbol, nil] as {#allocation_sites}
    # @return [Array<Hash>] +:frames+ (innermost first, as in {#allocation_sites}), +:bytes+, +:count+,
    #   scaled as there
    # @raise [NoSitesError] when the dump has no allocation sites of that source
    def allocation_stacks(source: nil)
      return malloc_sites.stacks(_native_stacks(nil)) if site_source(source) == :malloc

      every = allocation_trace[:every]
      _traced_stacks(nil).filter_map do |stack, count, bytes, *|
        { frames: stack_frames(stack).map(&:to_s), bytes: bytes * every, count: count * every } if count.positive?
      end
    end

    # Where the memory at +address+ was allocated: the traced object there, else the tracked block
    # malloc returned there.
    # @param address [Integer] a Ruby object's address (+ObjectSpace.dump+'s), or a pointer malloc returned
    # @return [Hash, nil] +:site+, +:method+, +:frames+ as {#allocation_sites} gives them (and
    #   +:native_frames+ for a block); nil when nothing traced or tracked is there (both sample)
    # @raise [NoSitesError] when the dump has no allocation sites
    def allocation_site_of(address)
      raise NoSitesError, "this dump has no allocation sites: #{no_sites_reason}" unless allocation_sites?

      address = Integer(address)
      if object_sites? && (stack = _traced_stack_of(address))
        frames = stack_frames(stack)
        site, method = SiteFrame.site_of(frames)
        return { site: site, method: method, frames: frames.map(&:to_s) }
      end
      hit = malloc_sites? && _native_sample_at(address)
      hit ? malloc_sites.site_of_stack(hit[0]) : nil
    end

    # Every traced object not freed at the dump.
    # @return [Array<Array(Integer, String)>] its address and its site (+"path:LINE"+), by address
    # @raise [NoSitesError] when the dump has no object sites
    def traced_objects
      site_source(:objects)
      sites = Hash.new { |h, stack| h[stack] = SiteFrame.site_of(stack_frames(stack)).first }
      _traced.map { |address, stack| [address, sites[stack]] }
    end

    private

    def site_source(source)
      source ||= malloc_sites? ? :malloc : :objects
      raise ArgumentError, "source: must be one of #{SITE_SOURCES.join(', ')}, not #{source.inspect}" unless
        SITE_SOURCES.include?(source)

      have = source == :objects ? object_sites? : malloc_sites?
      return source if have

      why = if allocation_sites?
              source == :objects ? "PtmallocDump.trace_allocations was not on" : "ptmalloc-dump --track did not run it"
            else
              no_sites_reason
            end
      raise NoSitesError, "this dump has no #{source} allocation sites: #{why}"
    end

    def malloc_sites
      @malloc_sites ||= MallocSites.new(allocation_tracking, _native_names, NativeSymbols.new(mappings)) do |stack|
        _native_stack(stack)
      end
    end

    def object_site_list(class_name)
      every = allocation_trace[:every]
      sites = Hash.new { |h, k| h[k] = Hash.new(0) }
      _traced_stacks(class_name).each do |stack, *figures|
        frames = stack_frames(stack)
        entry = sites[SiteFrame.site_of(frames)]
        SITE_FIGURES.zip(figures).each { |key, n| entry[key] += n }
        entry[:frames] = frames unless entry.key?(:frames)
      end
      sites.map { |(site, method), e| site_entry(site, method, e, every) }
           .sort_by { |s| [-s[:bytes], -s[:count], s[:site]] }
    end

    # a stack's frames, innermost first, without those that had not begun to run (a path, line 0: the
    # script's own top frame below its <main>)
    def stack_frames(stack)
      names = (@site_names ||= _site_names)
      _stack_frames(stack).filter_map do |path, line, label, owner|
        SiteFrame.new(names, path, line, label, owner) unless path && line.zero?
      end
    end

    # the figures of a traced stack, as _traced_stacks gives them after its index
    SITE_FIGURES = %i[count bytes chunks slot_bytes garbage_count garbage_bytes].freeze
    private_constant :SITE_FIGURES

    def site_entry(site, method, e, every)
      bytes = e[:bytes] * every
      { site: site, method: method, frames: e[:frames].map(&:to_s), kind: :ruby, source: :objects, bytes: bytes,
        count: e[:count] * every, slot_bytes: e[:slot_bytes] * every, ruby_owned_bytes: bytes,
        anchored_bytes: 0, leaked_bytes: 0, garbage_count: e[:garbage_count] * every,
        garbage_bytes: e[:garbage_bytes] * every, estimated: every > 1 }
    end
  end

  # A frame of a traced stack, with its names.
  class SiteFrame
    # Paths of code that is not the application's own: installed gems, Ruby's library, the VM's
    # internal files.
    LIBRARY_PATHS = [RbConfig::CONFIG["rubylibprefix"], RbConfig::CONFIG["vendordir"],
                     RbConfig::CONFIG["sitedir"]].compact.reject(&:empty?).freeze

    attr_reader :path, :line, :label, :owner

    def initialize(names, path, line, label, owner)
      @path = path && names[path]
      @line = line
      @label = label && names[label]
      @owner = owner && names[owner]
    end

    # @return [Array(String, String)] the site (+"path:LINE"+) and method of a stack: its innermost
    #   application frame, else its innermost frame with a path, else +"(no Ruby frame)"+
    def self.site_of(frames)
      frame = frames.find(&:application?) || frames.find(&:path)
      return ["(no Ruby frame)", ""] unless frame

      ["#{frame.path}:#{frame.line}", frame.method_name]
    end

    # @return [Boolean] whether the frame runs the application's own code
    def application?
      return false unless path
      return false if path.start_with?("<internal:") || path.include?("/gems/")

      LIBRARY_PATHS.none? { |dir| path.start_with?("#{dir}/") }
    end

    # @return [String] "Owner#label", "Owner.label" for a singleton's method, else the label
    def method_name
      return label.to_s unless owner && !owner.empty?

      if (of = owner[/\A#<Class:(.+)>\z/, 1]) && !of.start_with?("0x") then "#{of}.#{label}"
      else "#{owner}##{label}"
      end
    end

    # @return [String] "path:LINE in method" ("(C) in method" for a C method)
    def to_s
      "#{path ? "#{path}:#{line}" : '(C)'} in #{method_name}"
    end
  end
end
