# frozen_string_literal: true

require_relative "ptmalloc_dump/version"
require_relative "ptmalloc_dump/errors"
require "ptmalloc_dump/ptmalloc_dump"
require_relative "ptmalloc_dump/records"
require_relative "ptmalloc_dump/malloc_info"
require_relative "ptmalloc_dump/dump"
require_relative "ptmalloc_dump/verification"
require_relative "ptmalloc_dump/ruby_heap"
require_relative "ptmalloc_dump/format_helpers"
require_relative "ptmalloc_dump/text_summary"
require_relative "ptmalloc_dump/json_summary"
require_relative "ptmalloc_dump/geometry"
require_relative "ptmalloc_dump/report"

# Looks inside glibc's malloc (ptmalloc2) heap of the running Ruby process: every arena, heap and
# chunk, classified and reconciled with glibc's own counters, written to one file.
module PtmallocDump
  class << self
    # Dumps this process's malloc heap to +path+ (atomically, mode 0600). The walk runs with the GVL
    # held and each arena's own lock taken in turn; it calls no malloc, so the figures reconcile with
    # +mallinfo2()+ and +malloc_info()+ captured just before it. GC is disabled for the duration (and
    # restored, also on error).
    #
    # @param path [String, Pathname] where to write the dump
    # @param debug_dir [String, nil] where libc's debug symbols live (default:
    #   +ENV["PTMALLOC_DUMP_DEBUG_DIR"]+, else /usr/lib/debug)
    # @param ruby [Boolean] also record ObjectSpace's pages and live objects (see {Dump#ruby})
    # @param references [Boolean] also record, for every in-use chunk, which of its aligned words
    #   equal another chunk's user address, so ownership follows pointers between chunks (slower)
    # @return [Hash{Symbol=>Object}] the dump's summary (see {Dump#summary}, without :ruby) plus :path
    # @raise [SymbolsNotFoundError] when libc's symbols cannot be found
    # @raise [UnsupportedLibcError] when this glibc's malloc is not understood
    # @raise [UnsupportedAllocatorError] when malloc is not glibc's
    # @raise [SystemCallError] when the file cannot be written (the target is left untouched)
    def dump(path, debug_dir: nil, ruby: true, references: false)
      path = path.to_s
      # an absolute path is used as given: no new string is allocated before glibc's counters are taken
      path = File.expand_path(path) unless path.start_with?("/")
      gc_was_disabled = GC.disable
      begin
        summary = _dump(path, debug_dir&.to_s, dump_strings, ruby, references)
      ensure
        GC.enable unless gc_was_disabled
      end
      summary[:path] = path
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

    # Where libc, its build-id and its symbols were found, without dumping.
    #
    # @param debug_dir [String, nil] as for {dump}
    # @return [Hash{Symbol=>Object}]
    def libc_info(debug_dir: nil)
      _libc_info(debug_dir&.to_s)
    end

    private

    # Built once: a dump should allocate as little as possible before glibc's counters are taken.
    def dump_strings
      program = $PROGRAM_NAME.to_s
      @dump_strings = nil unless @dump_strings && @dump_strings[5].equal?(program)
      @dump_strings ||= ["ruby_version", RUBY_DESCRIPTION, "gem_version", VERSION, "program", program].freeze
    end
  end
end
