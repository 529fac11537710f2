# frozen_string_literal: true

require_relative "findings"

module PtmallocDump
  # The summary as plain data for JSON: the header (without the malloc_info XML), {Dump#summary}
  # unchanged, the headline figures ({Dump#figures}), the verification result (its
  # {Verification#status}: verified, differs or nothing_compared), the findings ({Findings#top}) and
  # the advice. JSON carries UTF-8 only: a string from the dump that is not valid UTF-8 (a path or
  # class name in another encoding, a damaged file) has those bytes replaced with U+FFFD.
  class JsonSummary
    def initialize(dump)
      @dump = dump
    end

    # @return [Hash]
    def to_h
      header = @dump.header.reject { |k, _| k == :malloc_info }
      header = header.merge(time: header[:time].utc.strftime("%Y-%m-%dT%H:%M:%S.%6NZ"))
      v = @dump.verify
      utf8_tree(
        file: @dump.path,
        header: header,
        summary: @dump.summary,
        figures: @dump.figures,
        verify: { ok: v.ok?, status: v.status, compared: v.compared, differences: v.differences.map(&:to_s),
                  anomalies: v.anomalies.map(&:to_s), notes: v.notes },
        findings: Findings.new(@dump).top(3).map(&:to_h),
        advice: Advice.new(@dump).lines.map(&:to_h)
      )
    end

    private

    def utf8_tree(value)
      case value
      when Hash then value.to_h { |k, v| [utf8_tree(k), utf8_tree(v)] }
      when Array then value.map { |v| utf8_tree(v) }
      when String then FormatHelpers.utf8(value)
      else value
      end
    end
  end
end
