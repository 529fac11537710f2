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

  # Where the report's heap explorer draws an address, and which address a pixel of it shows. A view
  # is one arena heap, or all mmapped chunks laid end to end in file order ({Explorer#views}); its
  # bytes run left to right in rows of `width` pixels, `bytes_per_pixel` bytes to a pixel, and the
  # canvas shows rows from `first_row` on. assets/explorer.js computes the same.
  class ExplorerGeometry
    # @return [Integer] canvas width in pixels (the explorer's own constant)
    WIDTH = 896
    # @return [Integer] canvas height in pixels
    HEIGHT = 512

    attr_reader :heaps, :bytes_per_pixel, :first_row

    # @param heaps [Array<Heap>] the view's heaps, in file order
    # @param bytes_per_pixel [Integer] a power of two, 1 or more
    # @param first_row [Integer] the row drawn at y = 0
    def initialize(heaps, bytes_per_pixel, first_row = 0)
      @heaps = heaps
      @bytes_per_pixel = bytes_per_pixel
      @first_row = first_row
    end

    # @return [Integer] bytes of the view
    def size
      @heaps.sum(&:size)
    end

    # @param address [Integer]
    # @return [Array(Integer, Integer), nil] x and y of the pixel that shows it, nil outside the view
    #   or the canvas
    def pixel_for(address)
      off = 0
      @heaps.each do |h|
        if h.range.cover?(address)
          p = (off + address - h.start) / @bytes_per_pixel
          x = p % WIDTH
          y = p / WIDTH - @first_row
          return y.between?(0, HEIGHT - 1) ? [x, y] : nil
        end
        off += h.size
      end
      nil
    end

    # @return [Integer, nil] the first address the pixel shows, nil past the view's end
    def address_at(x, y)
      v = ((@first_row + y) * WIDTH + x) * @bytes_per_pixel
      @heaps.each do |h|
        return h.start + v if v < h.size

        v -= h.size
      end
      nil
    end

    # @return [Integer] the row that puts an address in the middle of the canvas
    def self.row_centering(heaps, address, bytes_per_pixel)
      off = 0
      heaps.each do |h|
        return [(off + address - h.start) / bytes_per_pixel / WIDTH - HEIGHT / 2, 0].max if h.range.cover?(address)

        off += h.size
      end
      0
    end
  end
end
