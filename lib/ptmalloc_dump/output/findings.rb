# frozen_string_literal: true

require_relative "../format_helpers"

module PtmallocDump
  # The largest things a dump says about where memory goes, each as a sentence with its figure and the
  # report section that holds the evidence: what the report's first screen and `--summary` lead with.
  # Figures other parts of the gem add later (the RSS accounting, anchored and leaked memory, owners
  # by module) are used when the dump's summary has them.
  class Findings
    include FormatHelpers

    # `bytes` ranks it, `text` says it, `anchor` is the id of the report section with the evidence.
    Finding = Struct.new(:topic, :bytes, :text, :anchor)

    # @param dump [Dump]
    def initialize(dump)
      @dump = dump
      @s = dump.summary
    end

    # @param n [Integer]
    # @return [Array<Finding>] the n largest, largest first
    def top(n = 3)
      all.sort_by { |f| -f.bytes }.first(n)
    end

    # @return [Array<Finding>] every finding that applies, in no particular order
    def all
      all = [free_resident, leaked, unknown_owners, by_module, native, top_class, holder, garbage, mmapped,
             ruby_pages]
      all.compact.reject { |f| f.bytes.zero? }
    end

    private

    def free_resident
      arenas = @s[:arenas].count { |a| a[:free_resident_bytes].positive? }
      trim = @dump.analysis[:trim_estimate].sum
      extra = if @s[:arenas].size > 2 then "; MALLOC_ARENA_MAX=2 would let threads reuse it"
              elsif trim.positive? then "; malloc_trim(0) would give back #{human_bytes(trim)} now"
              else ""
              end
      bytes = @dump.figures[:free_resident]
      text = "#{human_bytes(bytes)} of malloc memory is free but resident in #{arenas} arena(s) " \
             "(#{percent(bytes, @s[:resident_bytes])} of resident malloc memory)#{extra}."
      Finding.new(:free_resident, bytes, text, "reclaimable")
    end

    def leaked
      o = @s[:owners]
      return nil unless o && o[:leaked] && o[:leaked][:bytes].positive?

      big = Array(o[:leaked_by_size]).max_by { |e| e[:bytes] }
      how = big ? ", most in #{big[:count]} block(s) of #{human_bytes(big[:size])}" : ""
      text = "#{human_bytes(o[:leaked][:bytes])} in #{o[:leaked][:count]} block(s) is leaked: " \
             "nothing points at it#{how}.#{site_of_owned(:leaked_bytes)}"
      Finding.new(:leaked, o[:leaked][:bytes], text, "owners")
    end

    # In-use memory whose holder this dump cannot tell (no Ruby objects: ruby: false, a skipped Ruby pass,
    # a dump from outside): what an in-process dump with the Ruby pass would add, not a leak.
    def unknown_owners
      return nil if @dump.ruby

      o = @s[:owners]
      bytes, what = if o && o[:unknown]
                      [o[:unknown][:bytes], " in #{o[:unknown][:count]} block(s) that no root reaches"]
                    else
                      [@dump.figures[:in_use], " in use"]
                    end
      text = "#{human_bytes(bytes)}#{what} has no known owner: #{@dump.no_ruby_reason}, so it is not known " \
             "which of it Ruby objects own. An in-process dump (PtmallocDump.dump with ruby: true) tells Ruby " \
             "owners and their holders from leaked memory."
      Finding.new(:unknown_owners, bytes, text, "owners")
    end

    def by_module
      name, e = @s.dig(:ruby, :by_module)&.max_by { |_, v| v[:bytes] }
      return nil unless name

      text = "#{human_bytes(e[:bytes])} in #{e[:chunks]} chunk(s) is held by #{name} " \
             "(its code and the objects it owns)."
      Finding.new(:module, e[:bytes], text, "owners")
    end

    def native
      r = @s[:ruby]
      return nil unless r

      o = @s[:owners]
      if o && o[:anchored]
        name, bytes = Array(o[:anchored_by]).max_by { |_, b| b }
        by = name ? ", most by #{name} (#{human_bytes(bytes)})" : ""
        text = "#{human_bytes(o[:anchored][:bytes])} in #{o[:anchored][:count]} block(s) is held by native " \
               "code#{by}.#{site_of_owned(:anchored_bytes)}"
        return Finding.new(:anchored, o[:anchored][:bytes], text, "owners")
      end
      share = percent(r[:unattributed_bytes], @dump.figures[:in_use])
      text = "#{human_bytes(r[:unattributed_bytes])} in use is native: no Ruby object points at it " \
             "(#{share} of the memory in use)."
      Finding.new(:native, r[:unattributed_bytes], text, "owners")
    end

    # Where most of the leaked (or anchored) memory was allocated, when the tracker ran in the process.
    def site_of_owned(key)
      site = @dump.malloc_sites? && @dump.allocation_sites(limit: 10_000).max_by { |e| e[key] }
      return "" unless site && site[key].positive?

      " Most was allocated at #{SiteLines.where(site)} (about #{human_bytes(site[key])})."
    end

    # Where most of a class's traced memory was allocated, when the dump has allocation sites.
    def site_of_class(name)
      return "" unless @dump.allocation_sites?

      site = @dump.allocation_sites(limit: 1, class_name: name).first
      return "" unless site && site[:bytes].positive?

      " The largest share was allocated at #{SiteLines.where(site)} " \
        "(#{site[:estimated] ? 'about ' : ''}#{human_bytes(site[:bytes])})."
    end

    # The class whose live objects own the most: the bytes of garbage awaiting the lazy sweep are
    # said apart, and do not rank it (a class whose memory is mostly garbage is no leak).
    def top_class
      name, e = @s.dig(:ruby, :by_class)&.max_by { |_, v| v[:bytes] - v[:garbage_bytes].to_i }
      return nil unless name

      garbage = e[:garbage_bytes].to_i
      live = e[:bytes] - garbage
      text = if garbage.zero?
               "#{human_bytes(live)} in #{e[:chunks]} chunk(s) is owned by #{name} objects, the largest class."
             else
               "#{human_bytes(live)} is owned by live #{name} objects, the largest class; its dead objects awaiting " \
                 "the lazy sweep hold #{human_bytes(garbage)} more."
             end
      Finding.new(:class, live, text + site_of_class(name), "owners")
    end

    # The largest holder a person would name (a constant, a global, a variable: not a root of the VM's
    # own), from the object graph.
    def holder
      return nil unless @dump.ruby && @dump.graph?

      r = @dump.retainers(limit: 20).find { |e| !e[:root].start_with?("(") }
      return nil unless r

      text = "#{human_bytes(r[:retained_bytes])} is retained by #{r[:root]} (#{r[:class_name]}, " \
             "#{count(r[:retained_objects])} objects): freeing or emptying it gives that back."
      Finding.new(:holder, r[:retained_bytes], text, "retainers")
    end

    def garbage
      r = @s[:ruby]
      return nil unless r && r[:garbage_bytes].to_i.positive?

      text = "#{human_bytes(r[:garbage_bytes])} in use belongs to #{r[:garbage_objects]} dead Ruby object(s) the " \
             "pending lazy sweep has not freed yet: no leak, freed as Ruby goes on allocating."
      Finding.new(:garbage, r[:garbage_bytes], text, "owners")
    end

    def mmapped
      return nil if @s[:hblks].zero?

      text = "#{human_bytes(@s[:hblkhd])} is in #{@s[:hblks]} mmapped chunk(s) (requests above the mmap threshold, " \
             "#{human_bytes(@dump.header[:mmap_threshold])})."
      Finding.new(:mmapped, @s[:hblkhd], text, "arenas")
    end

    def ruby_pages
      rss = @s[:rss]
      return nil unless rss && rss[:ruby_pages].to_i.positive?

      Finding.new(:ruby_pages, rss[:ruby_pages], "#{human_bytes(rss[:ruby_pages])} of the RSS is Ruby's object pages " \
                                                 "(#{percent(rss[:ruby_pages], rss[:total])}).", "rss")
    end
  end
end
