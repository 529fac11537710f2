# frozen_string_literal: true

require "open3"
require "tmpdir"

# Measures glibc's malloc structures in Debian's libc6-dbg packages, for any architecture, and checks
# them against the layout table the walker uses (ext/ptmalloc_dump/capture/layout.c and
# capture/arch.h): every offset and size the table gives is read from the package's DWARF by
# gdb-multiarch, without running anything of that architecture.
#
#   ruby script/glibc_layouts.rb libc6-dbg_2.36-9+deb12u14_arm64.deb ...
#
# Needs dpkg-deb, readelf and gdb-multiarch (apt-get install gdb-multiarch). Prints one line per
# package, and each field that differs; exits 1 if any does.
module GlibcLayouts
  ROOT = File.expand_path("..", __dir__)
  ARCHES = { "AArch64" => "aarch64", "Advanced Micro Devices X86-64" => "x86-64" }.freeze

  # The table's fields: its prefix and member names per C struct (the member's name where the field's
  # differs, the struct's size for the *_size field, several names where glibc renamed the member).
  def self.fields(type, prefix, names, renamed = {}, size: "size")
    names.to_h { |n| ["#{prefix}#{n}", [type, n]] }
         .merge(renamed.to_h { |field, member| ["#{prefix}#{field}", [type, member]] })
         .merge("#{prefix}#{size}" => [type, nil])
  end
  FIELDS = {
    **fields("struct malloc_state", "ms_",
             %w[mutex flags have_fastchunks top last_remainder bins binmap next next_free attached_threads system_mem
                max_system_mem], { "fastbins" => "fastbinsY" }),
    **fields("struct malloc_par", "mp_",
             %w[trim_threshold top_pad mmap_threshold arena_test arena_max hp_pagesize n_mmaps n_mmaps_max max_n_mmaps
                no_dyn_threshold mmapped_mem max_mmapped_mem sbrk_base tcache_max_bytes tcache_count
                tcache_unsorted_limit],
             { "tcache_bins" => %w[tcache_bins tcache_small_bins] }),
    **fields("struct _heap_info", "hi_", %w[ar_ptr prev size mprotect_size pagesize], size: "size_total"),
    **fields("struct tcache_perthread_struct", "tcache_", [], { "entries_off" => "entries" }, size: "struct_size"),
    "pthread_list" => ["struct pthread", "list"]
  }.freeze
  # arch.h's and threads.c's offsets from struct pthread's `list`: tid, robust_head.futex_offset
  FROM_LIST = { "pthread_list+16" => "tid", "pthread_list+40" => "robust_head.futex_offset" }.freeze

  module_function

  def main(debs)
    abort "usage: ruby script/glibc_layouts.rb LIBC6_DBG_DEB..." if debs.empty?
    table = LayoutTable.load
    bad = debs.sum { |deb| check(deb, table) }
    exit(bad.zero? ? 0 : 1)
  end

  def check(deb, table)
    minor = Integer(File.basename(deb)[/libc6-dbg_2\.(\d+)/, 1] || abort("#{deb}: not a libc6-dbg package"))
    Dir.mktmpdir("glibc-layouts") do |dir|
      run!("dpkg-deb", "-x", deb, dir)
      libc = libc_debug_file(dir) || abort("#{deb}: no libc debug file (none defines main_arena)")
      arch = machine(libc)
      want = table.for(minor, arch)
      got = measure(libc, want.keys)
      diffs = want.reject { |field, value| got[field] == value }
      puts format("%-44s %-7s glibc 2.%d: %d fields, %s", File.basename(deb), arch, minor, want.size,
                  diffs.empty? ? "all as the table has them" : "#{diffs.size} differ")
      diffs.each { |field, value| puts "  #{field}: table #{value.inspect}, DWARF #{got[field].inspect}" }
      diffs.size
    end
  end

  def libc_debug_file(dir)
    files = Dir.glob(File.join(dir, "usr/lib/debug/**/*"), File::FNM_DOTMATCH)
    files.select { |f| File.file?(f) && File.size(f) > 1 << 20 }.find do |f|
      out, = Open3.capture2("readelf", "-sW", f, err: File::NULL)
      out.match?(/\smain_arena$/)
    end
  end

  def machine(file)
    out = run!("readelf", "-h", file)
    ARCHES.fetch(out[/Machine:\s+(.*)$/, 1].strip)
  end

  # Each field's offset (or the struct's size) from the DWARF; nil where the member does not exist.
  # gdb: gdb-multiarch for any architecture's file, or the system's gdb for its own libc.
  def measure(file, fields, gdb: "gdb-multiarch")
    exprs = fields.flat_map { |f| expressions(f).map { |e| [f, e] } }
    args = exprs.flat_map { |_f, e| ["-ex", "echo @@\\n", "-ex", "print/d #{e}"] }
    out, = Open3.capture2e(gdb, "-nx", "-batch", file, *args)
    values = out.split("@@\n").drop(1).map { |chunk| chunk[/\A\$\d+ = (-?\d+)/, 1]&.to_i }
    exprs.zip(values).each_with_object({}) { |((field, _e), v), h| h[field] = v if v || !h.key?(field) }
  end

  def expressions(field)
    tc = "((struct tcache_perthread_struct *)0)"
    pt = "((struct pthread *)0)"
    return ["(long)&#{pt}->#{FROM_LIST[field]} - (long)&#{pt}->list"] if FROM_LIST.key?(field)
    return ["sizeof(#{tc}->entries) / sizeof(void *)"] if field == "tcache_entries"
    return ["sizeof(#{tc}->counts[0])", "sizeof(#{tc}->num_slots[0])"] if field == "tcache_count_width"

    type, member = FIELDS.fetch(field)
    return ["sizeof(#{type})"] if member.nil?

    Array(member).map { |m| "(long)&((#{type} *)0)->#{m}" }
  end

  def run!(*cmd)
    out, err, status = Open3.capture3(*cmd)
    abort "#{cmd.join(' ')}: #{err}" unless status.success?
    out
  end

  # The values layout.c and arch.h give one glibc version on one architecture.
  class LayoutTable
    def self.load
      new(File.read(File.join(ROOT, "ext/ptmalloc_dump/capture/layout.c")),
          File.read(File.join(ROOT, "ext/ptmalloc_dump/capture/arch.h")))
    end

    def initialize(layout_c, arch_h)
      @macros = layout_c.scan(/^#define (\w+)[ \t]+((?:[^\n]*\\\n)*[^\n]*)$/).to_h do |name, body|
        [name, body.scan(/\.(\w+) = (PTMD_NONE|PTMD_PTHREAD_LIST|\d+)/).to_h]
      end
      entry = /\{ \.minor_from = (\d+),\s*\.minor_to = (\d+),\s*((?:[A-Z_0-9]+,\s*)+)/m
      @entries = layout_c.scan(entry).map do |from, to, names|
        [Integer(from)..Integer(to), names.scan(/[A-Z][A-Z_0-9]+/)]
      end
      @pthread_list = { "x86-64" => Integer(arch_h[/__x86_64__.*?PTMD_PTHREAD_LIST (0x\h+)/m, 1]),
                        "aarch64" => Integer(arch_h[/__aarch64__.*?PTMD_PTHREAD_LIST (0x\h+)/m, 1]) }
    end

    def for(minor, arch)
      _range, names = @entries.find { |range, _| range.cover?(minor) } || abort("layout.c has no entry for 2.#{minor}")
      values = names.map { |n| @macros.fetch(n) { {} } }.reduce({}, :merge)
      want = values.slice(*FIELDS.keys).transform_values do |v|
        case v
        when "PTMD_NONE" then nil # a member this version lacks: gdb must not find it either
        when "PTMD_PTHREAD_LIST" then @pthread_list.fetch(arch)
        else Integer(v)
        end
      end
      want["tcache_entries"] = Integer(values.fetch("tcache_bins")) + Integer(values.fetch("tcache_large_bins"))
      want["tcache_count_width"] = Integer(values.fetch("tcache_count_width"))
      FROM_LIST.each_key { |field| want[field] = Integer(field[/\d+\z/]) }
      want
    end
  end
end

GlibcLayouts.main(ARGV) if $PROGRAM_NAME == __FILE__
