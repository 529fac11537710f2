# frozen_string_literal: true

require "json"

module PtmallocDump
  # The data of the report's heap explorer: every chunk, page and owning Ruby object of a dump as packed
  # little-endian arrays (base64), written to OUTDIR/explorer-data.js, a script that hands them to the
  # page (a file:// page may load a script beside it, but not fetch() a file). The page's own code is
  # assets/explorer.js.
  class Explorer
    DATA_FILE = "explorer-data.js"
    ASSETS = File.expand_path("assets", __dir__)
    # the keys of {#data} that hold base64 of packed arrays
    PACKED = %i[sizes states8 pages refs tcache owners categories8 objAddress objClass objDataType objType ownerKinds
                anchorIds code pageChanges].freeze

    # @param dump [Dump]
    # @param page_changes [String, nil] for a comparison: {Diff#page_changes} of this (the newer) dump,
    #   which the explorer can colour pages by
    # @param initial_heap [Integer, nil] the index of the heap ({Heap#index}) the explorer opens on (the
    #   one the report's first finding is about); nil: the first
    def initialize(dump, page_changes: nil, initial_heap: nil)
      @dump = dump
      @page_changes = page_changes
      @initial_heap = initial_heap
    end

    # What the explorer's first paragraph says (its line breaks are the page's own).
    HELP = "Every chunk of every heap. Wheel to zoom (down to one byte a pixel) and drag to move; on the minimap " \
           "at the right,\nclick to go somewhere, drag over a range to zoom to it. Hover for the chunk under the " \
           "pointer, click to pin it. Search an address (0x...), a class, a module (the chunks of the code it\n" \
           "defines; module:Name where a class has the name too), a typed-data type, a Ruby type (T_STRING), a state " \
           "(tcache, smallbin ...), an owner\ncategory (native, string ...), a holder (ruby, anchored, leaked) or a " \
           "root's name."
    ZOOM_BUTTONS = "<button type=\"button\" id=\"xp-fit\">whole heap</button>" \
                   "<button type=\"button\" id=\"xp-out\">&#8722;</button>" \
                   "<button type=\"button\" id=\"xp-in\">+</button>"

    # @return [String] the explorer's HTML (its script runs from the page's end, see {.script})
    def section
      modes = { "state" => "state", "owner" => "owner", "residency" => "residency", "pages" => "page class" }
      modes = { "change" => "what changed" }.merge(modes) if @page_changes
      radios = modes.map.with_index do |(v, label), i|
        checked = i.zero? ? ' checked="checked"' : ""
        %(<label><input type="radio" name="xp-mode" value="#{v}"#{checked} /> #{label}</label>)
      end
      <<~HTML
        <h2 id="explorer">Heap explorer</h2>
        <p class="sub">#{HELP}</p>
        <form id="xp-form" class="xp-bar"><select id="xp-view"></select>
        <span>colour by #{radios.join(' ')}</span>
        <input id="xp-search" type="search" placeholder="0x7f..., String, tcache, native ..." />
        <button type="submit">search</button>
        #{ZOOM_BUTTONS}
        <span id="xp-status">loading the chunk data ...</span></form>
        <div class="xp">#{map_canvas}
        #{mini_canvas}<div id="xp-panel"><p>Hover over the map.</p></div></div>
        <p class="sub" id="xp-zoom"></p>
        <div id="xp-legend"></div>
        <div id="xp-results"></div>
      HTML
    end

    # @return [String] the page's script (inline in index.html)
    def self.script
      File.read(File.join(ASSETS, "explorer.js"))
    end

    # @return [String] the explorer's stylesheet (inline in index.html)
    def self.css
      File.read(File.join(ASSETS, "explorer.css"))
    end

    # Writes OUTDIR/explorer-data.js.
    # @param outdir [String]
    # @return [String] its path
    def write(outdir)
      path = File.join(outdir, DATA_FILE)
      d = data
      packed = d.slice(*PACKED)
      File.open(path, "w") do |f|
        # the packed arrays are base64, which JSON needs no escaping for: written as they are
        f.write("ptmdExplorerData(Object.assign(#{JSON.generate(d.reject { |k, _| PACKED.include?(k) })}, {")
        packed.each_with_index do |(key, b64), i|
          f.write(%(#{i.zero? ? '' : ','}"#{key}":"))
          f.write(b64)
          f.write('"')
        end
        f.write("}));\n")
      end
      path
    end

    # The views the explorer offers: one per arena heap, and one for all mmapped chunks laid end to
    # end (in file order), as {ExplorerGeometry} lays them out too.
    #
    # @return [Array<Hash>] :group (a heap index or :mmapped), :heaps (Array<Heap>), :label
    def views
      @views ||= arena_views
    end

    # @return [Integer] the index in {#views} of the view the explorer opens on: the one holding the
    #   initial heap, else 0
    def initial_view
      views.index { |v| v[:heaps].any? { |h| h.index == @initial_heap } } || 0
    end

    # @return [Hash] what explorer-data.js passes to the page
    def data
      packed = Render.explorer_data(@dump)
      d = {
        pageSize: @dump.header[:page_size],
        heaps: heap_table,
        views: views.map { |v| { group: v[:group].to_s, heaps: v[:heaps].map(&:index), label: v[:label] } },
        initialView: initial_view,
        states: STATES.map(&:to_s),
        pageClasses: Format::PAGE_CLASSES.map(&:to_s),
        categories: Format::OWNER_CATEGORIES.map(&:to_s),
        palette: Render.palette,
        chunkCount: @dump.chunk_count,
        sizes: b64(packed[:sizes]), states8: b64(packed[:states]), pages: b64(packed[:pages]),
        refs: b64(packed[:refs]), references: !packed[:refs].empty?
      }
      # which thread's tcache holds each tcache chunk: [chunk, thread record, bin | position << 16] and
      # each thread record's tid (0 unknown)
      d.merge!(tcache: b64(packed[:tcache]), threadTids: @dump.threads.map(&:tid)) if packed[:tcache]
      d.merge!(ruby_tables(packed)) if packed[:owners]
      d.merge!(pageChanges: b64(@page_changes), changeNames: Format::PAGE_CHANGES.map(&:to_s)) if @page_changes
      d.merge!(holders(packed)) if packed[:owner_kinds]
      d.merge!(code_table(packed)) if packed[:code]
      d
    end

    private

    def arena_views
      arena = @dump.heaps.reject { |h| h.kind == :mmapped_chunk }.map do |h|
        where = h.kind == :sbrk ? "main arena (sbrk)" : "arena #{h.arena&.index}"
        size = FormatHelpers.human_bytes(h.size)
        { group: h.index, heaps: [h], label: "heap #{h.index}: #{where}, #{FormatHelpers.hex(h.start)}, #{size}" }
      end
      mm = @dump.heaps.select { |h| h.kind == :mmapped_chunk }
      unless mm.empty?
        f = @dump.figures
        label = "#{f[:mmapped_chunk_count]} mmapped chunk(s), #{FormatHelpers.human_bytes(f[:mmapped_chunks])}"
        arena << { group: :mmapped, heaps: mm, label: label }
      end
      arena
    end

    def map_canvas
      "<canvas id=\"xp-map\" tabindex=\"0\" role=\"img\" " \
        "aria-label=\"the heap, one chunk per run of pixels: arrow keys move, + and - zoom\" " \
        "width=\"#{ExplorerGeometry::WIDTH}\" height=\"#{ExplorerGeometry::HEIGHT}\"></canvas>"
    end

    def mini_canvas
      "<canvas id=\"xp-mini\" role=\"img\" aria-label=\"the whole heap; the frame is the part shown\" width=\"64\" " \
        "height=\"#{ExplorerGeometry::HEIGHT}\"></canvas>"
    end

    def b64(str)
      [str].pack("m0")
    end

    def heap_table
      first_chunk = 0
      first_page = 0
      @dump.heaps.zip(@dump.pages).map do |h, pm|
        row = { index: h.index, kind: h.kind.to_s, arena: h.arena&.index, start: h.start, end: h.end,
                pageBase: pm.page_base, firstPage: first_page, pages: pm.size,
                firstChunk: first_chunk, chunks: h.chunk_count }
        first_chunk += h.chunk_count
        first_page += pm.size
        row
      end
    end

    # Names of the owning objects' classes, typed-data types and types: each read once, from one
    # object that has it, through RubyHeap's public API.
    def ruby_tables(packed)
      ruby = @dump.ruby
      index = packed[:object_index]
      names = {}
      dnames = {}
      tnames = {}
      type_name = ->(o) { o.imemo_type ? "#{o.type} (#{o.imemo_type})" : o.type.to_s }
      [[packed[:object_class], names, ->(o) { o.class_name }],
       [packed[:object_data_type], dnames, ->(o) { o.data_type }],
       [packed[:object_type], tnames, type_name]].each do |bytes, table, name|
        bytes.unpack("V*").each_with_index do |key, k|
          next if table.key?(key)

          table[key] = utf8_or_nil(name.call(ruby.object(index[k])))
        end
      end
      {
        owners: b64(packed[:owners]), categories8: b64(packed[:categories]),
        objAddress: b64(packed[:object_address]), objClass: b64(packed[:object_class]),
        objDataType: b64(packed[:object_data_type]), objType: b64(packed[:object_type]),
        classNames: names, dataTypeNames: dnames, typeNames: tnames
      }
    end

    def utf8_or_nil(str)
      str && FormatHelpers.utf8(str)
    end

    # Who holds each in-use chunk (analysis/owners.c): one byte per chunk (0 not allocated, 1 ruby, 2
    # anchored, 3 leaked, 4 no known owner in a dump without Ruby objects, 5 held through an interior
    # pointer) and per chunk its root + 1 (u16, 0 none), with each root's name.
    def holders(packed)
      { ownerKinds: b64(packed[:owner_kinds]), anchorIds: b64(packed[:anchor_ids]),
        anchors: @dump.roots.first(0xfffe).map { |r| FormatHelpers.utf8(r[:name].to_s) } }
    end

    # The code each chunk is charged to (analysis/code_owners.c): per chunk a record + 1 (u16 or u32 as
    # codeWidth says, 0 none);
    # each record as [kind, module, method, path, line] with the names (indexes into codeNames, -1 for
    # none) read once, through RubyHeap#code_of.
    def code_table(packed)
      names = {}
      id = ->(n) { n ? names.fetch(n) { names[n] = names.size } : -1 }
      rows = packed[:code_records].map do |address|
        c = @dump.ruby.code_of(address) || {}
        [c[:kind].to_s, id.call(c[:module]), id.call(c[:method]), id.call(c[:path]), c[:line] || 0]
      end
      { code: b64(packed[:code]), codeWidth: packed[:code_width], codes: rows,
        codeNames: names.keys.map { |n| FormatHelpers.utf8(n) } }
    end
  end
end
