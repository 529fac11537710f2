/* The whole RSS, accounted: every resident byte of the dumped process in one part, from the heaps'
 * page residency, the Ruby pages' residency and the mappings (smaps). Plain C; runs offline. */
#ifndef PTMD_RSS_H
#define PTMD_RSS_H

#include "analysis/summary.h"

#define PTMD_RSS_PARTS(X)                                                                                              \
    X(PTMD_RSS_MALLOC_IN_USE, 0, "malloc_in_use")                                                                      \
    X(PTMD_RSS_MALLOC_FREE, 1, "malloc_free_resident") /* free chunks' resident pages */                               \
    X(PTMD_RSS_MALLOC_META, 2, "malloc_metadata")      /* heap_info, arenas, tcache structs, fenceposts */             \
    X(PTMD_RSS_MMAPPED, 3, "mmapped_chunks")                                                                           \
    X(PTMD_RSS_RUBY_PAGES, 4, "ruby_pages") /* Ruby's object pages outside malloc */                                   \
    X(PTMD_RSS_STACKS, 5, "stacks")         /* thread and fiber stacks */                                              \
    X(PTMD_RSS_FILE, 6, "file_backed")                                                                                 \
    X(PTMD_RSS_OTHER_ANON, 7, "other_anonymous")                                                                       \
    X(PTMD_RSS_TRACKING, 8, "allocation_tracking") /* the allocation tracker's own tables (ptmalloc-dump --track) */   \
    X(PTMD_RSS_SCRATCH, 9, "dump_scratch")         /* the in-process dump's own scratch mappings */
enum { PTMD_RSS_PARTS(PTMD_ENUM_CONSTANT) PTMD_RSS_COUNT = 10 };
extern const char *const ptmd_rss_part_names[PTMD_RSS_COUNT];

typedef struct {
    uint64_t part[PTMD_RSS_COUNT];
    uint64_t total;  /* the parts' sum */
    uint64_t vm_rss; /* the kernel's VmRSS at the capture */
    /* bytes counted from page residency beyond smaps' Rss for their mapping: the two were read at
     * different moments (a fork snapshot's pagemap at the fork, its parent's smaps after it, while the
     * parent runs on and may give pages back), so total exceeds smaps' sum by this much */
    uint64_t overshoot;
} ptmd_rss;

/* Fills out and file_bytes[0 .. v->n_mappings) (the bytes each file-backed mapping adds to
 * file_backed, else 0). Returns 0, -1 when the dump has no mappings or memory runs out. */
int ptmd_rss_account(const ptmd_view *v, ptmd_rss *out, uint64_t *file_bytes);

#endif
