# frozen_string_literal: true

require "zlib"

# What the specs know about this process's glibc without asking the gem: from glibc's own behaviour,
# readelf and /proc. Where libc's debug symbols (libc6-dbg) are not installed, these facts are the
# oracles for main_arena and mp_, and a symbol file is made from them so that the symbol-file lookup
# (build-id, .gnu_debuglink, its CRC) is still exercised.
module LibcFacts
  extend SpecHelpers

  LIB = Fiddle.dlopen(build_fixture("libc_facts"))
  UNSORTED_BIN = Fiddle::Function.new(LIB["libc_facts_unsorted_bin"], [], Fiddle::TYPE_UINTPTR_T)
  TLS_OFFSETS = Fiddle::Function.new(LIB["libc_facts_tls_offsets"], [Fiddle::TYPE_UINTPTR_T, Fiddle::TYPE_VOIDP],
                                     Fiddle::TYPE_INT)
  MALLOPT = Fiddle::Function.new(Fiddle::Handle::DEFAULT["mallopt"], [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
  # mallopt parameters and the values the mp_ probe sets (malloc.h); the first three fields of
  # struct malloc_par, in this order, in every glibc since 2.26
  M_TRIM_THRESHOLD = -1
  M_TOP_PAD = -2
  M_MMAP_THRESHOLD = -3
  PROBE = [0x1357_9000, 0x0246_8000, 0x01ab_c000].freeze

  module_function

  def libc_path
    @libc_path ||= File.foreach("/proc/self/maps").map { |l| l.split[5] }.compact
                       .find { |p| File.basename(p) =~ /\Alibc(\.so\.6|-[\d.]+\.so)\z/ }
  end

  def glibc_version
    @glibc_version ||= Gem::Version.new(Fiddle::Function.new(Fiddle::Handle::DEFAULT["gnu_get_libc_version"], [],
                                                             Fiddle::TYPE_VOIDP).call.to_s)
  end

  # glibc's counters function: mallinfo2 from glibc 2.33, mallinfo before.
  def mallinfo_name
    glibc_version >= Gem::Version.new("2.33") ? "mallinfo2" : "mallinfo"
  end

  # libc's build-id, as readelf prints it.
  def build_id
    @build_id ||= IO.popen(["readelf", "-n", libc_path], &:read).b[/Build ID: (\h+)/, 1]
  end

  # [name, crc] of libc's .gnu_debuglink.
  def debuglink
    @debuglink ||= begin
      out = IO.popen(["readelf", "--wide", "--hex-dump=.gnu_debuglink", libc_path], err: File::NULL, &:read).b
      bytes = [out.scan(/^\s+0x\h+ ((?:\h{2,8} ){1,4})/).join.delete(" ")].pack("H*")
      name = bytes[/\A[^\0]+/]
      [name, bytes[(name.size + 4) & ~3, 4].unpack1("V")]
    end
  end

  # The lowest address libc is mapped at (its load bias: libc's first segment has vaddr 0).
  def libc_base
    File.foreach("/proc/self/maps").map(&:split).select { |f| f[5] == libc_path }.map { |f| f[0].to_i(16) }.min
  end

  # The debug file the distribution installed (libc6-dbg), or nil.
  def installed_symbol_file
    return @installed_symbol_file if defined?(@installed_symbol_file)

    candidates = ["/usr/lib/debug/.build-id/#{build_id[0, 2]}/#{build_id[2..]}.debug"]
    candidates << File.join("/usr/lib/debug", File.dirname(File.realpath(libc_path)), debuglink[0]) if debuglink[0]
    @installed_symbol_file = candidates.find { |p| File.exist?(p) }
  end

  def symbols_installed?
    !installed_symbol_file.nil?
  end

  # &main_arena, from the unsorted bin's address that glibc writes into a chunk freed on the main
  # thread (whose arena is main_arena): bin_at(av, 1) = &av->bins[0] - 16.
  def main_arena
    @main_arena ||= begin
      link = UNSORTED_BIN.call
      raise "no chunk reached the unsorted bin cleanly" if link.zero?

      bins = glibc_version >= Gem::Version.new("2.43") ? 24 : 112 # offsetof(struct malloc_state, bins)
      link - bins + 16
    end
  end

  # {thread_arena:, tcache:} offsets in libc's TLS block, from the values glibc keeps there for the
  # main thread (see libc_facts_tls_offsets); asked on the main thread.
  def tls_offsets
    @tls_offsets ||= begin
      out = Fiddle::Pointer.malloc(24, Fiddle::RUBY_FREE)
      unless TLS_OFFSETS.call(main_arena, out).zero?
        raise "libc's thread_arena and tcache were not found in its TLS block"
      end

      arena, tcache, = out[0, 24].unpack("Q<3")
      { thread_arena: arena, tcache: tcache }
    end
  end

  # &mp_: in a forked child, mallopt sets three of its fields to odd values; the one place in libc's
  # writable data holding them in a row is mp_. The child shares this process's layout.
  def mp
    @mp ||= begin
      reader, writer = IO.pipe
      pid = fork do
        reader.close
        [M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD].zip(PROBE).each { |param, value| MALLOPT.call(param, value) }
        writer.write(find_words(PROBE.pack("Q<3")).join(" "))
        writer.close
        exit!(0)
      end
      writer.close
      hits = reader.read.split.map(&:to_i)
      Process.wait(pid)
      raise "mp_ probe found #{hits.size} candidates" unless hits.size == 1

      hits.first
    end
  end

  # Addresses, 8-aligned, in libc's writable mappings (and the anonymous one that follows: .bss),
  # where `pattern` lies.
  def find_words(pattern)
    maps = File.foreach("/proc/self/maps").map(&:split)
    ranges = []
    maps.each_with_index do |f, i|
      next unless f[5] == libc_path && f[1].start_with?("rw")

      ranges << f[0].split("-").map { |x| x.to_i(16) }
      after = maps[i + 1]
      ranges << after[0].split("-").map { |x| x.to_i(16) } if after && after[5].nil? && after[1].start_with?("rw")
    end
    File.open("/proc/self/mem", "rb") do |mem|
      ranges.flat_map do |from, to|
        mem.seek(from)
        data = mem.read(to - from)
        hits = []
        at = 0
        while (i = data.index(pattern, at))
          hits << from + i if (i % 8).zero?
          at = i + 1
        end
        hits
      end
    end
  end

  # A debug directory whose .build-id entry is libc's symbol file: the installed one, or one made
  # from the facts above (main_arena and mp_ as STT_OBJECT symbols, libc's build-id, and a
  # CRC-32 equal to the one libc's .gnu_debuglink names).
  def debug_dir
    return "/usr/lib/debug" if symbols_installed?

    @debug_dir ||= begin
      dir = Dir.mktmpdir("ptmd-symbols")
      at_exit { FileUtils.rm_rf(dir) }
      file = File.join(dir, ".build-id", build_id[0, 2], "#{build_id[2..]}.debug")
      FileUtils.mkdir_p(File.dirname(file))
      File.binwrite(file, made_symbol_file(dir))
      dir
    end
  end

  # The symbol file the specs use: installed, or made.
  def symbol_file
    installed_symbol_file || File.join(debug_dir, ".build-id", build_id[0, 2], "#{build_id[2..]}.debug")
  end

  # libc's .data and .bss as [name, address, size], link-time addresses.
  def data_sections
    IO.popen(["readelf", "--wide", "--section-headers", libc_path], &:read).b
      .scan(/\]\s+(\.data|\.bss)\s+\w+\s+(\h+)\s+\h+\s+(\h+)/)
      .map { |name, address, size| [name, address.to_i(16), size.to_i(16)] }
  end

  # libc's TLS sections (.tdata, .tbss) as [name, address, size], and the address its TLS template
  # (PT_TLS) starts at: link-time addresses.
  def tls_sections
    sections = IO.popen(["readelf", "--wide", "--section-headers", libc_path], &:read).b
                 .scan(/\]\s+(\.tdata|\.tbss)\s+\w+\s+(\h+)\s+\h+\s+(\h+)/)
                 .map { |name, address, size| [name, address.to_i(16), size.to_i(16)] }
    start = IO.popen(["readelf", "--wide", "--program-headers", libc_path], &:read).b[/^\s+TLS\s+0x\h+\s+0x(\h+)/, 1]
    [sections, Integer(start, 16)]
  end

  # libc's own sections with their contents dropped (objcopy --only-keep-debug: what a distribution's
  # debug file is built from, build-id note included) plus main_arena and mp_ as object symbols of
  # the section that holds them, so that debuggers place them as they place real symbols, and the
  # TLS symbols thread_arena and tcache, whose values are offsets in the TLS block as in libc6-dbg's.
  def made_symbol_file(dir)
    base = libc_base
    out = File.join(dir, "symbols.debug")
    skeleton = File.join(dir, "skeleton.debug")
    symbols = { "main_arena" => main_arena - base, "mp_" => mp - base }.map do |name, at|
      section, start, = data_sections.find { |_, from, size| at >= from && at < from + size }
      raise "#{name} lies outside libc's .data and .bss" unless section

      ["--add-symbol", format("%<n>s=%<s>s:0x%<o>x,global,object", n: name, s: section, o: at - start)]
    end
    sections, tls_start = tls_sections
    symbols += tls_offsets.map do |name, offset|
      section, start, = sections.find { |_, from, size| tls_start + offset >= from && tls_start + offset < from + size }
      raise "#{name} lies outside libc's .tdata and .tbss" unless section

      ["--add-symbol", format("%<n>s=%<s>s:0x%<o>x,local,object", n: name, s: section, o: tls_start + offset - start)]
    end
    [["objcopy", "--only-keep-debug", libc_path, skeleton], ["objcopy", *symbols.flatten, skeleton, out]].each do |cmd|
      _o, e, s = Open3.capture3(*cmd)
      raise "making a symbol file failed: #{cmd.join(' ')}: #{e}" unless s.success?
    end
    forge_crc(tls_values_as_offsets(File.binread(out), tls_offsets), debuglink[1])
  end

  # objcopy gives a symbol in .tbss the address it would have; a TLS symbol's value is its offset in the
  # TLS template (ELF TLS ABI). Rewrites st_value (and st_size: 8) of the named symbols in .symtab.
  def tls_values_as_offsets(elf, offsets)
    elf = elf.dup
    shoff, = elf.unpack("@40Q<")
    shentsize, shnum = elf.unpack("@58S<2")
    headers = Array.new(shnum) { |i| elf.unpack("@#{shoff + i * shentsize}L<2Q<4L<2") }
    symtab = headers.find { |h| h[1] == 2 } or raise "the made symbol file has no .symtab"
    strtab = headers.fetch(symtab[6])
    found = 0
    (symtab[5] / 24).times do |i|
      at = symtab[4] + i * 24
      name_at = strtab[4] + elf.unpack1("@#{at}L<")
      name = elf[name_at, 32][/\A[^\0]*/]
      next unless offsets.key?(name.to_sym) && elf.unpack1("@#{at + 4}C") & 0xf == 6 # STT_TLS

      elf[at + 8, 16] = [offsets[name.to_sym], 8].pack("Q<2")
      found += 1
    end
    raise "the made symbol file lacks #{offsets.keys.join(' or ')}" unless found == offsets.size

    elf
  end

  # data plus four bytes chosen so that the whole has CRC-32 `crc` (CRC-32 is linear: the last four
  # bytes can steer it anywhere).
  def forge_crc(data, crc)
    table = (0..255).map { |n| 8.times.reduce(n) { |c, _| c.odd? ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 } }
    by_top = table.each_with_index.to_h { |t, i| [t >> 24, i] }
    reg = crc ^ 0xFFFF_FFFF
    indexes = []
    4.times do
      i = by_top.fetch(reg >> 24)
      indexes.unshift(i)
      reg = ((reg ^ table[i]) << 8) & 0xFFFF_FFFF
    end
    reg = Zlib.crc32(data) ^ 0xFFFF_FFFF
    tail = indexes.map do |i|
      byte = (reg ^ i) & 0xff
      reg = table[i] ^ (reg >> 8)
      byte
    end
    forged = data + tail.pack("C4")
    raise "CRC forging failed" unless Zlib.crc32(forged) == crc

    forged
  end
end
