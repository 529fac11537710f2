# frozen_string_literal: true

require_relative "ptmalloc_dump/version"
require_relative "ptmalloc_dump/errors"
require "ptmalloc_dump/ptmalloc_dump"

require_relative "ptmalloc_dump/autoloads"
require_relative "ptmalloc_dump/ruby_layer"
require_relative "ptmalloc_dump/tracing"

# Looks inside glibc's malloc (ptmalloc2) heap of the running Ruby process: every arena, heap and
# chunk, classified and reconciled with glibc's own counters, written to one file.
module PtmallocDump
  class << self
    # Dumps this process's malloc heap to +path+ (atomically, mode 0600). The walk runs with the GVL
    # held and each arena's own lock taken in turn; it calls no malloc, so the figures reconcile with
    # +mallinfo2()+ and +malloc_info()+ captured right after it. Nothing from entering this method to
    # the file's rename calls malloc or free either (what a first call would set up is done when the
    # gem loads), except, where Ruby's pages cannot be found by their structure, Ruby's own
    # rb_objspace_each_objects when +ruby+ is true: its list of pages, and the end of a lazy sweep the
    # GC had left pending. No Ruby object is made before the heap is
    # written, so the GC cannot run in between.
    #
    # @param path [String, Pathname] where to write the dump
    # @param debug_dir [String, nil] where libc's debug symbols live (default:
    #   +ENV["PTMALLOC_DUMP_DEBUG_DIR"]+, else /usr/lib/debug)
    # @param symbols [Symbol] :auto (a symbol file if there is one, else find malloc's globals by
    #   their structure), :file (a symbol file or SymbolsNotFoundError), :heuristic (by structure only)
    # @param ruby [Boolean] also record ObjectSpace's pages and live objects (see {Dump#ruby}); skipped,
    #   with the reason in the dump's header, where this Ruby does not allow it (see {ruby_layer})
    # @param references [Boolean] record the pointer graph (default): for every in-use chunk, which of
    #   its aligned words equal another allocated chunk's user address (or hold it as a Ruby Integer),
    #   so that ownership follows pointers between chunks; and the roots (loaded objects' writable
    #   data, threads' stacks and TLS, the dumping thread's registers) with the chunks they point at,
    #   so that native chunks are told anchored from leaked (see {Dump#owner_kind_of}). false skips
    #   both: a shorter pause, Ruby owners by slot pointers only, no anchored or leaked
    # @param oracles [Boolean, :auto] call glibc's own malloc_info() and mallinfo2() right after the
    #   walk and keep their output for {Dump#verify}. Each follows every chunk on the arenas' free
    #   lists again, one wait on memory a step: :auto (default) calls them when those lists hold at
    #   most {ORACLES_AUTO_MAX_ENTRIES} chunks (about 30 ms of both calls at most) and in a fork
    #   snapshot's child (no pause of this process), and leaves them out otherwise, which the dump's
    #   header (:oracles_skipped) and {Dump#verify} say; true calls them always, false never
    # @param fork [Boolean] snapshot mode: the process forks and the child (a consistent copy of the
    #   heap: glibc holds every arena lock across fork) records Ruby's heap on its copy, walks, writes
    #   and exits; this process pauses for the fork (and the listing of its threads and loaded objects
    #   before it). Where this Ruby's pages are not known by their structure, Ruby's heap is recorded
    #   here before the fork instead; the dump's header[:snapshot] says which and what the pause was
    # @param wait [Boolean] with fork: wait for the child and return the summary
    # @param trim_check [Boolean] after the walk, call malloc_trim(0) and record the resident bytes it
    #   really released per arena (pagemap before and after), to check the report's estimate against
    #   (not with fork: true, where trimming the child would tell nothing about this process)
    # @param gc [Boolean] run a full GC (full mark, immediate sweep) first, so that objects that are
    #   already garbage are not recorded; it costs a full mark, and runs before the dump's window
    #   opens (it allocates as the GC does). Off by default: then objects allocated since the latest
    #   GC may be garbage awaiting collection, which {RubyHeap#summary}'s :young_bytes shows
    # @param graph [Boolean, :auto] with ruby: also record the object graph: what each live object
    #   references (what the GC marks from it), the roots by category, and the names of references
    #   (instance and class variables, constants, globals, Array indices, Hash keys), for
    #   {Dump#retainers}. :auto (default) records it in fork snapshots, where it costs the worker no
    #   pause, and not in process
    # @return [Hash{Symbol=>Object}] the dump's summary (see {Dump#summary}, without :ruby) plus :path;
    #   with `fork: true` and no `wait`, the child's pid (reap it with Process.wait or Process.detach);
    #   should the child fail, it says why in one line on stderr as it exits
    # @raise [SymbolsNotFoundError] when libc's symbols cannot be found
    # @raise [UnsupportedLibcError] when this glibc's malloc is not understood
    # @raise [UnsupportedAllocatorError] when malloc is not glibc's
    # @raise [HeapDamagedError] with `fork: true`, when the arena ring does not lead back to
    #   main_arena (glibc's fork would never return); an in-process dump records that damage
    # @raise [SystemCallError] when the file cannot be written (the target is left untouched)
    def dump(path, debug_dir: nil, symbols: :auto, ruby: true, references: true, oracles: :auto, fork: false,
             wait: false, trim_check: false, gc: false, graph: :auto)
      oracles = oracles_mode(oracles)
      graph = graph_mode(graph, fork)
      path = path.to_s
      # an absolute path is used as given: no new string is allocated before glibc's counters are taken
      path = File.expand_path(path) unless path.start_with?("/")
      mode = symbols_mode(symbols)
      raise ArgumentError, "trim_check: and fork: cannot be combined" if fork && trim_check
      return snapshot(path, debug_dir, mode, ruby, references, oracles, wait, gc, graph) if fork

      summary = _dump(path, debug_dir&.to_s, dump_strings(ruby), ruby && ruby_layer.available?, references, oracles,
                      mode, trim_check, gc, graph)
      summary[:path] = path
      summary
    end

    # Dumps the glibc malloc heap of another running process, which needs neither this gem nor Ruby.
    # Every thread of the process is stopped (ptrace), the memory the walk reads is copied, and the
    # process runs again at once: its pause is the copy, the walk runs on the copy. An arena whose lock
    # is held when the process is stopped is not walked: the process is let go for a moment and stopped
    # again (up to 50 times, 20 ms apart). The file is the same format, loaded by {load}; what
    # such a dump cannot hold (Ruby's objects, the pointer graph, glibc's own mallinfo2 and
    # malloc_info, which cannot be called in another process) is said in its header's :source_info.
    #
    # @param pid [Integer] the process (the same user's, or any as root; Yama's ptrace_scope 0 or root)
    # @param path [String, Pathname] where the dump is written (atomically)
    # @param debug_dir [String, nil] where libc's symbol file is looked for, as for {dump}
    # @param symbols [Symbol] :auto (a symbol file, else by structure), :file (libc's own .symtab, or
    #   libc6-dbg's by build-id) or :heuristic (by structure alone: main_arena through its relocation,
    #   mp_ by its own consistency, since glibc's counters cannot be taken in another process to match
    #   it; each thread's tcache by its structure, its TLS offset being unknown without symbols)
    # @return [Hash{Symbol=>Object}] the dump's summary (see {Dump#summary}) plus :path, :pause_ns (how
    #   long the process was stopped) and :copied_bytes
    # @raise [TargetGoneError] when there is no such process, or it exits while it is read
    # @raise [PtracePermissionError] when it may not be traced (another user, Yama, a container)
    # @raise [UnsupportedPlatformError] when it has no glibc (a static binary, another C library)
    # @raise [SymbolsNotFoundError] when libc's symbols cannot be found
    # @raise [ArenaLockedError] when an arena stayed locked each time the process was stopped
    # @raise [SystemCallError] when the file cannot be written (the process is not stopped then)
    def dump_process(pid, path, debug_dir: nil, symbols: :auto)
      pid = Integer(pid)
      path = File.expand_path(path.to_s)
      summary = _dump_process(pid, path, debug_dir&.to_s, process_strings(pid), symbols_mode(symbols))
      summary[:path] = path
      summary
    end

    # Dumps the glibc malloc heap of the process a core file was written from (by gcore, or by the kernel
    # with the default coredump_filter, which keeps every private and anonymous page): the same walk
    # as {dump_process}, on the core's segments. libc is found from the core's NT_FILE note (the file
    # on disk must be the same build), each thread's thread pointer from its NT_PRSTATUS note. A core
    # has no residency: every page it holds counts as present.
    #
    # @param core [String, Pathname] the core file
    # @param path [String, Pathname] where the dump is written (atomically)
    # @param debug_dir [String, nil] where libc's symbol file is looked for, as for {dump}
    # @param symbols [Symbol] :auto, :file or :heuristic, as for {dump_process}
    # @return [Hash{Symbol=>Object}] the dump's summary (see {Dump#summary}) plus :path
    # @raise [CoreFileError] when the file is not a whole ELF core of this machine's architecture with
    #   its notes
    # @raise [UnsupportedPlatformError] when the process had no glibc
    # @raise [SymbolsNotFoundError] when libc's symbols cannot be found
    # @raise [UnsupportedLibcError] when libc on disk is not the one the core's process ran
    # @raise [ArenaLockedError] when an arena is locked in the core (a thread was inside malloc)
    def dump_core(core, path, debug_dir: nil, symbols: :auto)
      path = File.expand_path(path.to_s)
      summary = _dump_core(File.expand_path(core.to_s), path, debug_dir&.to_s, ["gem_version", VERSION],
                           symbols_mode(symbols))
      summary[:path] = path
      summary.delete(:pause_ns)
      summary
    end

    # Loads a dump written by {dump}.
    #
    # @param path [String, Pathname]
    # @return [Dump]
    # @raise [FormatError] when the file is not a valid dump
    def load(path)
      Dump.open(path)
    end

    # Checks the symbol-free path against the symbol file on this system: one fork snapshot is dumped
    # twice from the same frozen heap, once with libc's symbols and once finding malloc's globals by
    # structure alone, and the two dumps are compared chunk by chunk. Needs the symbol file.
    #
    # @param dir [String] where the two dumps (symbols.dump, structure.dump) are written
    # @return [Hash] :agree (true when main_arena, mp_, the arenas and every chunk's state match),
    #   :main_arena, :chunks and :differences (descriptions; the first differing chunk if any)
    def check_symbol_free(dir, debug_dir: nil)
      with = File.join(File.expand_path(dir), "symbols.dump")
      without = File.join(File.expand_path(dir), "structure.dump")
      pid, errors = fork_dumps([[with, SYMBOLS_MODES[:file]], [without, SYMBOLS_MODES[:heuristic]]], debug_dir,
                               false, false)
      wait_snapshot(pid, errors)
      a = load(with)
      b = load(without)
      differences = []
      %i[main_arena mp].each do |k|
        differences << "#{k}: #{a.header[k]} vs #{b.header[k]}" if a.header[k] != b.header[k]
      end
      differences << "arenas differ" if a.arenas.map(&:address) != b.arenas.map(&:address)
      differences << "chunk counts #{a.chunk_count} vs #{b.chunk_count}" if a.chunk_count != b.chunk_count
      if (i = a.first_difference(b))
        differences << "chunk #{i}: #{chunk_tuple(a, i).inspect} vs #{chunk_tuple(b, i).inspect}"
      end
      { agree: differences.empty?, main_arena: a.header[:main_arena], chunks: a.chunk_count, differences: differences }
    end

    # Whether dumps in this process can record Ruby's heap, and if not why (decided when the gem
    # loads, which warns once when they cannot).
    #
    # @return [RubyLayer]
    def ruby_layer
      RubyLayer.current
    end

    # Compares two dumps of one process.
    #
    # @param old [Dump, String]
    # @param new [Dump, String]
    # @param force [Boolean] allow dumps of different processes
    # @return [Diff]
    def diff(old, new, force: false)
      Diff.new(old, new, force: force)
    end

    # Samples {stats} every `every` seconds into `to` (one JSON line per reading) from a background
    # thread, until the returned sampler is stopped. A thread does not survive fork: in a forking
    # server call this in each worker's boot hook (a second call in the same process returns the
    # sampler already running for that path; in a forked child, it starts that sampler's thread again).
    #
    # @param every [Numeric] seconds between readings
    # @param to [String] the JSON Lines file (read by `ptmalloc-visualize --timeline`)
    # @param smaps [Boolean] as for {stats}
    # @return [Sampler]
    def sample(to:, every: 60, smaps: false)
      @samplers ||= {}
      path = File.expand_path(to.to_s)
      sampler = @samplers[path]
      return sampler.start if sampler && sampler.every == every

      sampler&.stop
      @samplers[path] = Sampler.new(every: every, to: path, smaps: smaps).start
    end

    # The figures of {stats} as Prometheus text exposition format, for a /metrics endpoint (README
    # shows one, and a Yabeda collector).
    #
    # @param prefix [String] prepended to every metric name
    # @param smaps [Boolean] as for {stats}
    # @return [String]
    def prometheus_text(prefix: "ptmalloc", smaps: false)
      Prometheus.text(stats(smaps: smaps), prefix: prefix)
    end

    # Where libc, its build-id and its symbols were found, without dumping.
    #
    # @param debug_dir [String, nil] as for {dump}
    # @return [Hash{Symbol=>Object}]
    def libc_info(debug_dir: nil, symbols: :auto)
      _libc_info(debug_dir&.to_s, symbols_mode(symbols))
    end

    private

    SYMBOLS_MODES = { auto: 0, file: 1, heuristic: 2 }.freeze
    ORACLES_MODES = { false => 0, auto: 1, true => 2 }.freeze

    def chunk_tuple(dump, index)
      dump.chunk_by_index(index)&.then { |c| [c.address, c.size, c.state] }
    end

    # The strings of a dump of another process: its command line's first word, and this gem's version.
    def process_strings(pid)
      program = begin
        File.binread("/proc/#{pid}/cmdline").split("\0").first.to_s
      rescue SystemCallError
        ""
      end
      ["gem_version", VERSION, "program", program.encode("UTF-8", invalid: :replace, undef: :replace)]
    end

    def symbols_mode(symbols)
      SYMBOLS_MODES.fetch(symbols) { raise ArgumentError, "symbols: must be one of #{SYMBOLS_MODES.keys.join(', ')}" }
    end

    # graph: :auto records the object graph in a fork snapshot's child (off this process's pause) and
    # not in an in-process dump, whose pause it would lengthen
    def graph_mode(graph, fork)
      case graph
      when true, false then graph
      when :auto then fork ? true : false
      else raise ArgumentError, "graph: must be true, false or :auto, not #{graph.inspect}"
      end
    end

    def oracles_mode(oracles)
      ORACLES_MODES.fetch(oracles) do
        raise ArgumentError, "oracles: must be true, false or :auto, not #{oracles.inspect}"
      end
    end

    def snapshot(path, debug_dir, mode, ruby, references, oracles, wait, gc, graph)
      pid, errors = fork_dumps([[path, mode]], debug_dir, ruby, references, oracles: oracles, report: !wait, gc: gc,
                                                                            graph: graph)
      unless wait
        errors.close # the child says on stderr why it failed, if it does
        return pid
      end
      wait_snapshot(pid, errors)
      load(path).summary.merge(path: path, pid: pid)
    end

    def fork_dumps(targets, debug_dir, ruby, references, oracles: ORACLES_MODES[:auto], report: false, gc: false,
                   graph: false)
      pid, fd = _dump_fork(targets, debug_dir&.to_s, dump_strings(ruby), ruby && ruby_layer.available?, references,
                           oracles, report, gc, graph)
      [pid, IO.new(fd, autoclose: true)]
    end

    def wait_snapshot(pid, errors)
      _, status = Process.wait2(pid)
      report = errors.read
      errors.close
      return if status.success?

      _raise_child_error(report) unless report.empty?
      raise Error, "the snapshot process #{pid} failed: #{status}"
    end

    # Ruby's first call of a method from a call site fills its method and constant caches, which
    # mallocs: every way of calling dump in process is taken once here, when the gem loads (with
    # the native side returning at once), so that a real dump calls no malloc before its capture.
    def warm_up
      _warm_up(true)
      [true, false].each do |ruby|
        [true, false].each { |references| dump("/", ruby: ruby, references: references) }
      end
      dump(".", symbols: :auto, debug_dir: "/")
      dump("/")
      options = { ruby: false }
      dump("/", **options) # the shape of a call that passes its options on
    ensure
      _warm_up(false)
    end

    # Why a dump whose Ruby pass runs records no code owners ("" when it does, or has no Ruby pass).
    def ruby_code_reason(layer)
      layer == "recorded" ? _ruby_code_problem.to_s : ""
    end

    # Built once per value of +ruby+: a dump should allocate as little as possible before glibc's
    # counters are taken.
    # The cache is an Array made when the gem loads ([program, strings without ruby, with ruby]):
    # storing into it allocates nothing, where a new instance variable of this module could grow its
    # table inside the dump's window.
    def dump_strings(ruby)
      program = $PROGRAM_NAME.to_s
      cache = @dump_strings
      unless cache[0].equal?(program)
        cache[0] = program
        cache[1] = cache[2] = nil
      end
      cache[ruby ? 2 : 1] ||= begin
        layer, reason = ruby_layer.status(ruby)
        ["ruby_version", RUBY_DESCRIPTION, "gem_version", VERSION, "program", program,
         "ruby_layer", layer, "ruby_layer_reason", reason, "ruby_code_reason", ruby_code_reason(layer)].freeze
      end
    end
  end

  class << self
    # Installs a Signal.trap handler that dumps this process into `dir` as
    # `ptmalloc-<pid>-<timestamp>.dump` and logs one line to `log`: the file, the pause the worker
    # saw (from the signal's arrival, stamped by a sigaction handler in front of Ruby's, to the
    # handler's return) and, in process, the walk time and the main figures; with `fork: true` a
    # second line when the snapshot process is done, with the time it took to walk and write. The
    # handler that was installed for the signal before is called afterwards (when it is a Proc or
    # Method; "DEFAULT", "IGNORE" and friends are not called). Installing again for the same signal
    # returns the handler already in place. The directory is checked here, not when the signal comes.
    #
    # @param signal [String, Symbol, Integer] URG by default: ignored where no handler is installed;
    #   free under Unicorn, Pitchfork, Sidekiq and Puma without `fork_worker`, but Puma's master traps
    #   it for `fork_worker` (refork) and its workers inherit that trap: Puma's recipe uses WINCH
    #   (README's "Which signal" has the table). When the signal already has a handler, one line on
    #   `log` says so at install and names it: a Ruby one (Proc or Method, with its source location)
    #   runs after each dump; a native one (by its symbol and file) is replaced by Signal.trap
    # @param dir [String, nil] where dumps go: a writable directory, not a symbolic link; made (mode
    #   0700, with its parents) when it does not exist; nil (default): +Dir.tmpdir+
    # @param fork [Boolean] fork snapshot mode (the default): the worker pauses for the fork only (as
    #   long as a bare fork of it in a Rails worker under load: README has the figures); the snapshot
    #   process records Ruby's heap, walks and writes; false dumps in the worker, which then waits for
    #   the Ruby pass, the whole walk and the write
    # @param log [IO, nil] where the report lines go
    # @param dump_options every other option of {dump} by name (ruby:, references:, symbols:,
    #   debug_dir:, ...), checked here
    # @return [Proc] the handler
    # @raise [DumpDirectoryError] when `dir` cannot take dumps
    # @raise [ArgumentError] for an unknown signal or dump option
    def install_signal_handler(signal = "URG", dir: nil, fork: true, log: $stderr, **dump_options)
      if dir.nil?
        require "tmpdir"
        dir = Dir.tmpdir
      end
      SignalHandler.install(signal, dir: dir, fork: fork, log: log, dump_options: dump_options)
    end
  end

  class << self
    # A cheap reading of this process's memory: glibc's counters (mallinfo2), each arena's system
    # memory (main_arena's ring, followed as a dump follows it), the kernel's RSS figures and GC.stat's
    # heap figures. No chunk is walked and no file written. glibc's counters are read last, after the
    # Hash is built (and without the GVL: mallinfo2 visits every free chunk in the bins, 0.2 ms on an
    # application-shaped heap, about 100 ms on the bench heap of a million chunks; README has the
    # figures), so a
    # {dump} called right after sees the same malloc state.
    #
    # @param smaps [Boolean] also read /proc/self/smaps_rollup (Pss, private and shared pages): the
    #   kernel walks the page tables for it, 31 ms for 375 MiB resident
    # @return [Hash{Symbol=>Object}] :time (Float, Unix seconds), :pid, :malloc (mallinfo2's fields,
    #   bytes: :arena heap, :uordblks in use, :fordblks free, :hblkhd mmapped, ...), :arenas
    #   (`[{ address:, system_mem:, max_system_mem: }]`, main_arena first), :ring_ok (false when the
    #   ring does not lead back to main_arena: :malloc is then all zeros, mallinfo2 is not called),
    #   :rss (bytes: :vm_rss, :vm_hwm, :anonymous, :file_backed, :shmem, :swap and with smaps :pss,
    #   :private_dirty, :shared_clean, :shared_dirty, :rollup_rss) and :gc (GC.stat's heap figures
    #   and :ruby_pages_bytes)
    def stats(smaps: false)
      Stats.read(smaps: smaps)
    end
  end

  @dump_strings = [nil, nil, nil]
  warm_up
end

PtmallocDump.ruby_layer.warning&.then { |message| warn(message) }
