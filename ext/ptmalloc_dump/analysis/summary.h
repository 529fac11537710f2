/* Figures computed from the chunk records alone (never copied from glibc's counters), so they can be
 * checked against mallinfo2() and malloc_info(): the return value of a dump and Dump#summary. */
#ifndef PTMD_SUMMARY_H
#define PTMD_SUMMARY_H

#include "format/view.h"
#include <stddef.h>

typedef struct {
    uint64_t count[PTMD_ST_COUNT], bytes[PTMD_ST_COUNT];
    /* mallinfo2's fields, by glibc's rules */
    uint64_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
    /* residency of all bytes accounted (heaps and mmapped chunks) */
    uint64_t resident_bytes, swapped_bytes, absent_bytes, shared_bytes;
    uint64_t sharing_unknown_bytes; /* resident, and whether still shared is not known */
    /* free chunks (tcache, fastbin, bins, top) by residency: free_resident is the bloat */
    uint64_t free_resident_bytes, free_swapped_bytes, free_released_bytes;
    uint64_t largest_free; /* largest free chunk other than top */
    uint64_t heap_count, chunk_count;
    /* malloc_info's "rest" size: top plus the bin chunks' sizes with their flag bits (it reads
     * chunksize_nomask) */
    uint64_t malloc_info_rest_size;
} ptmd_totals;

typedef struct {
    uint64_t from, to, total, count;
} ptmd_binstat;

typedef struct {
    ptmd_totals t;
    ptmd_binstat fast[10];  /* per fastbin index */
    ptmd_binstat bins[128]; /* bins[1] unsorted, 2..63 small, 64..126 large (bin_index) */
} ptmd_arena_summary;

/* Fills *total and per_arena[0 .. v->n_arenas). */
void ptmd_summarize(const ptmd_view *v, ptmd_totals *total, ptmd_arena_summary *per_arena);

#endif
