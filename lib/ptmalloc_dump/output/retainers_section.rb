# frozen_string_literal: true

require "cgi"
require_relative "../format_helpers"

module PtmallocDump
  # The report's "Who keeps it alive" section: the holders that retain the most malloc memory, each
  # with its path from the roots, and an icicle of the dominator tree (each bar an object, as wide as
  # what it alone keeps alive, below the object that alone keeps it alive). Without a graph, why not.
  class RetainersSection
    include FormatHelpers

    WIDTH = 1100
    ROW = 22
    DEPTH = 8     # rows of the icicle
    SHARE = 0.004 # of the retained total: smaller objects are not drawn

    # @param dump [Dump]
    def initialize(dump)
      @dump = dump
    end

    # @return [String] the section's HTML
    def html
      return absent unless @dump.graph?

      list = @dump.retainers(limit: 20)
      <<~HTML
        <h2 id="retainers">Who keeps it alive</h2>
        <p>What each holder alone keeps alive: the malloc memory owned by every object that no root
        reaches except through it (its dominator subtree), with its own. Freeing the holder, or emptying
        it, gives that back.</p>
        <table><tr><th>retained</th><th>objects</th><th class="l">holder</th><th class="l">path from the roots</th></tr>
        #{list.map { |r| row(r) }.join("\n")}</table>
        #{icicle}
      HTML
    end

    private

    def absent
      <<~HTML
        <h2 id="retainers">Who keeps it alive</h2>
        <p class="warn">Not known for this dump: #{h(@dump.no_graph_reason)}. A fork snapshot records the object graph
        by default (<code>PtmallocDump.dump(path, fork: true)</code>, the signal handler); in process pass
        <code>graph: true</code>.</p>
      HTML
    end

    def row(r)
      "<tr><td>#{h(human_bytes(r[:retained_bytes]))}</td><td>#{h(count(r[:retained_objects]))}</td>" \
        "<td class=\"l\"><b>#{h(r[:root])}</b> (#{h(r[:class_name])})</td>" \
        "<td class=\"l\">#{h(r[:path].join(' › '))}</td></tr>"
    end

    # The dominator tree's large nodes, laid out depth by depth from the roots.
    def icicle
      nodes = tree
      return "" if nodes.empty?

      total = nodes.select { |n| n[:depth].zero? }.sum { |n| n[:retained_bytes] }
      bars = nodes.filter_map { |n| bar(n, total) }
      height = (nodes.map { |n| n[:depth] }.max + 1) * ROW
      <<~HTML
        <h3>Retained memory by holder</h3>
        <p class="sub">each bar an object, as wide as what it alone keeps alive, below the object that alone keeps it
        alive; top row: objects only the roots keep alive</p>
        <svg class="icicle" width="#{WIDTH}" height="#{height}" viewBox="0 0 #{WIDTH} #{height}" role="img"
        aria-label="retained memory by holder">#{bars.join}</svg>
      HTML
    end

    def bar(node, total)
      w = (WIDTH * node[:retained_bytes].to_f / total)
      return nil if w < 2

      x = WIDTH * node[:offset].to_f / total
      label = "#{w > 60 ? "#{@dump.retainer_name(node[:address])} " : ''}(#{node[:class_name]}) " \
              "#{human_bytes(node[:retained_bytes])}"
      fits = ((w - 6) / 7).floor # characters of about 7 px
      shown = label.size > fits ? "#{label[0, fits - 1]}…" : label
      text = w > 60 ? %(<text x="#{format('%.1f', x + 3)}" y="#{node[:depth] * ROW + 15}">#{h(shown)}</text>) : ""
      %(<g><title>#{h(label)} (#{h(count(node[:retained_objects]))} objects)</title>) +
        %(<rect x="#{format('%.1f', x)}" y="#{node[:depth] * ROW}" width="#{format('%.1f', w - 1)}" ) +
        %(height="#{ROW - 2}" fill="#{color(node[:depth])}"></rect>#{text}</g>)
    end

    def color(depth)
      %w[#4e79a7 #59a14f #edc948 #f28e2b #e15759 #b07aa1 #76b7b2 #9c755f][depth % 8]
    end

    # Nodes with their depth and horizontal offset (in bytes), children in order of size.
    def tree
      min = [@dump.summary[:in_use_bytes] * SHARE, 4096].max.to_i
      nodes = @dump.dominator_tree(min_bytes: min, cap: 4000)
      children = nodes.group_by { |n| n[:parent_index] }
      placed = []
      layout(children[nil] || [], 0, 0, children, placed)
      placed
    end

    def layout(siblings, depth, offset, children, placed)
      return if depth >= DEPTH

      siblings.sort_by { |n| -n[:retained_bytes] }.each do |n|
        placed << n.merge(depth: depth, offset: offset)
        layout(children[n[:index]] || [], depth + 1, offset, children, placed)
        offset += n[:retained_bytes]
      end
    end
  end
end
