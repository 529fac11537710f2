# frozen_string_literal: true

module PtmallocDump
  # glibc's malloc_info() XML, parsed into per-heap figures. The XML is machine-written with a fixed
  # shape (malloc/malloc.c, __malloc_info), so a few patterns read it exactly.
  class MallocInfo
    # One <heap nr="N"> element.
    HeapInfo = Struct.new(:nr, :fastbins, :bins, :unsorted, :fast_count, :fast_size, :rest_count,
                          :rest_size, :system_current, :system_max, keyword_init: true)

    ATTR = /(\w+)="(\d+)"/.freeze
    # What every <size> and <unsorted> element carries.
    SIZE_ATTRS = %i[from to total count].freeze

    # @return [Array<HeapInfo>] one per arena, in ring order (main_arena first)
    attr_reader :heaps
    # @return [Hash{Symbol=>Integer}] the totals after the last heap (fast, rest, mmap, system)
    attr_reader :totals

    # @param xml [String]
    # @raise [FormatError] when the text is not malloc_info output, or an element lacks a figure
    def initialize(xml)
      raise FormatError, "malloc_info text is empty" if xml.nil? || xml.empty?
      raise FormatError, "not malloc_info output" unless xml.start_with?("<malloc version=")

      @heaps = xml.scan(%r{<heap nr="(\d+)">(.*?)</heap>}m).map { |nr, body| parse_heap(nr.to_i, body) }
      raise FormatError, "malloc_info has no <heap> element" if @heaps.empty?

      tail = xml[(xml.rindex("</heap>") || 0)..]
      @totals = {}
      tail.scan(/<(total|system|aspace) type="(\w+)" (?:count="(\d+)" )?size="(\d+)"/) do |tag, type, count, size|
        @totals[:"#{tag}_#{type}_size"] = size.to_i
        @totals[:"#{tag}_#{type}_count"] = count.to_i if count
      end
    end

    private

    def parse_heap(nr, body)
      sizes = body[%r{<sizes>(.*?)</sizes>}m, 1].to_s
      fast = []
      bins = []
      unsorted = nil
      sizes.scan(%r{<(size|unsorted) ([^>]*)/>}) do |tag, attrs|
        h = attrs.scan(ATTR).to_h { |k, v| [k.to_sym, v.to_i] }
        missing = SIZE_ATTRS - h.keys
        unless missing.empty?
          raise FormatError, "malloc_info heap #{nr}: <#{tag} #{attrs}/> lacks #{missing.join(', ')}"
        end

        if tag == "unsorted" then unsorted = h
        elsif h[:to] <= 176 && h[:from] == h[:to] - 15 then fast << h
        else bins << h
        end
      end
      # glibc 2.43 has no fastbins, and its malloc_info prints no <total type="fast"/>: none is zero
      fast_total = body.include?('<total type="fast"')
      HeapInfo.new(nr: nr, fastbins: fast, bins: bins, unsorted: unsorted,
                   fast_count: fast_total ? attr(nr, body, "total", "fast", :count) : 0,
                   fast_size: fast_total ? attr(nr, body, "total", "fast", :size) : 0,
                   rest_count: attr(nr, body, "total", "rest", :count),
                   rest_size: attr(nr, body, "total", "rest", :size),
                   system_current: attr(nr, body, "system", "current", :size),
                   system_max: attr(nr, body, "system", "max", :size))
    end

    def attr(nr, body, tag, type, name)
      m = body.match(%r{<#{tag} type="#{type}"([^>]*)/>})
      value = m && m[1][/#{name}="(\d+)"/, 1]
      raise FormatError, "malloc_info heap #{nr}: no #{name} in <#{tag} type=\"#{type}\"/>" unless value

      value.to_i
    end
  end
end
