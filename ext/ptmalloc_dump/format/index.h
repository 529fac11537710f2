/* Lookups over a dump's records, one of each for both directions (the walk in progress and a loaded
 * dump): a sort that never allocates, the heaps in address order, and the chunk at an address. */
#ifndef PTMD_INDEX_H
#define PTMD_INDEX_H

#include "format/format.h"

/* Heapsort of n elements of `size` bytes (at most 256): qsort may call malloc, which the capture must
 * not, and needs no context, which the load-time sorts do. cmp returns <0, 0 or >0. */
void ptmd_sort(void *base, size_t n, size_t size, int (*cmp)(const void *a, const void *b, void *ctx), void *ctx);

/* order[0 .. n) = the heap indices sorted by start. */
void ptmd_heap_order(const ptmd_heap_rec *heaps, size_t n, uint32_t *order);

typedef struct {
    const ptmd_heap_rec *heaps;
    const uint32_t *order; /* heap indices by start (ptmd_heap_order) */
    size_t n_heaps;
    const ptmd_chunk_rec *chunks; /* each heap's chunks tile it from its start, in address order */
} ptmd_chunk_index;

/* Index of the chunk starting at addr, or with `containing` the one whose bytes include addr; -1
 * when there is none. */
long ptmd_chunk_find(const ptmd_chunk_index *ix, uint64_t addr, int containing);

#endif
