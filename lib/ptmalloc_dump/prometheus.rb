# frozen_string_literal: true

module PtmallocDump
  # {PtmallocDump.stats} in Prometheus' text exposition format (version 0.0.4).
  module Prometheus
    MALLOC = {
      arena: "heap: bytes the arenas have from the system (mallinfo2 arena)",
      uordblks: "in use: bytes in allocated chunks (mallinfo2 uordblks)",
      fordblks: "free: bytes in free chunks, resident unless trimmed (mallinfo2 fordblks)",
      hblkhd: "bytes in mmapped chunks (mallinfo2 hblkhd)",
      keepcost: "bytes at the top of the main arena that malloc_trim could release (mallinfo2 keepcost)"
    }.freeze
    COUNTS = { ordblks: "free chunks (mallinfo2 ordblks)", hblks: "mmapped chunks (mallinfo2 hblks)" }.freeze

    class << self
      # @param reading [Hash] a {PtmallocDump.stats} reading
      # @param prefix [String] prepended to every metric name
      # @return [String]
      def text(reading, prefix: "ptmalloc")
        out = +""
        MALLOC.each { |k, help| gauge(out, "#{prefix}_malloc_#{k}_bytes", help, [[nil, reading[:malloc][k]]]) }
        COUNTS.each { |k, help| gauge(out, "#{prefix}_malloc_#{k}", help, [[nil, reading[:malloc][k]]]) }
        gauge(out, "#{prefix}_arenas", "arenas on main_arena's ring", [[nil, reading[:arenas].size]])
        arenas = reading[:arenas].each_with_index.map { |a, i| [{ arena: i }, a[:system_mem]] }
        gauge(out, "#{prefix}_arena_system_bytes", "bytes each arena has from the system (malloc_state system_mem)",
              arenas)
        rss = reading[:rss].map { |part, bytes| [{ part: part }, bytes] }
        gauge(out, "#{prefix}_rss_bytes", "resident memory and its parts (/proc/self/status, smaps_rollup)", rss)
        gc = reading[:gc]
        gauge(out, "#{prefix}_ruby_heap_pages", "Ruby heap pages (GC.stat heap_allocated_pages)",
              [[nil, gc[:heap_allocated_pages]]])
        gauge(out, "#{prefix}_ruby_live_slots", "live Ruby objects (GC.stat heap_live_slots)",
              [[nil, gc[:heap_live_slots]]])
        gauge(out, "#{prefix}_ruby_free_slots", "free object slots (GC.stat heap_free_slots)",
              [[nil, gc[:heap_free_slots]]])
        out
      end

      private

      def gauge(out, name, help, samples)
        out << "# HELP #{name} #{help}\n# TYPE #{name} gauge\n"
        samples.each do |labels, value|
          next if value.nil?

          label = labels&.map { |k, v| %(#{k}="#{escape(v.to_s)}") }&.join(",")
          out << name << (label ? "{#{label}}" : "") << " " << value.to_s << "\n"
        end
      end

      # A label value as the format quotes it: backslash, double quote and newline escaped.
      def escape(value)
        value.gsub(/[\\"\n]/) { |c| c == "\n" ? "\\n" : "\\#{c}" }
      end
    end
  end
end
