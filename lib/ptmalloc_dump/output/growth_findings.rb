# frozen_string_literal: true

require_relative "../format_helpers"

module PtmallocDump
  # What grew between two dumps of one process and what kind of growth it is, each kind with its bytes
  # and the next step: what the `--diff` page and the terminal's `--diff` lead with, as {Findings} leads
  # the single report. The kinds: native memory nothing points at (leaked), memory Ruby objects own (by
  # class, and by holder where both dumps have the object graph), free but resident memory
  # (fragmentation), arenas (more of them, or the threads' arenas growing) and mmapped chunks. The next
  # steps are {Advice}'s, for the later dump.
  class GrowthFindings
    include FormatHelpers

    # `bytes` is the growth, `title` names its kind, `text` says what grew, `steps` what to do next
    # (sentences), `anchor` the id of the `--diff` page's section with the evidence, `rank` the bytes that
    # order the findings: the growth, but for the arenas only the free part of it (their in-use growth is
    # the owners', which the other kinds count), and never above the whole free but resident growth.
    Finding = Struct.new(:topic, :bytes, :title, :text, :steps, :anchor, :rank) do
      # @return [Integer]
      def rank
        self[:rank] || bytes
      end
    end

    # Growth below this, or below {NOTABLE_SHARE} of the later heap, is not worth a finding.
    NOTABLE_BYTES = 1024 * 1024
    NOTABLE_SHARE = 0.01
    # The advice topics that answer free but resident memory.
    FREE_TOPICS = %i[malloc_trim trim_threshold pinned_pages small_free_chunks].freeze

    # @param diff [Diff]
    def initialize(diff)
      @diff = diff
      @g = diff.growth
      @owners = diff.owners
      @advice = Advice.new(diff.new, exact: false)
    end

    # @return [Integer] the least growth a finding needs, in bytes
    def notable
      @notable ||= [NOTABLE_BYTES, (NOTABLE_SHARE * (@diff.new.summary[:arena] + @diff.new.summary[:hblkhd])).to_i].max
    end

    # @return [Array<Finding>] every kind of growth that is notable, largest first (empty when nothing
    #   grew notably)
    def all
      @all ||= [leaked, ruby, fragmentation, arenas, mmapped].compact.select { |f| f.bytes >= notable }
                                                             .each_with_index.sort_by { |f, i| [-f.rank, i] }
                                                             .map(&:first)
    end

    # @return [String] one sentence: how the heap grew and, first, what kind of growth leads
    def lead
      heap = "the malloc heap changed by #{signed_bytes(@g[:arena])} (in use #{signed_bytes(@g[:in_use_bytes])}, " \
             "free but resident #{signed_bytes(@g[:free_resident_bytes])}) and its mmapped chunks by " \
             "#{signed_bytes(@g[:hblkhd])}"
      apart = format("%.1f", @diff.new.header[:time] - @diff.old.header[:time])
      return "In #{apart} s #{heap}: nothing grew notably (by #{human_bytes(notable)} or more)." if all.empty?

      "In #{apart} s #{heap}. Most of the growth: #{all.first.title}, #{signed_bytes(all.first.bytes)}."
    end

    private

    def step_lines(*topics)
      @advice.lines.select { |l| topics.include?(l.topic) }.map(&:text)
    end

    # Native memory nothing points at (both dumps with roots), else native memory no Ruby object owns.
    def leaked
      return nil unless @owners

      if @owners[:leaked]
        grew = @owners[:leaked]
        big = Array(@owners[:leaked_by_size]).first
        most = big && big[:bytes].positive? ? ", most in blocks of #{human_bytes(big[:size], digits: 2)}" : ""
        text = "#{signed_bytes(grew[:bytes])} in #{signed_count(grew[:count])} blocks that nothing points at any more" \
               "#{most}."
        return Finding.new(:leaked, grew[:bytes], "leaked native memory", text, [@advice.leak_step.strip], "owners")
      end
      text = "#{signed_bytes(@owners[:native])} in use that no Ruby object points at (the dumps have no roots " \
             "to tell anchored from leaked)."
      Finding.new(:native, @owners[:native], "native memory", text, [@advice.leak_step.strip], "owners")
    end

    # Memory Ruby objects own, by the classes that grew most and the holder that grew most.
    def ruby
      return nil unless @owners

      bytes = @owners[:ruby] ? @owners[:ruby][:bytes] : @owners[:by_type].values.sum
      classes = @owners[:by_class].select { |_, b| b.positive? }.first(3).map { |n, b| "#{n} #{signed_bytes(b)}" }
      by = classes.empty? ? "" : ", most by #{classes.join(', ')}"
      holder = grown_holder
      held = if holder
               "; the holder that grew most is #{holder[:root]} (#{holder[:class_name]}), " \
                 "#{signed_bytes(holder[:growth_bytes])} that it alone keeps alive"
             end
      text = "#{signed_bytes(bytes)} owned by Ruby objects#{by}#{held}."
      Finding.new(:ruby, bytes, "Ruby objects", text, holder_steps(holder), "owners")
    end

    def grown_holder
      return nil unless @diff.old.graph? && @diff.new.graph?

      @diff.retainers(limit: 20).find { |r| r[:growth_bytes].positive? && !r[:root].start_with?("(") }
    end

    def holder_steps(holder)
      unless holder
        return ["Dump both with graph: true: the diff then names the constant, global or variable that holds " \
                "the new objects (ptmalloc-visualize --retainers names it in one dump)."]
      end

      line = step_lines(:holder).first
      line&.start_with?("#{holder[:root]} ") ? [line] : ["#{holder[:root]}: #{Advice::HOLDER_STEP}."]
    end

    def fragmentation
      bytes = @g[:free_resident_bytes]
      pages = @diff.chunks[:pages][:new_free_resident]
      text = "#{signed_bytes(bytes)} free but resident, #{count(pages)} pages newly mostly free and still in RAM, " \
             "while memory in use changed by #{signed_bytes(@g[:in_use_bytes])}."
      topics = arena_growth ? FREE_TOPICS : [:arena_max, *FREE_TOPICS]
      steps = step_lines(*topics)
      steps = ["#{capitalize(arenas? ? Advice::ARENA_STEP : Advice::TRIM_STEP)}."] if steps.empty?
      Finding.new(:fragmentation, bytes, "free but resident memory (fragmentation)", text, steps, "pages")
    end

    # Whether threads have arenas of their own besides the main one and another.
    def arenas?
      @diff.new.summary[:arenas].size > 2
    end

    # More arenas, or the threads' arenas growing: [new arenas, their heaps' growth, the arenas' rows]
    def arena_growth
      return @arena_growth if defined?(@arena_growth)

      threads = @diff.arenas.reject { |a| a[:main] }
      grew = threads.sum { |a| a[:arena] }
      added = @diff.new.summary[:arenas].size - @diff.old.summary[:arenas].size
      @arena_growth = added.positive? || grew >= notable ? [added, grew, threads] : nil
    end

    def arenas
      added, grew, threads = arena_growth
      return nil unless added

      more = added.positive? ? "#{added} more arena(s) (#{@diff.new.summary[:arenas].size} now); " : ""
      text = "#{more}the #{threads.size} thread arena(s) grew #{signed_bytes(grew)}: in use " \
             "#{signed_bytes(threads.sum { |a| a[:in_use_bytes] })}, free but resident " \
             "#{signed_bytes(threads.sum { |a| a[:free_resident_bytes] })}."
      steps = step_lines(:arena_max)
      steps = ["#{Advice::ARENA_STEP}."].map { |s| capitalize(s) } if steps.empty?
      free = [threads.sum { |a| a[:free_resident_bytes] }, @g[:free_resident_bytes]].min
      Finding.new(:arenas, [grew, added.positive? ? notable : 0].max, "arenas", text, steps, "arenas", free)
    end

    def mmapped
      bytes = @g[:hblkhd]
      threshold = @diff.new.header[:mmap_threshold]
      text = "#{signed_bytes(bytes)} in #{signed_count(@g[:hblks])} mmapped chunks: requests above the mmap " \
             "threshold (#{human_bytes(threshold)}), each a mapping of its own."
      steps = step_lines(:mmap_threshold)
      if steps.empty?
        steps = ["They are in use: the growth by owner below says who holds them; ptmalloc-visualize --explain ADDR " \
                 "names the owner of one."]
      end
      Finding.new(:mmapped, bytes, "mmapped chunks", text, steps, "growth")
    end

    def signed_count(n)
      n.negative? ? count(n) : "+#{count(n)}"
    end

    def capitalize(sentence)
      sentence[0].upcase + sentence[1..]
    end
  end
end
