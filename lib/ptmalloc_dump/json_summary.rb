# frozen_string_literal: true

module PtmallocDump
  # The summary as plain data for JSON: the header (without the malloc_info XML), {Dump#summary}
  # unchanged, and the verification result.
  class JsonSummary
    def initialize(dump)
      @dump = dump
    end

    # @return [Hash]
    def to_h
      header = @dump.header.reject { |k, _| k == :malloc_info }
      header = header.merge(time: header[:time].utc.strftime("%Y-%m-%dT%H:%M:%S.%6NZ"))
      v = @dump.verify
      {
        file: @dump.path,
        header: header,
        summary: @dump.summary,
        verify: { ok: v.ok?, differences: v.differences.map(&:to_s), anomalies: v.anomalies.map(&:to_s) }
      }
    end
  end
end
