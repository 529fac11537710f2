# frozen_string_literal: true

require "rbconfig"

# glibc's own lists and heaps, walked by gdb in a core file (spec/support/gdb/heap_walk.py, with
# libc6-dbg's types), compared chunk by chunk with a dump of the same process at the same moment.
module GdbOracle
  SCRIPT = File.join(__dir__, "gdb", "heap_walk.py")

  # What gdb found in one core.
  class Walk
    attr_reader :version, :arenas, :threads, :heaps, :chunks, :errors

    def initialize(text)
      @arenas = []
      @threads = {}
      @heaps = []
      @chunks = {}
      @errors = []
      text.each_line do |line|
        kind, *f = line.split
        case kind
        when "glibc" then @version = f[0]
        when "arena" then @arenas << { address: f[0].hex, main: f[1] == "1", flags: f[2].hex, top: f[3].hex }
        when "thread" then @threads[f[0].hex] = f[1].hex
        when "heap" then @heaps << [f[0].hex, f[1].hex, f[2].hex]
        when "chunk" then @chunks[f[0].hex] = [f[1].hex, f[2].to_sym]
        when "error" then @errors << f.join(" ")
        end
      end
    end
  end

  # One gdb process walking a batch of cores.
  class Run
    def initialize(dir, batch)
      @batch = batch.select { |f| f[:cored] }
      @outputs = @batch.map { |f| "#{f[:core]}.walk" }
      jobs = File.join(dir, "jobs-#{@batch.first&.fetch(:seed)}")
      File.write(jobs, @batch.zip(@outputs).map { |f, o| "#{f[:core]} #{o}\n" }.join)
      @all = batch
      @log = "#{jobs}.log"
      debug = GdbOracle.debug_dir ? ["-ex", "set debug-file-directory #{GdbOracle.debug_dir}"] : []
      @pid = unless @batch.empty?
               Process.spawn({ "HEAP_WALK_JOBS" => jobs }, "gdb", "-nx", "-batch", *debug,
                             "-ex", "file #{RbConfig.ruby}", "-x", SCRIPT, out: @log, err: @log)
             end
    end

    # @return [Array<Array(Hash, Walk)>] each shape's files and gdb's walk (nil when it has no core)
    def wait
      Process.wait(@pid) if @pid
      log = File.exist?(@log) ? File.read(@log) : ""
      @all.map do |files|
        i = @batch.index(files)
        out = i && @outputs[i]
        walk = out && File.exist?(out) ? Walk.new(File.read(out)) : nil
        File.delete(out) if out && File.exist?(out)
        files[:gdb_log] = log unless walk
        [files, walk]
      end
    end
  end

  def self.start(dir, batch)
    Run.new(dir, batch)
  end

  # glibc's debug info for gdb alone, where the system has none for the gem to find (rake compat's
  # runs without libc6-dbg unpack the package there): PTMALLOC_DUMP_GDB_DEBUG_DIR, else nil (gdb's
  # default, /usr/lib/debug).
  def self.debug_dir
    dir = ENV.fetch("PTMALLOC_DUMP_GDB_DEBUG_DIR", "")
    dir.empty? ? nil : dir
  end

  # What has to be installed for the oracle, or nil.
  def self.missing
    return "gdb (apt-get install gdb)" unless system("gdb", "--version", out: File::NULL, err: File::NULL)
    return nil if debug_dir && Dir.exist?(debug_dir)
    return "libc6-dbg (apt-get install libc6-dbg): gdb needs glibc's debug info" unless LibcFacts.symbols_installed?

    nil
  end

  # Compares every chunk of the dump's arena heaps with gdb's walk, and the threads' tcaches.
  #
  # In a fork child the other threads are gone, but their tcache_perthread_structs stay: the dump
  # finds them by their structure (a thread without tid, found_by :scan) and calls their chunks
  # tcache; for gdb, which follows live threads only, they are in use. With `threads_gone`, such
  # chunks are counted apart (as `orphaned`), and only if they are exactly as many as those structs
  # hold.
  #
  # A core with no thread pointers (qemu-user writes no NT_ARM_TLS) leaves the dump no way to tell
  # which thread a tcache is; it finds them by their structure alone. With `by_thread: false` the
  # tcaches are compared as a set.
  #
  # @return [Hash] :compared (chunks), :orphaned, :differences (empty when they agree)
  def self.compare(dump, walk, threads_gone: false, by_thread: true)
    diffs = walk.errors.map { |e| "gdb: #{e}" }
    gdb = walk.chunks.dup
    compared = 0
    orphaned = []
    dump.each_chunk do |c|
      next if c.heap.kind == :mmapped_chunk

      g = gdb.delete(c.address)
      if g.nil?
        # the heap_info and malloc_state at a heap's start are the dump's meta chunks; gdb starts after them
        diffs << "0x#{c.address.to_s(16)}: dump #{c.size} #{c.state}, gdb has no chunk there" unless c.state == :meta
        next
      end
      compared += 1
      next if g == [c.size, c.state]

      if threads_gone && g == [c.size, :in_use] && c.state == :tcache
        orphaned << c.address
        next
      end
      diffs << "0x#{c.address.to_s(16)}: dump #{c.size} #{c.state}, gdb #{g[0]} #{g[1]}"
    end
    gdb.sort.each { |a, (size, state)| diffs << "0x#{a.to_s(16)}: gdb #{size} #{state}, not in the dump" }
    if by_thread
      dump_tcaches = dump.threads.select(&:tid).to_h { |t| [t.tid, t.tcache || 0] }
      (dump_tcaches.keys - walk.threads.keys).each { |tid| diffs << "thread #{tid} is in the dump, not in the core" }
      walk.threads.each do |tid, tcache|
        next if dump_tcaches[tid] == tcache

        diffs << "thread #{tid}: gdb's tcache 0x#{tcache.to_s(16)}, the dump's #{dump_tcaches[tid]&.to_s(16).inspect}"
      end
    else
      found = dump.threads.map(&:tcache).compact.sort
      wanted = walk.threads.values.reject(&:zero?).sort
      hex = ->(list) { list.map { |a| a.to_s(16) } }
      diffs << "tcaches: gdb's #{hex.call(wanted)}, the dump's #{hex.call(found)}" unless found == wanted
    end
    scanned = dump.threads.select { |t| t.tid.nil? && t.found_by == :scan && !walk.threads.value?(t.tcache) }
    held = scanned.sum(&:tcache_count)
    unless orphaned.size == held
      diffs << "#{orphaned.size} chunks the dump calls tcache are in use for gdb, but the tcaches of threads " \
               "gone hold #{held}: #{orphaned.first(5).map { |a| "0x#{a.to_s(16)}" }.join(' ')}"
    end
    { compared: compared, orphaned: orphaned.size, differences: diffs }
  end
end
