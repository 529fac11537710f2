# frozen_string_literal: true

require "json"

module PtmallocDump
  # Appends one {PtmallocDump.stats} reading per period, as a JSON line, to a file, from a background
  # thread. Several processes may append to the same file: each line is one write(2) in append mode
  # and carries its pid.
  class Sampler
    # @return [String] the file the readings go to
    attr_reader :path
    # @return [Numeric] seconds between readings
    attr_reader :every

    # @param every [Numeric] seconds between readings
    # @param to [String] the file to append to
    # @param smaps [Boolean] as for {PtmallocDump.stats}
    def initialize(every:, to:, smaps: false)
      raise ArgumentError, "every: must be a positive number of seconds" unless every.is_a?(Numeric) && every.positive?

      @every = every
      @path = File.expand_path(to.to_s)
      @smaps = smaps
      @lock = Mutex.new
      @wake = ConditionVariable.new
      @stopping = false
      @pid = nil
      @thread = nil
    end

    # Starts the thread (again, in a forked child whose parent's sampler thread did not survive the
    # fork). A no-op when this process's thread is running.
    # @return [self]
    def start
      return self if running?

      @lock = Mutex.new # a forked child must not inherit a lock held by the parent's thread
      @wake = ConditionVariable.new
      @stopping = false
      @pid = Process.pid
      @thread = Thread.new { run }
      @thread.name = "ptmalloc_dump sampler"
      self
    end

    # Whether this process's sampler thread runs (false in a forked child until {#start}).
    def running?
      @pid == Process.pid && @thread&.alive? ? true : false
    end

    # Stops the thread after its current reading, waiting for it.
    # @return [self]
    def stop
      return self unless running?

      @lock.synchronize do
        @stopping = true
        @wake.signal
      end
      @thread.join
      self
    end

    # Takes one reading now and appends it.
    # @return [Hash] the reading
    def sample
      reading = PtmallocDump.stats(smaps: @smaps)
      File.open(@path, File::WRONLY | File::APPEND | File::CREAT, 0o644) { |f| f.syswrite("#{JSON.generate(reading)}\n") }
      reading
    end

    private

    def run
      loop do
        begin
          sample
        rescue SystemCallError, IOError, Error => e
          warn "ptmalloc_dump: sampler could not write #{@path}: #{e.message}"
        end
        break if @lock.synchronize { @stopping || (@wake.wait(@lock, @every) && @stopping) }
      end
    end
  end
end
