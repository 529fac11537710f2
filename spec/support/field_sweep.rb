# frozen_string_literal: true

require "json"
require "stringio"
require "tmpdir"
require "zlib"

# The field sweep over a real dump (spec/format_sweep_spec.rb runs it in a child process, so that a
# crash is a failed example rather than the end of the suite): one field of one record at a time is
# set to an edge value, the checksum recomputed, and every reader path run on the file.
module FieldSweep
  SECTION_HEADER = "LLQQ"

  # [field, directive] pairs: the u64 fields, then the u32 ones.
  def self.fields(u64, u32 = [])
    u64.map { |f| [f, "Q"] } + u32.map { |f| [f, "L"] }
  end

  # Record layouts of format.h, field by field (pack directives, little-endian).
  LAYOUTS = {
    1 => ["meta", fields(%w[pid ppid time_sec time_nsec page_size main_arena mp_addr libc_base sbrk_base heap_max_size
                            mmap_threshold trim_threshold top_pad arena_max arena_test n_mmaps mmapped_mem
                            max_mmapped_mem tcache_bins tcache_count tcache_max_bytes walk_ns residency_ns
                            lock_wait_ns],
                         %w[symbol_source residency_source glibc_major glibc_minor flags thread_count])],
    3 => ["mallinfo2", fields(%w[arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost])],
    5 => ["arena", fields(%w[address top top_size last_remainder system_mem max_system_mem next next_free
                             attached_threads],
                          %w[flags glibc_flags first_heap n_heaps])],
    6 => ["heap", fields(%w[start end reserved_end prev mprotect_size first_chunk n_chunks first_page n_pages page_base],
                         %w[arena kind flags reserved])],
    7 => ["chunk", [%w[word Q]]],
    8 => ["page", [%w[flags C]]],
    9 => ["thread", fields(%w[pthread tcache arena tcache_bytes], %w[tid flags tcache_count reserved])],
    10 => ["anomaly", [%w[address Q], %w[detail Q], %w[kind L], %w[arena L]]],
    11 => ["ruby_meta", fields(%w[heap_allocated_pages heap_live_slots heap_free_slots total_allocated_objects pass_ns
                                  refs_ns],
                               %w[flags heap_tomb_pages])],
    12 => ["ruby_page", [%w[start Q], %w[end Q], %w[stride L], %w[total L], %w[live L], %w[free L], %w[reserved Q]]],
    13 => ["ruby_object",
           [%w[address Q], %w[klass L], %w[data_type L], %w[type C], %w[subtype C], %w[n_words S], %w[flags L]]],
    14 => ["ruby_word", [%w[word Q]]],
    16 => ["ref", [%w[from L], %w[to L]]],
    17 => ["trim_check", [%w[released Q]]],
    18 => ["mapping", fields(%w[start end rss private_bytes shared_bytes swap anonymous offset inode],
                             %w[path_off path_len prot kind])],
    19 => ["gc", fields(%w[count major_gc_count minor_gc_count total_allocated_objects total_freed_objects old_objects
                           old_objects_limit heap_live_slots malloc_increase_bytes oldmalloc_increase_bytes time_ms],
                        %w[flags reserved])],
    22 => ["ruby_code", [%w[address Q], %w[module L], %w[method L], %w[path L], %w[line L], %w[kind L], %w[reserved L]]],
    23 => ["ruby_page_rss", [%w[bytes Q]]],
    42 => ["ruby_graph", fields(%w[graph_ns dropped_edges named_limit], %w[flags reserved])],
    43 => ["ruby_edge_count", [%w[count L]]],
    44 => ["ruby_edge", [%w[object L]]],
    45 => ["ruby_root", fields([], %w[object category name flags])],
    46 => ["ruby_edge_name", fields([], %w[edge kind detail reserved])],
    47 => ["alloc_trace", fields(%w[every seen sampled dropped started_ns], %w[max_frames reserved])],
    48 => ["ruby_stack", fields([], %w[first n_frames])],
    49 => ["ruby_frame", fields([], %w[path label owner line])],
    50 => ["ruby_traced", fields(%w[address], %w[stack reserved])],
    # the regions past the first two are laid out (a name with "_" first) but not swept
    52 => ["native_track", fields(%w[mean_bytes started_ns sampled freed dropped]) +
      fields([], %w[flags pid n_regions reserved]) +
      fields((0...16).flat_map do |i|
        %w[start length resident].map { |f| "#{i < 2 ? '' : '_'}region#{i}_#{f}" }
      end)],
    53 => ["native_sample", fields(%w[address size], %w[stack reserved])],
    54 => ["native_stack", fields([], %w[first_pc n_pcs first_frame n_frames])],
    55 => ["native_pc", [%w[pc Q]]],
    56 => ["native_frame", fields([], %w[path label owner line])],
    58 => ["inner_ref", [%w[from L], %w[to L]]],
    59 => ["root_inner_ref", fields(%w[where], %w[root chunk])],
    60 => ["scratch", fields(%w[start length resident])]
  }.freeze
  # Sections whose records follow a fixed head: the head's layout (swept as one record).
  HEADS = {
    18 => ["mappings_head", fields(%w[vm_rss rss_anon rss_file rss_shmem read_ns paths_len], %w[flags error_kib])]
  }.freeze
  SIZES = { "Q" => 8, "L" => 4, "S" => 2, "C" => 1 }.freeze

  module_function

  # The sections of a dump file: [type, count, payload offset, length].
  def sections(bytes)
    off = 16
    body = bytes.bytesize - 56
    list = []
    while off < body
      type, _, count, length = bytes.byteslice(off, 24).unpack(SECTION_HEADER)
      list << [type, count, off + 24, length]
      off += 24 + ((length + 7) & ~7)
    end
    list
  end

  # The byte offset and size of every field of the first two records of every known section.
  def fields(bytes)
    sections(bytes).flat_map do |type, count, payload, _|
      name, layout = LAYOUTS[type]
      next [] unless name

      head = HEADS[type] && record_fields(*HEADS[type], payload, 0, 1)
      payload += HEADS[type][1].sum { |_, d| SIZES[d] } if head
      (head || []) + (0...[count, 2].min).flat_map { |r| record_fields(name, layout, payload, r, count) }
    end
  end

  def record_fields(name, layout, payload, r, count)
    rec_size = layout.sum { |_, d| SIZES[d] }
    pos = payload + r * rec_size
    layout.filter_map do |field, d|
      at = pos
      pos += SIZES[d]
      next if field.start_with?("_")

      { where: "#{name}[#{r}].#{field}", at: at, size: SIZES[d], directive: d, next_at: r + 1 < count ? at + rec_size : nil }
    end
  end

  # Edge values for one field: 0, 1, the largest, one less and one more than its value, and the same
  # field of the next record off by one.
  def values(bytes, field)
    directive = field[:directive] == "C" ? "C" : "#{field[:directive]}<"
    read = ->(at) { bytes.byteslice(at, field[:size]).unpack1(directive) }
    max = (1 << (8 * field[:size])) - 1
    value = read.call(field[:at])
    candidates = [0, 1, max, value - 1, value + 1]
    if field[:next_at]
      neighbour = read.call(field[:next_at])
      candidates += [neighbour - 1, neighbour, neighbour + 1]
    end
    candidates.map { |x| x & max }.uniq - [value]
  end

  def with_value(bytes, field, value)
    out = bytes.dup
    packed = field[:directive] == "C" ? [value].pack("C") : [value].pack("#{field[:directive]}<")
    out[field[:at], field[:size]] = packed
    body = out.bytesize - 56
    out[out.bytesize - 8, 4] = [Zlib.crc32(out.byteslice(0, body))].pack("L<")
    out
  end

  # Every reader path over `path`: load, summary, verify, analysis, text and JSON summaries, the report,
  # and through the command line --summary, --json, render, --diff and --compare against `original`.
  def read_everything(path, original, dir)
    dump = PtmallocDump.load(path)
    dump.summary
    dump.verify.to_s
    dump.analysis
    dump.each_chunk.count
    dump.ruby&.summary
    dump.retainers.each { |r| dump.path_to_root(r[:address]) } if dump.graph?
    dump.allocation_sites.each { |site| site[:frames].size } if dump.allocation_sites?
    dump.traced_objects.first(20).map(&:first).each { |a| dump.allocation_site_of(a) } if dump.allocation_sites?
    PtmallocDump::TextSummary.new(dump).to_s
    JSON.generate(PtmallocDump::JsonSummary.new(dump).to_h)
    [["--summary", path], ["--json", path], ["--retainers", path], [path, File.join(dir, "render")],
     ["--diff", "--force", original, path, File.join(dir, "diff")],
     ["--compare", original, path, File.join(dir, "compare")]].each do |argv|
      err = StringIO.new
      status = catch(:done) { PtmallocDump::VisualizeCLI.new(argv, out: StringIO.new, err: err).run } || 0
      unless status.zero? || err.string.lines.size == 1
        raise "ptmalloc-visualize #{argv.first}: exit #{status}: #{err.string}"
      end
    end
    :read
  end

  # Runs the sweep over the dump at `original`; returns counts and the unexpected exceptions. Each
  # case is written to `progress` before it is tried, so that a crash can be traced to it.
  def run(original, progress)
    require "ptmalloc_dump/visualize_cli"
    bytes = File.binread(original)
    stats = { files: 0, read: 0, format_errors: 0, unexpected: [] }
    Dir.mktmpdir("ptmd-sweep") do |tmp|
      fields(bytes).each do |field|
        values(bytes, field).each do |value|
          stats[:files] += 1
          File.write(progress, "#{field[:where]} = #{value}")
          path = File.join(tmp, "mutated.dump")
          File.binwrite(path, with_value(bytes, field, value))
          Dir.mktmpdir("out", tmp) do |dir|
            stats[:read] += 1 if read_everything(path, original, dir) == :read
          rescue PtmallocDump::FormatError
            stats[:format_errors] += 1
          rescue StandardError => e
            stats[:unexpected] << "#{field[:where]} = #{value}: #{e.class}: #{e.message.lines.first&.chomp} (#{e.backtrace&.first})"
          end
        end
      end
    end
    stats
  end
end
