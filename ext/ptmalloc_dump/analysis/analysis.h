/* Page-level accounting and the figures the report shows (free runs, pinned pages, what malloc_trim
 * could return, the free-chunk histogram), computed from a loaded view. Plain C; runs offline. */
#ifndef PTMD_ANALYSIS_H
#define PTMD_ANALYSIS_H

#include "analysis/summary.h"

/* What a page holds, for the page map (a list as in format.h). */
#define PTMD_PAGE_CLASSES(X)                                                                                           \
    X(PTMD_PC_UNTOUCHED, 0, "untouched")         /* not resident, holds allocated bytes (never written, or dropped) */ \
    X(PTMD_PC_IN_USE, 1, "in_use")               /* resident, only in-use chunks (and metadata) */                     \
    X(PTMD_PC_MIXED, 2, "mixed")                 /* resident, in-use and free bytes, in-use >= 10% */                  \
    X(PTMD_PC_PINNED, 3, "pinned")               /* resident, in-use bytes under 10% keep it from being released */    \
    X(PTMD_PC_FREE_RESIDENT, 4, "free_resident") /* resident, free chunks only: the bloat */                           \
    X(PTMD_PC_TOP, 5, "top")                     /* resident, part of top */                                           \
    X(PTMD_PC_RELEASED, 6, "released")           /* free and not resident (released, or never touched) */              \
    X(PTMD_PC_SWAPPED, 7, "swapped")             /* in swap */                                                         \
    X(PTMD_PC_META, 8, "meta")                   /* allocator metadata only */
typedef enum { PTMD_PAGE_CLASSES(PTMD_ENUM_CONSTANT) PTMD_PC_COUNT = 9 } ptmd_page_class;
extern const char *const ptmd_page_class_names[PTMD_PC_COUNT];

typedef struct {
    uint32_t in_use, free, top, meta; /* bytes of the page by what holds them */
} ptmd_page_usage;

/* usage[0 .. v->n_pages) (same indexing as the PAGES section). */
void ptmd_page_usage_fill(const ptmd_view *v, ptmd_page_usage *usage);
ptmd_page_class ptmd_page_classify(const ptmd_page_usage *u, uint8_t flags, uint64_t page_size);

/* Pages by class: per_heap[h * PTMD_PC_COUNT + class] for every heap, and over all heaps the pages
 * and those of them still shared copy-on-write with a parent (pagemap only, not in a fork snapshot). */
void ptmd_page_class_counts(const ptmd_view *v, const ptmd_page_usage *usage, uint64_t *per_heap,
                            uint64_t pages[PTMD_PC_COUNT], uint64_t shared[PTMD_PC_COUNT]);

typedef struct {
    uint64_t start, end; /* a maximal run of adjacent free chunks */
    uint64_t resident;   /* bytes of it on resident pages */
    uint32_t heap, chunks;
} ptmd_free_run;

/* The n largest free runs by resident bytes, largest first; returns how many were found (<= n). */
size_t ptmd_largest_free_runs(const ptmd_view *v, ptmd_free_run *out, size_t n);

typedef struct {
    uint64_t address; /* the page */
    uint32_t heap;
    uint32_t in_use;      /* in-use bytes on it */
    uint64_t first_chunk; /* index of the first in-use chunk touching it */
    uint32_t n_chunks;    /* in-use chunks touching it */
    uint32_t reserved;
} ptmd_pinned_page;

/* Resident pages whose in-use bytes are more than 0 and under 10% of the page. Writes at most n,
 * least in-use first; returns the total number of such pages. */
size_t ptmd_pinned_pages(const ptmd_view *v, const ptmd_page_usage *usage, ptmd_pinned_page *out, size_t n,
                         uint64_t *pinned_bytes);

/* Up to max allocated chunks that hold a pinned page (the first touching it onward), as out[k] =
 * chunk index; returns how many were written. */
size_t ptmd_pinned_page_chunks(const ptmd_view *v, const ptmd_pinned_page *pin, uint64_t *out, size_t max);

/* Resident bytes malloc_trim(0) could release, per arena (mtrim: the page-aligned interior of
 * every free chunk after fastbins are consolidated, and top beyond its first page). */
void ptmd_trim_estimate(const ptmd_view *v, uint64_t *per_arena);

#define PTMD_HIST_BUCKETS 40
/* Free chunks (not top) by size: bucket k holds sizes in [2^k, 2^(k+1)). */
void ptmd_free_histogram(const ptmd_view *v, uint64_t *counts, uint64_t *bytes);

/* Allocated chunks (in use and mmapped) by size class: the exact size up to 1040 bytes (the tcache's
 * range, exact[size / 16]), then the next power of two (pow2[k] holds sizes in (2^(k-1), 2^k]). */
#define PTMD_EXACT_CLASSES 66
typedef struct {
    uint64_t exact_count[PTMD_EXACT_CLASSES], exact_bytes[PTMD_EXACT_CLASSES];
    uint64_t pow2_count[64], pow2_bytes[64];
} ptmd_size_classes;
void ptmd_size_classes_fill(const ptmd_view *v, ptmd_size_classes *out);

#endif
