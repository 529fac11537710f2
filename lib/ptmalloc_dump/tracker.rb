# frozen_string_literal: true

module PtmallocDump
  # The allocation tracker: a library for +LD_PRELOAD+ built with the gem. In a process it runs in,
  # malloc's blocks are sampled by bytes, each with its native and Ruby stack, and every dump of that
  # process joins them to the chunks still allocated ({Dump#allocation_sites} with +source: :malloc+).
  # +ptmalloc-dump --track -- CMD+ starts a command with it; {Tracker.path} is the library for
  # +LD_PRELOAD+ where the command line cannot be changed (a systemd unit, a container's entry point).
  module Tracker
    # What the tracker reads from the environment.
    ENV_BYTES = "PTMALLOC_DUMP_TRACK_BYTES"
    ENV_SEED = "PTMALLOC_DUMP_TRACK_SEED"
    ENV_STRICT = "PTMALLOC_DUMP_TRACK_STRICT"
    # Other allocators, whose malloc the tracker cannot follow.
    OTHER_ALLOCATORS = /\Alib(?:jemalloc|tcmalloc(?:_minimal)?|mimalloc|hoard|tbbmalloc_proxy|snmalloc)\b/.freeze
    SCRIPT_DEPTH = 4
    ELF_MACHINES = { 62 => "x86-64", 183 => "aarch64" }.freeze

    module_function

    # @return [String] the tracker library's path, beside the extension
    # @raise [TrackError] when it was not built
    def path
      ext = $LOADED_FEATURES.find { |f| f.end_with?("/ptmalloc_dump/ptmalloc_dump.so") }
      lib = ext && File.join(File.dirname(ext), "ptmalloc_dump_track.so")
      return lib if lib && File.file?(lib)

      raise TrackError, "the allocation tracker library is missing#{lib ? " (#{lib})" : ''}: reinstall the gem"
    end

    # The environment a tracked command runs with: the tracker first in LD_PRELOAD.
    # @param env [Hash] the current environment
    # @param bytes [Integer, nil] the sampler's mean in bytes (nil: the tracker's default, 512 KiB)
    # @return [Hash]
    def environment(env, bytes: nil)
      preload = [path, *env.fetch("LD_PRELOAD", "").split(/[\s:]+/).reject(&:empty?)].uniq.join(":")
      extra = { "LD_PRELOAD" => preload, ENV_STRICT => "1" }
      extra[ENV_BYTES] = bytes.to_s if bytes
      extra
    end

    # Why +argv+ cannot be tracked, nil when it can.
    # @param argv [Array<String>] the command
    # @param env [Hash] its environment
    # @return [String, nil]
    def problem(argv, env)
      preloaded = env.fetch("LD_PRELOAD", "").split(/[\s:]+/)
      if (other = preloaded.find { |lib| File.basename(lib).match?(OTHER_ALLOCATORS) })
        return "LD_PRELOAD holds #{other}: the command's malloc would be that, not glibc's"
      end

      file = executable(argv.first, env) or return "#{argv.first}: command not found"
      SCRIPT_DEPTH.times do
        interpreter = shebang(file) or break
        file = executable(interpreter, env) or return "#{argv.first}: its interpreter #{interpreter} is not found"
      end
      elf_problem(file)
    end

    # the path of a command as exec would find it
    def executable(name, env)
      return (File.file?(name) ? name : nil) if name.include?("/")

      env.fetch("PATH", "").split(":").map { |dir| File.join(dir, name) }
         .find { |p| File.file?(p) && File.executable?(p) }
    end

    # the interpreter a script names ("/usr/bin/env ruby": ruby)
    def shebang(file)
      line = File.open(file, "rb") { |f| f.read(256) }.to_s
      return nil unless line.start_with?("#!")

      words = line[2..].lines.first.to_s.split
      words.first&.end_with?("/env") ? words.find { |w| !w.start_with?("-") && !w.end_with?("/env") } : words.first
    end

    def elf_problem(file)
      data = File.open(file, "rb") { |f| f.read(64) }.to_s
      return "#{file} is not an ELF executable" unless data.start_with?("\x7FELF".b)

      own = File.open("/proc/self/exe", "rb") { |f| f.read(20) }.unpack1("@18S<")
      unless data.getbyte(4) == 2 && data.unpack1("@18S<") == own
        return "#{file} is not a 64-bit #{ELF_MACHINES.fetch(own, "machine #{own}")} program"
      end

      info = DynamicInfo.new(file)
      return "#{file} is statically linked: LD_PRELOAD cannot reach its malloc" unless info.interpreter?

      other = info.needed.find { |n| n.match?(OTHER_ALLOCATORS) }
      other && "#{file} is linked with #{other}: its malloc is not glibc's"
    end

    # The interpreter and DT_NEEDED libraries of an ELF64 executable.
    class DynamicInfo
      PT_INTERP = 3
      PT_DYNAMIC = 2
      PT_LOAD = 1
      DT_NEEDED = 1
      DT_STRTAB = 5
      private_constant :PT_INTERP, :PT_DYNAMIC, :PT_LOAD, :DT_NEEDED, :DT_STRTAB

      # @return [Array<String>] the libraries it names
      attr_reader :needed

      # @param file [String]
      def initialize(file)
        @data = File.binread(file)
        phoff, = @data.unpack("@32Q<")
        phentsize, phnum = @data.unpack("@54S<S<")
        @phdrs = (0...phnum).map { |i| @data.unpack("@#{phoff + i * phentsize}L<L<Q<Q<Q<Q<") }
        @needed = read_needed
      end

      # @return [Boolean] whether it is dynamically linked (it names a program interpreter)
      def interpreter?
        @phdrs.any? { |type, *| type == PT_INTERP }
      end

      private

      def read_needed
        dyn = @phdrs.find { |type, *| type == PT_DYNAMIC } or return []
        entries = (0...(dyn[5] / 16)).map { |i| @data.unpack("@#{dyn[2] + i * 16}q<Q<") }
        strtab = entries.find { |tag, _| tag == DT_STRTAB }&.last or return []
        base = file_offset(strtab) or return []
        entries.select { |tag, _| tag == DT_NEEDED }.map { |_, off| @data.unpack1("@#{base + off}Z*") }
      end

      def file_offset(vaddr)
        seg = @phdrs.find { |type, _, _, va, _, filesz| type == PT_LOAD && vaddr >= va && vaddr < va + filesz }
        seg && (vaddr - seg[3] + seg[2])
      end
    end
  end
end
