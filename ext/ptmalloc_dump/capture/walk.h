/* The walk from start to end: arenas -> heaps -> chunks -> lists, then threads, mmapped chunks and
 * tcaches (capture/walk.c); each piece is in its own file. */
#ifndef PTMD_WALK_H
#define PTMD_WALK_H

#include "capture/walk_ctx.h"

/* Opens what the walk needs (maps, memory reader, pagemap) and reads mp_. May allocate: call it
 * before the walk. */
int ptmd_walk_prepare(ptmd_walk *w, const ptmd_libc *lc, ptmd_err *err);
/* In the parent of a snapshot, before fork (whose handler in glibc locks every arena along the ring,
 * for ever if it does not lead back): the ring into w->ring, a break recorded as an anomaly. Needs
 * only w->src open. 0 when the ring is whole, 1 when broken, -1 when out of memory. */
int ptmd_walk_ring_before_fork(ptmd_walk *w, const ptmd_libc *lc);
/* The whole walk: arenas (each under its own lock), threads, mmapped chunks, tcaches. */
int ptmd_walk_run(ptmd_walk *w, ptmd_err *err);
/* Every arena on the ring, each under its own lock. */
int ptmd_walk_arenas(ptmd_walk *w, ptmd_err *err);

#endif
