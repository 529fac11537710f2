/* The threads of the target and where each keeps its tcache pointer (capture/threads.c). */
#ifndef PTMD_THREADS_H
#define PTMD_THREADS_H

#include "capture/walk_ctx.h"

#define PTMD_TCACHE_STRUCT_MAX (PTMD_TCACHE_MAX_BINS_MAX * 10) /* bound on sizeof (tcache_perthread_struct) */

/* The threads into w->threads: glibc's own lists in this process (or the ones a snapshot's parent
 * gave), the stopped threads of a copy or a core. */
int ptmd_walk_threads(ptmd_walk *w, ptmd_err *err);
/* The `tcache` pointer of the thread whose struct pthread is at `pthread`, read fault-free from its
 * TLS block at tc_off; 0 when unreadable, unknown (tc_off < 0), none, or glibc 2.43's __tcache_dummy. */
uint64_t ptmd_thread_tcache(ptmd_walk *w, uint64_t pthread, long tc_off);

#endif
