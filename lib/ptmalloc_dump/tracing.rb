# frozen_string_literal: true

module PtmallocDump
  # The mean gap between traced objects {PtmallocDump.trace_allocations} samples by default.
  DEFAULT_TRACE_EVERY = 64
  # Traced objects alive at once, and distinct stacks, the tracing tables hold by default.
  DEFAULT_TRACE_MAX_OBJECTS = 1_000_000
  DEFAULT_TRACE_MAX_STACKS = 65_536

  class << self
    # Starts recording where Ruby objects are allocated: every +every+-th new object on average (a
    # random, geometric gap, so that a loop's fixed rhythm cannot hide a site), with the Ruby stack that
    # allocated it, until the object is freed. Dumps taken while tracing is on hold the sites of the
    # traced objects still alive ({Dump#allocation_sites}); a forked child (a preforked worker) keeps
    # tracing on its copy.
    #
    # It uses the VM's internal NEWOBJ and FREEOBJ events and allocates nothing inside them: its tables
    # are mapped at their fixed size here (+max_objects+ traced objects alive at once, +max_stacks+
    # distinct stacks); samples that find them full are counted as dropped. Each new object costs a
    # counter decrement, each sample a walk of the Ruby stack (up to 64 frames).
    #
    # @param every [Integer] the mean gap, 1 to trace every object
    # @param seed [Integer, nil] the sampler's seed, for repeatable runs (nil: from the clock)
    # @param max_objects [Integer] traced objects alive at once
    # @param max_stacks [Integer] distinct stacks
    # @return [nil]
    # @raise [TracingError] when tracing is already on, or its tables cannot be mapped
    def trace_allocations(every: DEFAULT_TRACE_EVERY, seed: nil, max_objects: DEFAULT_TRACE_MAX_OBJECTS,
                          max_stacks: DEFAULT_TRACE_MAX_STACKS)
      { every: every, max_objects: max_objects, max_stacks: max_stacks }.each do |name, value|
        unless value.is_a?(Integer) && value.positive?
          raise ArgumentError, "#{name}: must be a positive Integer, not #{value.inspect}"
        end
      end
      unless seed.nil? || seed.is_a?(Integer)
        raise ArgumentError,
              "seed: must be an Integer or nil, not #{seed.inspect}"
      end

      _trace_allocations(every, seed.to_i & ((1 << 64) - 1), max_objects, max_stacks)
    end

    # Stops allocation tracing and releases its tables (nothing when it is off).
    # @return [nil]
    def stop_allocation_tracing
      _stop_allocation_tracing
    end

    # @return [Hash, nil] nil when tracing is off, else +:every+, +:seen+ (new objects since it started),
    #   +:sampled+, +:dropped+ (samples the full tables could not keep), +:tracked+ (traced objects alive),
    #   +:stacks+, +:frames+, +:max_objects+, +:max_stacks+, +:mapped_bytes+ (its tables' address space;
    #   only the pages used are resident) and +:started_at+
    def allocation_tracing
      _allocation_tracing
    end
  end
end
