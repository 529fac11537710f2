# frozen_string_literal: true

module PtmallocDump
  # Dumps of several workers forked from one parent, side by side.
  class Fleet
    COLUMNS = %i[arena in_use_bytes free_resident_bytes resident_bytes private_bytes shared_bytes hblkhd].freeze

    # @return [Array<Dump>]
    attr_reader :dumps

    # @param dumps [Array<Dump, String>]
    def initialize(dumps)
      @dumps = dumps.map { |d| d.is_a?(Dump) ? d : PtmallocDump.load(d) }
      raise ArgumentError, "compare needs at least two dumps" if @dumps.size < 2
    end

    # @return [Array<Hash>] per worker: :pid, :path and the COLUMNS (private = resident - shared)
    def workers
      @workers ||= @dumps.map do |d|
        s = d.summary
        { pid: d.header[:pid], path: d.path, arena: s[:arena], in_use_bytes: s[:in_use_bytes],
          free_resident_bytes: s[:free_resident_bytes], resident_bytes: s[:resident_bytes],
          private_bytes: s[:resident_bytes] - s[:shared_bytes], shared_bytes: s[:shared_bytes], hblkhd: s[:hblkhd] }
      end
    end

    # @return [Hash{Symbol=>Integer}] the COLUMNS summed over the workers
    def totals
      COLUMNS.to_h { |c| [c, workers.sum { |w| w[c] }] }
    end

    # The worker that costs most beyond the fleet's lower median, by private bytes (what a worker has
    # beyond what it still shares with the parent), then heap size: the one to look at first.
    #
    # @return [Hash] :pid, :path, :figure (the column), :value, :median, :deviation
    def most_deviant
      %i[private_bytes arena].map do |col|
        values = workers.map { |w| w[col] }.sort
        median = values[(values.size - 1) / 2]
        w = workers.max_by { |x| x[col] }
        { pid: w[:pid], path: w[:path], figure: col, value: w[col], median: median, deviation: w[col] - median }
      end.max_by { |e| e[:deviation] }
    end
  end
end
