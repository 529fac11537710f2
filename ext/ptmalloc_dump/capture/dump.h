/* One dump in process from start to finish: locate, validate, walk, capture glibc's own counters,
 * write (capture/dump.c); the entry points of the others are dump_outside.h and dump_fork.h. */
#ifndef PTMD_DUMP_H
#define PTMD_DUMP_H

#include "capture/dump_state.h"

/* Prepares a zeroed state (file descriptors closed). Call before ptmd_dump_run or ptmd_dump_fork. */
void ptmd_dump_init(ptmd_dump_state *d);
/* What a dump would otherwise set up on its first call, allocating as it goes: the malloc_info()
 * stream, libc's location and symbols (default mode and debug directory) and the allocator check.
 * Called when the extension loads; a failure is left for the dump itself to report. */
void ptmd_dump_setup(void);
/* Runs a whole dump into `path`. d must come from ptmd_dump_init; release it with ptmd_dump_release. */
int ptmd_dump_run(ptmd_dump_state *d, const ptmd_dump_opts *opts, ptmd_err *err);
void ptmd_dump_release(ptmd_dump_state *d);

/* Every entry point's first and last step: one dump at a time in this process (PTMD_E_BUSY
 * otherwise); at the end, a file not finished is removed and the target let go. ptmd_dump_end
 * returns rc. */
int ptmd_dump_begin(ptmd_err *err);
int ptmd_dump_end(ptmd_dump_state *d, int rc);

#endif
