# frozen_string_literal: true

module PtmallocDump
  # Formatting shared by the text summary, the HTML report and the JSON summary.
  module FormatHelpers
    UNITS = %w[B KiB MiB GiB TiB].freeze

    module_function

    # @param bytes [Integer]
    # @param digits [Integer, nil] decimals above bytes; nil: one below 10 of the unit, none above
    # @return [String] e.g. "1.5 MiB"
    def human_bytes(bytes, digits: nil)
      return "0 B" if bytes.nil? || bytes.zero?

      exp = [(Math.log(bytes.abs) / Math.log(1024)).floor, UNITS.size - 1].min
      exp = 0 if exp.negative?
      value = bytes.to_f / (1024**exp)
      exp.zero? ? "#{bytes} B" : format("%.#{digits || (value.abs < 10 ? 1 : 0)}f %s", value, UNITS[exp])
    end

    # @param bytes [Integer] a growth
    # @return [String] signed, one decimal above bytes: "+86.5 MiB", "-512 B", "0 B"
    def signed_bytes(bytes)
      return human_bytes(0) if bytes.nil? || bytes.zero?

      "#{bytes.negative? ? '-' : '+'}#{human_bytes(bytes.abs, digits: 1)}"
    end

    # @return [String] "12.3%"
    def percent(part, whole)
      return "-" if whole.nil? || whole.zero?

      format("%.1f%%", 100.0 * part / whole)
    end

    # @param value [Object]
    # @return [String] value's text for HTML: valid UTF-8 (see {utf8}), with <, >, &, " and ' escaped
    def h(value)
      require "cgi/util"
      CGI.escapeHTML(utf8(value.to_s))
    end

    # Strings from a dump (paths, host and class names) as valid UTF-8, for HTML and JSON: bytes that
    # are not UTF-8 (another encoding, a damaged file) become U+FFFD.
    #
    # @param str [String]
    # @return [String]
    def utf8(str)
      if [Encoding::UTF_8, Encoding::BINARY, Encoding::US_ASCII].include?(str.encoding)
        s = str.encoding == Encoding::UTF_8 ? str : str.dup.force_encoding(Encoding::UTF_8)
        s.valid_encoding? ? s : s.scrub("\uFFFD")
      else
        str.encode(Encoding::UTF_8, invalid: :replace, undef: :replace, replace: "\uFFFD")
      end
    end

    # @param n [Integer]
    # @return [String] "80,000"
    def count(n)
      n.to_s.reverse.scan(/\d{1,3}/).join(",").reverse.then { |s| n.negative? ? "-#{s}" : s }
    end

    # @return [String] "0x7f..."
    def hex(address)
      address ? format("0x%x", address) : "-"
    end
  end
end
