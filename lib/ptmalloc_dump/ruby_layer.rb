# frozen_string_literal: true

module PtmallocDump
  # Whether this Ruby lets a dump record its heap (the Ruby pass), decided once when the gem loads.
  #
  # The malloc dump needs nothing of Ruby's internals. The Ruby pass needs one function libruby
  # exports without promising to keep it (rb_objspace_each_objects, looked up at load time, never
  # linked), the GC.stat figures it records, and Ruby's default GC, whose object pages it reads. When
  # one is missing the pass is skipped, the gem warns once, and every dump's header says why
  # (+header[:ruby_layer]+, +header[:ruby_layer_reason]+).
  class RubyLayer
    # The Ruby versions the suite runs on.
    TESTED = Gem::Requirement.new(">= 2.7", "< 3.5")
    # GC.stat keys the pass records (heap_tomb_pages, gone in Ruby 3.4, is read only where it exists).
    STAT_KEYS = %i[heap_allocated_pages heap_live_slots heap_free_slots total_allocated_objects].freeze

    # @return [String, nil] why the pass cannot run here, nil when it can
    attr_reader :problem
    # @return [String, nil] a caveat when it runs on a Ruby newer than the tested ones
    attr_reader :caveat

    # @param missing_functions [Array<String>] internal functions this Ruby lacks
    # @param stat_keys [Array<Symbol>] the keys GC.stat has
    # @param gc [String] the GC implementation in use ("default" before Ruby 3.4's GC.config)
    # @param version [String] RUBY_VERSION
    def initialize(missing_functions:, stat_keys:, gc:, version:)
      @problem =
        if !missing_functions.empty?
          "this Ruby (#{version}) does not export #{missing_functions.join(', ')}"
        elsif gc != "default"
          "the GC in use is #{gc.inspect} (RUBY_GC_LIBRARY): only Ruby's default GC is understood"
        elsif !(lacking = STAT_KEYS - stat_keys).empty?
          "GC.stat has no #{lacking.join(', ')}"
        end
      @caveat = "Ruby #{version} is newer than the tested #{TESTED}: owners may be incomplete" \
        if @problem.nil? && !TESTED.satisfied_by?(Gem::Version.new(version))
    end

    # The layer of the running process.
    #
    # @return [RubyLayer]
    def self.current
      @current ||= new(missing_functions: PtmallocDump._ruby_functions_missing, stat_keys: GC.stat.keys,
                       gc: GC.respond_to?(:config) ? GC.config[:implementation].to_s : "default",
                       version: RUBY_VERSION)
    end

    # @return [Boolean] true when the Ruby pass can run
    def available?
      @problem.nil?
    end

    # What a dump records in its header for a request of the Ruby pass.
    #
    # @param requested [Boolean] the dump's +ruby:+ option
    # @return [Array(String, String)] "recorded", "off" or "skipped", and why ("" when there is nothing
    #   to say): the problem that skipped it, or the caveat it was recorded with
    def status(requested)
      return ["off", ""] unless requested
      return ["skipped", @problem] if @problem

      ["recorded", @caveat.to_s]
    end

    # The warning given once at load, nil when there is nothing to say.
    #
    # @return [String, nil]
    def warning
      return "ptmalloc_dump: dumps will hold no Ruby objects: #{@problem}" if @problem

      "ptmalloc_dump: #{@caveat}" if @caveat
    end
  end
end
