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
/* Whether a struct pthread lies at base: on x86-64 its tcbhead_t's tcb and self point at it, on
 * aarch64 its robust list holds the futex_offset every thread sets (capture/arch.h). Read fault-free. */
int ptmd_is_pthread(ptmd_walk *w, uint64_t base);
/* The tid of the struct pthread at base (the pid_t right after its list_t, at list_off); 0 when
 * unreadable. */
int32_t ptmd_pthread_tid(ptmd_walk *w, uint64_t base, size_t list_off);

#endif
