/* Dumps of another process and of a core file (capture/dump_outside.c). */
#ifndef PTMD_DUMP_OUTSIDE_H
#define PTMD_DUMP_OUTSIDE_H

#include "capture/dump_state.h"

/* A dump of another process (pid) into opts->path: libc located from its mappings, its memory copied
 * while it is stopped (outside.c), then walked; no Ruby pass, no references, no glibc counters. d must
 * come from ptmd_dump_init; release it with ptmd_dump_release. */
int ptmd_dump_process(ptmd_dump_state *d, const ptmd_dump_opts *opts, int pid, ptmd_err *err);
/* A dump of the process a core file was written from (gcore, or the kernel's): the same as of a live
 * process, read from the core's segments; no residency either. */
int ptmd_dump_core(ptmd_dump_state *d, const ptmd_dump_opts *opts, const char *core, ptmd_err *err);

#endif
