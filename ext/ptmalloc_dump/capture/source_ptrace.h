/* Another process as the source: its threads stopped with ptrace, read in place until copied
 * (capture/source_ptrace.c). */
#ifndef PTMD_SOURCE_PTRACE_H
#define PTMD_SOURCE_PTRACE_H

#include "capture/source.h"

/* Seizes and interrupts every thread of pid (re-listing /proc/PID/task until no new one appears),
 * waiting until each has stopped, and reads each one's thread_ptr. On failure every thread seized is
 * detached again. */
int ptmd_source_attach(ptmd_source *s, int pid, ptmd_err *err);
/* Detaches every seized thread (the target runs again) and records the pause; safe to call twice.
 * Threads of a target that exited meanwhile are reaped (but the leader when this process is its
 * parent, whose own wait is left its status). */
void ptmd_source_detach(ptmd_source *s);
/* Fails err with why pid may not be read (errno e from ptrace or from its /proc files): it exited,
 * another tracer holds it, another user's, Yama, a container. Returns -1. */
int ptmd_source_permission_error(int pid, int e, ptmd_err *err);
/* Whether the target has exited: no such process, a zombie, or its memory already gone. */
int ptmd_source_gone(const ptmd_source *s);
/* Test hook: with PTMALLOC_DUMP_TEST_KILL_TARGET=step in the environment, at that step of a dump of
 * another process ("seized": every thread stopped, before the lock check; "maps": its mappings read,
 * before pagemap; "copy": pagemap read, before the bytes) the target is sent SIGKILL, and this waits
 * (bounded) until its memory is gone, so that every step after meets a process that has exited. */
void ptmd_source_test_kill(const ptmd_source *s, const char *step);
/* Reads len bytes at the target's addr straight from the stopped target (before the copy). */
int ptmd_source_read_live(const ptmd_source *s, uint64_t addr, void *dst, size_t len);
/* A running process as a source while it is located: every read made in place (process_vm_readv),
 * but for one range read once into a region (libc's writable data, which the search by structure
 * reads word by word). Its values may be changing: what is found with it is checked again on the
 * copy. The region: -1 when the range cannot be read (reads stay in place). */
void ptmd_source_live(ptmd_source *s, int pid);
int ptmd_source_live_region(ptmd_source *s, uint64_t start, uint64_t end);

#endif
