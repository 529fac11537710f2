# frozen_string_literal: true

require_relative "../format_helpers"

module PtmallocDump
  # What one address of a dump is (`ptmalloc-visualize --explain ADDR DUMP`): the heap or Ruby page
  # that holds it, its chunk with state and bin (a tcache chunk's with the thread whose tcache holds
  # it, {Dump#bin_of}), the chunk's owner, and the residency of its page.
  # The explorer's panel shows the same for the chunk under the pointer.
  class Explanation
    include FormatHelpers

    # @param dump [Dump]
    # @param address [Integer]
    def initialize(dump, address)
      @dump = dump
      @address = address
    end

    # @return [Hash] :address, :heap, :chunk, :owner, :holder, :kept_alive_by (the path from a root to
    #   the Ruby object that owns the chunk, or to the object at the address, where the dump has the
    #   object graph; else why not), :code, :allocated (the owner's allocation site), :page, :ruby_slot,
    #   :references (each nil when it does not apply). The holder is
    #   {Dump#owner_kind_of}'s, the references (:points_at, and :pointed_at_by, :integers, :roots,
    #   :objects, :interior, :interior_roots) {Dump#referrers}'s, so the three always agree.
    def to_h
      @to_h ||= begin
        heap = @dump.heaps.find { |h| h.range.cover?(@address) }
        chunk = heap && @dump.chunk_containing(@address)
        {
          address: hex(@address),
          heap: heap && heap_h(heap),
          chunk: chunk && chunk_h(chunk),
          owner: chunk && owner_h(chunk),
          holder: chunk && holder(chunk),
          kept_alive_by: kept_alive_by(chunk),
          code: chunk && code_h(chunk),
          allocated: allocated_h(chunk),
          page: heap && page_h(heap),
          # on Ruby 2.7 and 3.0 an object page is a malloc chunk: both apply
          ruby_slot: ruby_slot,
          references: chunk && references(chunk)
        }
      end
    end

    # @return [String] the text `--explain` prints
    def to_s
      e = to_h
      lines = []
      hp = e[:heap]
      heap = hp && "heap #{hp[:index]} (#{hp[:kind]}#{hp[:arena] ? " of arena #{hp[:arena]}" : ''}, " \
                   "#{hp[:start]}-#{hp[:end]})"
      if (s = e[:ruby_slot])
        lines << "#{e[:address]} is in a Ruby object page (#{s[:page]}), slot #{s[:slot]}: " \
                 "#{s[:object] || 'a free slot'}"
        lines << row("kept alive by", e[:kept_alive_by]) if e[:kept_alive_by] && !e[:chunk]
        lines << row("heap", "the page is a malloc chunk in #{heap}") if heap
      elsif heap
        lines << "#{e[:address]} is in #{heap}"
      else
        lines << "#{e[:address]} is in no heap, mmapped chunk or Ruby object page of this dump"
      end
      if (c = e[:chunk])
        size = c[:size] >= 1024 ? " (#{human_bytes(c[:size])})" : ""
        lines << row("chunk", "#{c[:address]}, #{c[:size]} B#{size}, the address is #{c[:where]}")
        lines << row("state", [c[:state], *c[:flags]].join("; "))
        lines << row("bin", c[:bin]) if c[:bin]
        lines << row("owner", e[:owner][:text])
        lines << row("holder", e[:holder]) if e[:holder]
        lines << row("kept alive by", e[:kept_alive_by]) if e[:kept_alive_by]
        lines << row("code", e[:code][:text]) if e[:code]
        if (a = e[:allocated])
          lines << row("allocated", "#{SiteLines.where(a)}#{a[:object] ? " (its owner, #{a[:object]})" : ''}")
          a[:frames].first(12).each { |f| lines << row("", "  #{f}") }
          a[:native_frames]&.first(12)&.each { |f| lines << row("", "  #{f}") }
        elsif @dump.malloc_sites? && c[:state].to_s == "in_use"
          mean = human_bytes(@dump.allocation_tracking[:mean_bytes])
          lines << row("allocated", "not known: the tracker did not sample this block (it samples one in about " \
                                    "#{mean} allocated)")
        end
      elsif e[:heap]
        lines << row("chunk", "none: the walk did not reach this address")
      end
      if e[:page]
        sharing = { shared: ", shared with another process", unknown: ", sharing unknown" }
                  .fetch(e[:page][:sharing], "")
        lines << row("page", "#{e[:page][:address]}: #{e[:page][:residency]}#{sharing}")
      end
      if (r = e[:references])
        lines << row("points at", list(r[:points_at]))
        lines << row("pointed at by", held_by_text(r))
      end
      lines.join("\n") << "\n"
    end

    private

    def row(label, text)
      format("%-14s %s", label, text)
    end

    def list(addrs)
      addrs.empty? ? "nothing" : "#{addrs.size} chunk(s): #{addrs.first(8).join(', ')}#{addrs.size > 8 ? ', ...' : ''}"
    end

    # Everything {Dump#referrers} names as holding the chunk's address, or "nothing".
    def held_by_text(refs)
      parts = []
      parts << list(refs[:pointed_at_by]) unless refs[:pointed_at_by].empty?
      unless refs[:integers].empty?
        parts << "as a Ruby Integer in #{refs[:integers].size} chunk(s): #{refs[:integers].first(8).join(', ')}"
      end
      parts.concat(Array(refs[:roots]).first(8).map { |r| "#{r[:name]} (the word at #{r[:where]})" })
      parts.concat(Array(refs[:objects]).first(8).map { |o| "the slot of #{o}" })
      unless Array(refs[:interior]).empty?
        parts << "into its middle from #{refs[:interior].size} chunk(s): #{refs[:interior].first(8).join(', ')}"
      end
      parts.concat(Array(refs[:interior_roots]).first(8).map do |r|
        "into its middle from #{r[:name]} (the word at #{r[:where]})"
      end)
      parts.empty? ? "nothing" : parts.join("; ")
    end

    # A Ruby object by its address, as the dump records it.
    def object_text(address)
      o = @dump.ruby&.object_at(address)
      o ? "#{o.type} #{o.class_name} at #{hex(address)}" : "the Ruby object at #{hex(address)}"
    end

    def heap_h(heap)
      { index: heap.index, kind: heap.kind, arena: heap.arena&.index, start: hex(heap.start), end: hex(heap.end) }
    end

    def chunk_h(chunk)
      off = @address - chunk.address
      flags = []
      flags << "a thread's tcache_perthread_struct" if chunk.tcache_struct?
      flags << "named by an anomaly" if chunk.anomaly?
      flags << "the arena's last_remainder" if chunk.flags.anybits?(ChunkFlags::LAST_REMAINDER)
      bin = @dump.bin_of(chunk)
      { address: hex(chunk.address), size: chunk.size, state: chunk.state, bin: bin&.to_s, bin_info: bin && bin_h(bin),
        tcache_tid: bin&.tid, user_address: hex(chunk.user_address), offset: off, flags: flags,
        where: off < 16 ? "in its header (byte #{off})" : "#{off - 16} B into its user data" }
    end

    def bin_h(bin)
      { kind: bin.kind, index: bin.index, min_size: bin.min_size, max_size: bin.max_size, tid: bin.tid,
        position: bin.position }
    end

    def owner_h(chunk)
      ruby = @dump.ruby
      return { text: "no Ruby data in this dump" } unless ruby

      o = ruby.owner_of(chunk)
      category = ruby.category_of(chunk)
      return { text: category.to_s, category: category } unless o

      type = o.imemo_type ? "#{o.type} (#{o.imemo_type})" : o.type.to_s
      { text: "#{type} #{o.class_name}#{o.data_type ? " (#{o.data_type})" : ''} at #{hex(o.address)}",
        category: category, type: o.type, imemo_type: o.imemo_type, class: o.class_name, data_type: o.data_type,
        object_address: hex(o.address) }
    end

    # Who keeps the chunk alive ({Dump#owner_kind_of}), and through what ({Dump#referrers}).
    def holder(chunk)
      case @dump.owner_kind_of(chunk)
      when :anchored then "anchored#{(a = @dump.anchor_of(chunk)) ? " by #{a}" : ''}"
      when :interior then interior_holder(chunk)
      when :leaked then "leaked: nothing reaches it"
      when :unknown then "not known: no root reaches it, and without Ruby objects in the dump a Ruby object may"
      when :ruby then ruby_holder(chunk)
      end
    end

    # What holds an :interior chunk: a root's word or a chunk's pointing into its middle.
    def interior_holder(chunk)
      refs = @dump.referrers(chunk)
      via = if (r = refs[:interior_roots].first) then "#{r[:name]} (the word at #{hex(r[:where])})"
            elsif (c = refs[:interior].find { |a| @dump.owner_kind_of(a) }) then "the chunk at #{hex(c)}"
            else "a chunk it is reached from"
            end
      anchor = @dump.anchor_of(chunk)
      "held (interior pointer) by #{via}#{anchor && !via.start_with?(anchor) ? ", reached from #{anchor}" : ''}"
    end

    # Which Ruby memory holds a :ruby chunk: its owner, a slot holding its address (or the Integer of
    # it), a Ruby-held chunk holding it as an Integer, or one pointing at it.
    def ruby_holder(chunk)
      owner = @dump.ruby&.owner_of(chunk)
      return "a Ruby object: #{object_text(owner.address)}, its owner" if owner

      refs = @dump.referrers(chunk)
      ruby_held = ->(a) { @dump.owner_kind_of(a) == :ruby }
      if (o = refs[:objects].first)
        "a Ruby object: the slot of #{object_text(o)} holds its address (or the Integer of it)"
      elsif (c = refs[:integers].find(&ruby_held))
        "a Ruby object: Ruby memory (the chunk at #{hex(c)}) holds its address as an Integer"
      elsif (c = refs[:chunks].find(&ruby_held))
        "a Ruby object: through the Ruby-held chunk at #{hex(c)}, which points at it"
      else
        "a Ruby object"
      end
    end

    # The path from a root to the Ruby object that owns the chunk (or to the object at the address):
    # who keeps it alive. Nil where no Ruby object is concerned.
    def kept_alive_by(chunk)
      ruby = @dump.ruby
      object = ruby && (chunk ? ruby.owner_of(chunk) : ruby.object_at(@address))
      return nil unless object
      return "not known: the dump has no object graph (#{@dump.no_graph_reason})" unless @dump.graph?

      @dump.path_to_root_text(object.address) || "nothing: no root reaches it (garbage awaiting the sweep)"
    end

    # Where the chunk's owner (or the Ruby object at the address) was allocated, when the dump has
    # allocation sites and traced it.
    def allocated_h(chunk)
      block = chunk && @dump.malloc_sites? && @dump.allocation_site_of(chunk.address + 16)
      return block if block
      return nil unless @dump.ruby && @dump.object_sites?

      object = chunk ? @dump.ruby.owner_of(chunk) : @dump.ruby.object_at(@address)
      site = object && @dump.allocation_site_of(object.address)
      site&.merge(object: chunk ? hex(object.address) : nil)
    end

    # The code the chunk is charged to (RubyHeap#code_charge_of), worded as the explorer's panel does.
    def code_h(chunk)
      code = @dump.ruby&.code_charge_of(chunk)
      return nil unless code

      text = if code[:kind] == :vm_table then "VM table #{code[:module]}"
             else
               "module #{code[:module] || '(anonymous)'}#{code[:method] ? ", method #{code[:method]}" : ''}" \
                 "#{code[:path] ? ", #{code[:path]}#{code[:line] ? ":#{code[:line]}" : ''}" : ''}"
             end
      code.merge(text: text)
    end

    def page_h(heap)
      pm = @dump.pages[heap.index]
      ps = @dump.header[:page_size]
      { address: hex(@address & ~(ps - 1)), residency: pm.state_at(@address), exclusive: pm.exclusive?(@address),
        sharing: pm.sharing_at(@address) }
    end

    def ruby_slot
      ruby = @dump.ruby
      page = ruby&.pages&.find { |p| (p.start...p.end).cover?(@address) }
      return nil unless page

      slot = (@address - page.start) / page.stride
      object = ruby.object_at(page.start + slot * page.stride)
      { page: "#{hex(page.start)}-#{hex(page.end)}", slot: slot,
        object: object && "#{object.type} #{object.class_name} at #{hex(object.address)}#{object.old ? ', old' : ''}" }
    end

    # What the chunk points at (the pointer graph's edges out of it), and everything that holds its
    # address as {Dump#referrers} finds it: chunks, chunks holding it as a Ruby Integer, roots (with
    # the word's address) and Ruby objects' slots.
    def references(chunk)
      held = @dump.referrers(chunk.address)
      refs = Render.explorer_data(@dump)[:refs]
      return nil if refs.empty? && !held

      index = chunk_index(chunk)
      out = []
      into = []
      refs.unpack("V*").each_slice(2) do |from, to|
        out << to if from == index
        into << from if to == index
      end
      address = ->(i) { hex(@dump.chunk_by_index(i).address) }
      return { points_at: out.map(&address), pointed_at_by: into.map(&address), integers: [] } unless held

      { points_at: out.map(&address), pointed_at_by: held[:chunks].map { |a| hex(a) },
        integers: held[:integers].map { |a| hex(a) },
        roots: held[:roots].map { |r| { name: r[:name], where: hex(r[:where]) } },
        objects: held[:objects].map { |a| object_text(a) }, interior: held[:interior].map { |a| hex(a) },
        interior_roots: held[:interior_roots].map { |r| { name: r[:name], where: hex(r[:where]) } } }
    end

    def chunk_index(chunk)
      before = @dump.heaps.take_while { |h| h.index != chunk.heap.index }.sum(&:chunk_count)
      lo = before
      hi = before + chunk.heap.chunk_count - 1
      while lo < hi
        mid = (lo + hi + 1) / 2
        if @dump.chunk_by_index(mid).address <= chunk.address then lo = mid
        else hi = mid - 1
        end
      end
      lo
    end
  end
end
