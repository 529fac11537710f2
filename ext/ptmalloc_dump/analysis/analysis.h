/* Page-level accounting and the figures the report shows (free runs, pinned pages, what malloc_trim
 * could return, the free-chunk histogram), computed from a loaded view. Plain C; runs offline. */
#ifndef PTMD_ANALYSIS_H
#define PTMD_ANALYSIS_H

#include "analysis/summary.h"

/* What a page holds, for the page map. */
typedef enum {
    PTMD_PC_UNTOUCHED = 0,      /* not resident, holds allocated bytes (never written, or dropped) */
    PTMD_PC_IN_USE,             /* resident, only in-use chunks (and metadata) */
    PTMD_PC_MIXED,              /* resident, in-use and free bytes, in-use >= 10% */
    PTMD_PC_PINNED,             /* resident, in-use bytes under 10% of the page keep it from being released */
    PTMD_PC_FREE_RESIDENT,      /* resident, free chunks only: the bloat */
    PTMD_PC_TOP,                /* resident, part of top */
    PTMD_PC_RELEASED,           /* free and not resident (released by free/trim, or never touched) */
    PTMD_PC_SWAPPED,            /* in swap */
    PTMD_PC_META,               /* allocator metadata only */
    PTMD_PC_COUNT
} ptmd_page_class;

typedef struct {
    uint32_t in_use, free, top, meta;   /* bytes of the page by what holds them */
} ptmd_page_usage;

/* usage[0 .. v->n_pages) (same indexing as the PAGES section). */
void ptmd_page_usage_fill(const ptmd_view *v, ptmd_page_usage *usage);
ptmd_page_class ptmd_page_classify(const ptmd_page_usage *u, uint8_t flags, uint64_t page_size);

typedef struct {
    uint64_t start, end;            /* a maximal run of adjacent free chunks */
    uint64_t resident;              /* bytes of it on resident pages */
    uint32_t heap, chunks;
} ptmd_free_run;

/* The n largest free runs by resident bytes, largest first; returns how many were found (<= n). */
size_t ptmd_largest_free_runs(const ptmd_view *v, ptmd_free_run *out, size_t n);

typedef struct {
    uint64_t address;               /* the page */
    uint32_t heap;
    uint32_t in_use;                /* in-use bytes on it */
    uint64_t first_chunk;           /* index of the first in-use chunk touching it */
    uint32_t n_chunks;              /* in-use chunks touching it */
    uint32_t reserved;
} ptmd_pinned_page;

/* Resident pages whose in-use bytes are more than 0 and under 10% of the page. Writes at most n,
 * least in-use first; returns the total number of such pages. */
size_t ptmd_pinned_pages(const ptmd_view *v, const ptmd_page_usage *usage, ptmd_pinned_page *out, size_t n,
                         uint64_t *pinned_bytes);

/* Resident bytes malloc_trim(0) could release, per arena (mtrim: the page-aligned interior of
 * every free chunk after fastbins are consolidated, and top beyond its first page). */
void ptmd_trim_estimate(const ptmd_view *v, uint64_t *per_arena);

#define PTMD_HIST_BUCKETS 40
/* Free chunks (not top) by size: bucket k holds sizes in [2^k, 2^(k+1)). */
void ptmd_free_histogram(const ptmd_view *v, uint64_t *counts, uint64_t *bytes);

#endif
