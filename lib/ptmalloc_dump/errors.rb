# frozen_string_literal: true

module PtmallocDump
  # Base class of every error the gem raises on purpose. System call failures (a missing directory,
  # a full disk) are raised as the matching +Errno::*+ exception instead, with the path in the message.
  class Error < StandardError; end

  # No symbol file for this libc was found. The message names the build-id, the paths tried and the
  # package to install (+libc6-dbg+ on Debian/Ubuntu).
  class SymbolsNotFoundError < Error; end

  # The glibc version is outside the layouts the gem knows, or the live malloc structures do not
  # match them. Nothing is walked in that case.
  class UnsupportedLibcError < Error; end

  # +malloc+ in this process is not glibc's (jemalloc, tcmalloc, ...).
  class UnsupportedAllocatorError < Error; end

  # +ptmalloc-dump --track+ cannot track the command: it is not found, statically linked (so
  # +LD_PRELOAD+ cannot reach its malloc), or its malloc is not glibc's; or the tracker library is
  # missing. Nothing is started.
  class TrackError < Error; end

  # Not Linux on x86-64 or aarch64 with glibc.
  class UnsupportedPlatformError < Error; end

  # A dump file is empty, truncated, corrupt, foreign or of a newer format.
  class FormatError < Error; end

  # The directory given to {PtmallocDump.install_signal_handler} cannot take dumps: missing, not a
  # directory, not writable, or a symbolic link (whose target could change under the worker). Raised
  # when the handler is installed, not when the signal arrives.
  class DumpDirectoryError < Error; end

  # A report's output directory cannot be made: its parent directory does not exist (it is not made
  # for you, so that a mistyped path does not scatter directories).
  class OutputDirectoryError < Error; end

  # A dump is already running in this process (for example a signal arrived during another dump).
  class BusyError < Error; end

  # The heap is damaged in a way that rules out what was asked: a fork snapshot of a process whose
  # arena ring does not lead back to +main_arena+ (glibc's fork would lock arenas for ever). The
  # message says what is broken; an in-process dump records the damage as anomalies instead.
  class HeapDamagedError < Error; end

  # Another process may not be traced: Yama's +ptrace_scope+, a process of another user, or no
  # +CAP_SYS_PTRACE+ (a container). The message says which and what to do.
  class PtracePermissionError < Error; end

  # The process to read does not exist, or exited while it was being read.
  class TargetGoneError < Error; end

  # An arena of the process to read was locked each time it was stopped (a thread inside malloc or
  # free, or stuck there): its lists may be half changed, so it is not walked. The message names the
  # arena; trying again later usually succeeds.
  class ArenaLockedError < Error; end

  # A core file cannot be read: not an ELF core, of another architecture, truncated, or without the
  # notes that say which files and threads it holds. The message says which.
  class CoreFileError < Error; end

  # A thread of the process to read did not stop within 2 s of being interrupted (it sleeps
  # uninterruptibly, on a disk or a network file system perhaps): nothing was read, and every thread
  # runs again. Trying again later usually succeeds.
  class StopTimeoutError < Error; end

  # The dump holds no Ruby object graph, so it cannot say who keeps memory alive: it was written with
  # `graph: false` or `ruby: false`, in process with the default `graph: :auto`, from outside the
  # process or from a core, by an older version, or by a Ruby that does not give the graph. The
  # message says which.
  class NoGraphError < Error; end

  # Allocation tracing cannot start: it is already on ({PtmallocDump.stop_allocation_tracing} first), or
  # its tables could not be mapped. The message says which.
  class TracingError < Error; end

  # The dump holds no allocation sites: it was not taken while {PtmallocDump.trace_allocations} was on,
  # or it holds no Ruby heap (`ruby: false`, from outside the process or from a core), or an older
  # version wrote it. The message says which.
  class NoSitesError < Error; end
end
