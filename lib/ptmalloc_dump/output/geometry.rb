# frozen_string_literal: true

module PtmallocDump
  # Where an address is drawn: the image and pixel of the page map or byte map that shows it. The
  # maps lay each group's heaps end to end (a group is one arena heap, or all mmapped chunks), in
  # units of pages (page map: `cell` x `cell` pixels each, 256 per row) or of 16 bytes (byte map:
  # one pixel each, one page per row), split into tiles.
  class Geometry
    # @param dump [Dump]
    # @param images [Array<Hash>] what {Report#images} returns
    def initialize(dump, images)
      @dump = dump
      @images = images
      @page_size = dump.header[:page_size]
    end

    # @param address [Integer]
    # @param kind [Symbol] :page_map or :byte_map
    # @return [Array(Hash, Integer, Integer), nil] the image, x and y of the pixel (top-left of the
    #   cell for page maps), or nil when no map shows the address
    def pixel_for(address, kind)
      heap = @dump.heaps.find { |h| h.range.cover?(address) }
      return nil unless heap

      group = heap.kind == :mmapped_chunk ? :mmapped : heap.index
      unit = unit_offset(heap, group, kind) + (address - page_base(heap)) / unit_bytes(kind)
      image = @images.find do |im|
        im[:kind] == kind && im[:group] == group && unit >= im[:first_unit] && unit < im[:first_unit] + im[:units]
      end
      return nil unless image

      local = unit - image[:first_unit]
      [image, (local % image[:per_row]) * image[:cell], (local / image[:per_row]) * image[:cell]]
    end

    private

    def unit_bytes(kind)
      kind == :page_map ? @page_size : Render::BYTES_PER_PIXEL
    end

    def page_base(heap)
      heap.start & ~(@page_size - 1)
    end

    def pages(heap)
      (heap.end - page_base(heap) + @page_size - 1) / @page_size
    end

    def unit_offset(heap, group, kind)
      before = group == :mmapped ? @dump.heaps.select { |h| h.kind == :mmapped_chunk && h.index < heap.index } : []
      units = before.sum { |h| pages(h) }
      kind == :page_map ? units : units * (@page_size / Render::BYTES_PER_PIXEL)
    end
  end
end
