# frozen_string_literal: true

module PtmallocDump
  # One line per holder, as the text summary and `--retainers` print it.
  module RetainerLines
    # @param r [Hash] an entry of {Dump#retainers}
    # @return [String] "30 MiB retained by Cache::STORE (Hash, 80,000 objects)"
    def self.line(r)
      objects = FormatHelpers.count(r[:retained_objects])
      "#{FormatHelpers.human_bytes(r[:retained_bytes])} retained by #{r[:root]} (#{r[:class_name]}, " \
        "#{objects} object#{r[:retained_objects] == 1 ? '' : 's'})"
    end
  end

  # Who keeps Ruby's memory alive, from the object graph a dump recorded (`graph: true`): the
  # dominator tree over every live object below one super-root above all roots, so that what an object
  # retains is what would be freed with it: the malloc chunks owned by every object it dominates (the
  # dump's exact attribution), their slots and their count.
  class Dump
    # How many steps of a path {#retainers} names before it elides the middle.
    PATH_STEPS = 8

    # @return [Boolean] whether the dump holds the Ruby object graph
    def graph?
      _graph?
    end

    # The holders that keep the most malloc memory alive, each named as a user would write it.
    #
    # A holder retains bytes none of its dominated objects retains most of: in a chain of objects each
    # holding nearly all of the one before (a constant's module, its Hash), the deepest is named; an
    # object whose bytes are mostly other listed holders' is left out for them.
    #
    # @param limit [Integer] at most this many
    # @return [Array<Hash>] largest first: :root (the name of the root and path, "Cache::STORE",
    #   "$handlers", "Registry.@instance"), :path (the steps from the root, each "edge (Class)"),
    #   :class_name, :type, :address, :retained_bytes (malloc chunks), :retained_slot_bytes,
    #   :retained_objects
    # @raise [NoGraphError] when the dump has no object graph
    def retainers(limit: 20)
      require_graph
      _holders(limit).map { |i| retainer(i) }
    end

    # A shortest path from a root to an object, root first.
    #
    # @param address [Integer] an object's address (its VALUE, ObjectSpace.dump's "address")
    # @return [Array<Hash>, nil] each step :address, :class_name, :type and :edge (how the step
    #   before reaches it: "@items", "[3]", "STORE", "\"key\"", or nil where Ruby keeps no name); the
    #   first step has :root (the GC's category, "vm", "global_tbl", "machine_context", ...) and
    #   :global (the global variable's name, if one holds it); nil when no root reaches the object
    # @raise [NoGraphError] when the dump has no object graph
    # @raise [ArgumentError] when no recorded object has that address
    def path_to_root(address)
      steps = raw_path(object_index(address))
      steps && describe_path(steps)
    end

    # Who keeps an object alive, as `--explain` says it: the steps of {#path_to_root}, each named.
    #
    # @param address [Integer] an object's address
    # @return [String, nil] "(vm) > Object (Class) > Cache (Module) > STORE (Hash) > [\"k\"] (String)";
    #   nil when no root reaches the object
    # @raise [NoGraphError] when the dump has no object graph
    # @raise [ArgumentError] when no recorded object has that address
    def path_to_root_text(address)
      steps = raw_path(object_index(address))
      steps && path_text(describe_path(steps)).join(" > ")
    end

    # What an object retains.
    #
    # @param address [Integer] an object's address
    # @return [Hash, nil] :retained_bytes, :retained_slot_bytes, :retained_objects; nil when no root
    #   reaches it (garbage awaiting the sweep)
    # @raise [NoGraphError] when the dump has no object graph
    # @raise [ArgumentError] when no recorded object has that address
    def retained_by(address)
      figures = _retained(object_index(address))
      figures && %i[retained_bytes retained_slot_bytes retained_objects].zip(figures).to_h
    end

    # What an object references, as the GC marks it, with the names Ruby keeps.
    #
    # @param address [Integer] an object's address
    # @return [Array<Hash>] :address, :class_name, :type, :edge
    def references_of(address)
      require_graph
      _references(object_index(address)).map { |i, kind, detail| step(i, kind, detail) }
    end

    # The roots of the object graph: the objects the GC marks without any object referencing them.
    #
    # @return [Array<Hash>] :address, :class_name, :type, :category (the GC's name: "vm",
    #   "global_tbl", "global_list" for addresses registered from C, "machine_context" for a word on a
    #   machine stack or in saved registers that looks like a reference, ...), :global (the global
    #   variable's name, if one holds it)
    # @raise [NoGraphError] when the dump has no object graph
    def graph_roots
      require_graph
      _graph_roots.map do |i, category, global|
        object = ruby.object(i)
        { address: object.address, class_name: object.class_name, type: object.type, category: ruby.name(category),
          global: global && ruby.name(global) }
      end
    end

    # The dominator tree's large nodes: every object that retains at least `min_bytes` (the objects
    # that dominate it do too, so they form a tree below the roots).
    #
    # @param min_bytes [Integer]
    # @param cap [Integer] at most this many nodes
    # @return [Array<Hash>] :address, :parent (the address of the object that dominates it, nil below
    #   the roots), :class_name, :type, :retained_bytes, :retained_objects, :edge (how its path from the
    #   roots reaches it)
    # @raise [NoGraphError] when the dump has no object graph
    def dominator_tree(min_bytes:, cap: 2000)
      require_graph
      _dominator_tree(min_bytes, cap).map do |i, parent, bytes, objects|
        object = ruby.object(i)
        { index: i, parent_index: parent, address: object.address, parent: parent && ruby.object(parent).address,
          class_name: object.class_name, type: object.type, retained_bytes: bytes, retained_objects: objects }
      end
    end

    # The name {#retainers} would give an object as a holder: its root and path as a person would
    # write them ("Cache::STORE", "$handlers", "Registry.@instance").
    #
    # @param address [Integer] an object's address
    # @return [String, nil] nil when no root reaches it
    def retainer_name(address)
      steps = raw_path(object_index(address))
      steps && root_name(describe_path(steps))
    end

    # @return [Hash, nil] the graph's own figures: :edges, :roots, :edge_names, :dropped_edges (references
    #   to objects the Ruby pass did not record), :graph_ns (its capture), :named_limit, :flags; nil
    #   without a graph
    def graph_meta
      _graph_meta&.then { |m| m.merge(flags: Format::GRAPH_FLAGS.select { |_, bit| m[:flags].anybits?(bit) }.keys) }
    end

    # @return [String, nil] why the dump has no object graph, nil when it has one
    def no_graph_reason
      return nil if graph?

      strings = header[:strings]
      return strings["graph_reason"] unless strings["graph_reason"].to_s.empty?
      return "the dump has no Ruby heap data: #{no_ruby_reason}" unless ruby

      if strings.key?("graph") then "the object graph was not recorded"
      elsif header[:source] != :self then "a dump from outside the process or of a core has no object graph"
      else "it was written without graph: true (in process, graph: :auto leaves it out)"
      end
    end

    private

    def require_graph
      raise NoGraphError, "this dump has no object graph: #{no_graph_reason}" unless graph?
    end

    def object_index(address)
      require_graph
      ruby.object_at(Integer(address))&.index or
        raise ArgumentError, format("no Ruby object at 0x%x in this dump", address)
    end

    def raw_path(index)
      _path(index)
    end

    def retainer(index)
      steps = describe_path(raw_path(index))
      holder = steps.last
      bytes, slot_bytes, objects = _retained(index)
      { root: root_name(steps), path: path_text(steps), class_name: holder[:class_name], type: holder[:type],
        address: holder[:address], retained_bytes: bytes, retained_slot_bytes: slot_bytes,
        retained_objects: objects }
    end

    def describe_path(path)
      (category, global), *steps = path
      described = steps.map { |i, kind, detail| step(i, kind, detail) }
      described.first.merge!(root: ruby.name(category), global: global && ruby.name(global))
      described
    end

    def step(index, kind, detail)
      object = ruby.object(index)
      { address: object.address, class_name: object.class_name, type: object.type, edge: edge_text(kind, detail),
        edge_kind: kind, module_name: module_names[object.address] }
    end

    def edge_text(kind, detail)
      case kind
      when :ivar, :constant then ruby.name(detail)
      when :index, :key_integer then "[#{detail}]"
      when :key_symbol, :thread_local then "[:#{ruby.name(detail)}]"
      when :stack then "stack"
      when :key_string then "[#{ruby.name(detail).inspect}]"
      end
    end

    def module_names
      @module_names ||= _module_names
    end

    # "Cache::STORE" for a holder reached through constants, "$name" for one a global holds,
    # "Registry.@instance" for a module's instance variable, else the root's category and the last
    # named step.
    def root_name(steps)
      return steps.first[:global] if steps.size == 1 && steps.first[:global]
      return steps.last[:module_name] if steps.last[:module_name] && steps.last[:edge_kind] != :constant

      stack = steps.index { |s| s[:edge_kind] == :stack }
      if stack&.positive?
        return format("a frame or stack of %s 0x%x", steps[stack - 1][:class_name], steps[stack - 1][:address])
      end

      constants = []
      i = steps.size - 1
      while i.positive? && steps[i][:edge_kind] == :constant
        constants.unshift(steps[i][:edge])
        i -= 1
      end
      return qualified(steps[i], constants) unless constants.empty?

      last = steps[-1]
      owner = steps[-2]
      if last[:edge_kind] == :thread_local
        thread = steps[0...-1].reverse.find { |s| s[:class_name] == "Thread" } || owner
        return format("Thread#%s of thread 0x%x", last[:edge], thread[:address])
      end

      if last[:edge_kind] == :ivar && owner
        separator = owner[:module_name] ? "." : "#"
        return "#{owner[:module_name] || owner[:class_name]}#{separator}#{last[:edge]}"
      end
      start = steps.first[:global] || "(#{steps.first[:root]})"
      named = steps.reverse.find { |s| s[:edge] }
      named ? "#{start}…#{named[:edge]}" : start
    end

    def qualified(owner, constants)
      prefix = owner[:module_name]
      prefix = nil if prefix == "Object"
      [prefix, *constants].compact.join("::")
    end

    def path_text(steps)
      texts = steps.map do |s|
        name = s[:edge] || s[:module_name]
        name ? "#{name} (#{s[:class_name]})" : "(#{s[:class_name]})"
      end
      first = steps.first[:global] || "(#{steps.first[:root]})"
      texts.unshift(first)
      texts = texts.first(2) + ["…"] + texts.last(PATH_STEPS - 3) if texts.size > PATH_STEPS
      texts
    end
  end
end
