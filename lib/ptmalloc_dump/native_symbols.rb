# frozen_string_literal: true

module PtmallocDump
  # Names the native program counters of a dump's tracked stacks: each address's mapping (the dump's
  # own, with the file's path, offset and inode), then the function in that file's symbol table whose
  # bytes hold it: the file's .symtab, else the debug file its build-id names under the debug
  # directory (as gdb finds it), else its .dynsym. Read from the files on this machine when the report
  # is made, never from a network; a file that is no longer the one mapped (another inode) names
  # nothing rather than the wrong function.
  class NativeSymbols
    # One function per program counter: "libfoo.so.1!function", "libfoo.so.1+0x1234" without a symbol
    # there, "0x7f..." outside any mapped file.
    #
    # @param mappings [Array<Hash>] {Dump#mappings}
    # @param debug_dir [String] where debug files are found by build-id
    def initialize(mappings, debug_dir: ENV.fetch("PTMALLOC_DUMP_DEBUG_DIR", "/usr/lib/debug"))
      @files = (mappings || []).select { |m| m[:kind] == :file && m[:path] }.sort_by { |m| m[:start] }
      @starts = @files.map { |m| m[:start] }
      @debug_dir = debug_dir
      @tables = {}
      @names = {}
    end

    # @param pc [Integer] a return address (the call's own instruction is the byte before)
    # @param innermost [Boolean] true for the innermost frame, whose address is the instruction itself
    # @return [String]
    def name(pc, innermost: false)
      @names[[pc, innermost]] ||= lookup(innermost ? pc : pc - 1).freeze
    end

    # @param pc [Integer]
    # @return [String, nil] the path of the file mapped at pc
    def path_of(pc)
      mapping(pc)&.fetch(:path)
    end

    private

    def mapping(pc)
      i = @starts.bsearch_index { |s| s > pc }
      i = (i || @starts.size) - 1
      m = i >= 0 && @files[i]
      m if m && pc < m[:end]
    end

    def lookup(pc)
      m = mapping(pc) or return format("0x%x", pc)
      base = File.basename(m[:path])
      table = symbols_for(m)
      file_offset = pc - m[:start] + m[:offset]
      vaddr = table&.vaddr(file_offset)
      sym = vaddr && table.function_at(vaddr)
      sym ? "#{base}!#{sym}" : format("%s+0x%x", base, file_offset)
    end

    def symbols_for(m)
      @tables.fetch([m[:path], m[:inode]]) do |key|
        @tables[key] = begin
          same_file = File.stat(m[:path]).ino == m[:inode]
          same_file ? ElfSymbols.of(m[:path], @debug_dir) : nil
        rescue SystemCallError, ElfSymbols::Unreadable
          nil
        end
      end
    end
  end

  # The functions of one ELF64 file, for NativeSymbols.
  class ElfSymbols
    # The file is not an ELF64 little-endian image this can read.
    class Unreadable < StandardError; end

    PT_LOAD = 1
    SHT_SYMTAB = 2
    SHT_NOTE = 7
    SHT_DYNSYM = 11
    STT_FUNC = 2
    STT_GNU_IFUNC = 10
    private_constant :PT_LOAD, :SHT_SYMTAB, :SHT_NOTE, :SHT_DYNSYM, :STT_FUNC, :STT_GNU_IFUNC

    @read = {}
    @lock = Mutex.new

    # The functions of the file at path, read once in this process for each version of the file (its
    # inode, size and modification time): every dump a report or a comparison loads names its frames
    # from the same tables.
    #
    # @param path [String]
    # @param debug_dir [String]
    # @return [ElfSymbols]
    # @raise [Unreadable, SystemCallError]
    def self.of(path, debug_dir)
      st = File.stat(path)
      key = [path, st.ino, st.size, st.mtime.to_r, debug_dir].freeze
      @lock.synchronize { @read[key] ||= new(path, debug_dir) }
    end

    # @param path [String]
    # @param debug_dir [String]
    def initialize(path, debug_dir)
      File.open(path, "rb") do |f|
        @loads = program_headers(f)
        sections = section_headers(f)
        table = symbols(f, sections, SHT_SYMTAB)
        table = debug_symbols(f, sections, debug_dir) if table.empty?
        table = symbols(f, sections, SHT_DYNSYM) if table.empty?
        @functions = table.sort_by(&:first)
        @starts = @functions.map(&:first)
      end
    end

    # @return [Integer, nil] the link-time address of a file offset (through its loaded segments)
    def vaddr(file_offset)
      seg = @loads.find { |off, _, size| file_offset >= off && file_offset < off + size }
      seg && (file_offset - seg[0] + seg[1])
    end

    # @return [String, nil] the function whose bytes hold vaddr
    def function_at(vaddr)
      i = @starts.bsearch_index { |s| s > vaddr }
      i = (i || @starts.size) - 1
      return nil if i.negative?

      start, size, name = @functions[i]
      name if vaddr < start + [size, 1].max
    end

    private

    def read(f, offset, length)
      f.pread(length, offset) || "".b
    rescue EOFError
      "".b
    end

    def header(f)
      h = read(f, 0, 64)
      raise Unreadable unless h.bytesize == 64 && h.start_with?("\x7FELF\x02\x01".b)

      h
    end

    # [file offset, vaddr, file size] of each PT_LOAD segment
    def program_headers(f)
      phoff, = header(f).unpack("@32Q<")
      phentsize, phnum = header(f).unpack("@54S<S<")
      (0...phnum).filter_map do |i|
        type, _flags, offset, vaddr, _paddr, filesz = read(f, phoff + i * phentsize, 56).unpack("L<L<Q<Q<Q<Q<")
        [offset, vaddr, filesz] if type == PT_LOAD
      end
    end

    # [type, offset, size, link, entsize] of each section
    def section_headers(f)
      shoff, = header(f).unpack("@40Q<")
      shentsize, shnum = header(f).unpack("@58S<S<")
      return [] if shoff.zero? || shnum > 65_535

      (0...shnum).map do |i|
        _name, type, _flags, _addr, offset, size, link, _info, _align, entsize =
          read(f, shoff + i * shentsize, 64).unpack("L<L<Q<Q<Q<Q<L<L<Q<Q<")
        [type, offset, size, link, entsize]
      end
    end

    # [[value, size, name], ...] of the functions in the file's symbol table of that type
    def symbols(f, sections, type)
      table = sections.find { |s| s[0] == type } or return []
      strtab = sections[table[3]] or return []
      strings = read(f, strtab[1], strtab[2])
      data = read(f, table[1], table[2])
      (0...(data.bytesize / 24)).filter_map do |i|
        name, info, _other, shndx, value, size = data.unpack("@#{i * 24}L<CCS<Q<Q<")
        next if shndx.zero? || value.zero? || ![STT_FUNC, STT_GNU_IFUNC].include?(info & 0xf)

        [value, size, strings.unpack1("@#{name}Z*").split("@", 2).first] # "f@GLIBC_2.2.5": f
      end
    end

    # the .symtab of the debug file the build-id names, if installed
    def debug_symbols(f, sections, debug_dir)
      id = build_id(f, sections) or return []
      path = File.join(debug_dir, ".build-id", id[0, 2], "#{id[2..]}.debug")
      return [] unless File.file?(path)

      File.open(path, "rb") { |d| symbols(d, section_headers(d), SHT_SYMTAB) }
    rescue SystemCallError, Unreadable
      []
    end

    def build_id(f, sections)
      sections.each do |type, offset, size, *|
        next unless type == SHT_NOTE

        notes = read(f, offset, size)
        at = 0
        while at + 12 <= notes.bytesize
          namesz, descsz, kind = notes.unpack("@#{at}L<L<L<")
          desc_at = at + 12 + ((namesz + 3) & ~3)
          return notes.byteslice(desc_at, descsz).unpack1("H*") if kind == 3 && notes.byteslice(at + 12, 3) == "GNU"

          at = desc_at + ((descsz + 3) & ~3)
        end
      end
      nil
    end
  end
end
