/* What holds chunks from outside the heap: data segments, stacks, TLS, registers (capture/roots.c). */
#ifndef PTMD_ROOTS_H
#define PTMD_ROOTS_H

#include "capture/walk_ctx.h"

/* The loaded objects' writable segments, the threads' stacks and TLS and the dumping thread's
 * registers, scanned for words equal to an allocated chunk's user address (after
 * ptmd_walk_references, whose map it uses). */
int ptmd_walk_roots(ptmd_walk *w, ptmd_err *err);
/* The loaded objects' writable segments into w->objects and the static TLS reach into w->tls_below and
 * w->tls_above, from dl_iterate_phdr (so never in a fork snapshot's child). 0, or -1 when out of memory. */
int ptmd_walk_objects(ptmd_walk *w);

#endif
