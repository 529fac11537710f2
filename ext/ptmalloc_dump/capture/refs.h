/* The pointer graph between chunks (capture/refs.c). */
#ifndef PTMD_REFS_H
#define PTMD_REFS_H

#include "capture/walk_ctx.h"

/* Scans in-use chunks for words equal to another chunk's user address (w->refs, w->int_refs), or
 * pointing into its user data past the start (w->inner_refs). */
int ptmd_walk_references(ptmd_walk *w, ptmd_err *err);
/* The chunk-start map over the walk's heaps (called by ptmd_walk_references); then the index of
 * the allocated chunk whose user address is mem, in O(1), or -1. */
int ptmd_walk_build_chunk_map(ptmd_walk *w);
long ptmd_refs_chunk_of_mem(const ptmd_walk *w, uint64_t mem);
/* The index of the allocated chunk whose user data holds addr past its first byte (an interior
 * pointer), by binary search over its heap's chunks, or -1. */
long ptmd_refs_chunk_inside(const ptmd_walk *w, uint64_t addr);

#endif
