/* Enumerating this process's threads (struct pthread) to read their malloc TLS variables. */
#ifndef PTMD_THREADS_H
#define PTMD_THREADS_H

#include "walk.h"

/* Appends a ptmd_thread_rec for every live thread found on glibc's thread lists, with its tcache and
 * arena pointers read from its static TLS when the symbols give their offsets. Sets
 * w->thread_count and w->threads_complete. Never faults; returns -1 only when mmap fails. */
int ptmd_threads_collect(ptmd_walk *w);

#endif
