/* What the arena and walk files share about the arena being walked (capture only). */
#ifndef PTMD_ARENA_H
#define PTMD_ARENA_H

#include "capture/walk.h"

#define PTMD_MAX_ARENAS 65536
#define PTMD_MAX_HEAPS_PER_ARENA 65536

/* One arena as the walk sees it. */
typedef struct {
    uint32_t index;
    uintptr_t av;
    int main;
    uint64_t top, top_size, top_end;
    uint32_t first_heap, n_heaps;   /* into w->heaps */
    uint64_t bound;                 /* most chunks the arena's memory could hold */
    int maps_reloaded;              /* /proc/self/maps read again under this arena's lock */
    size_t fast_entries;
    int heaps_broken;               /* the heap_info chain did not end well (a cycle, a bad heap_info) */
    int heaps_sorted;               /* its heaps are in address order (the main arena's regions) */
} ptmd_arena_ctx;

/* True when [p, p+len) lies inside one of the arena's heaps (and so was checked readable). */
int ptmd_in_arena(ptmd_walk *w, const ptmd_arena_ctx *a, uint64_t p, uint64_t len);
/* A field of the malloc_state at av (0 where this version has no such field). */
uint64_t ptmd_arena_field(ptmd_walk *w, uintptr_t av, size_t off);
/* Reads the mappings again, at most once per arena; true when that happened. */
int ptmd_arena_maps_reload(ptmd_walk *w, ptmd_arena_ctx *a);
/* Collects the arena's heaps (oldest first) into w->heaps and sets a->first_heap, a->n_heaps. */
int ptmd_arena_collect_heaps(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err);
/* Whether av can be the next arena on the ring (main_arena, or a malloc_state after its heap_info). */
int ptmd_arena_ok(ptmd_walk *w, uintptr_t av);
/* Follows the ring from main_arena into w->ring. Returns 0 when it leads back to main_arena, 1 when
 * it breaks (a next that is no arena, or one already on it: recorded when `record`), -1 when out of
 * memory. */
int ptmd_arena_ring(ptmd_walk *w, int record);

/* regions.c: the regions of a non-contiguous main arena, found among the mappings, appended to
 * w->heaps in address order (a->n_heaps counts them). */
int ptmd_main_regions(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err);

/* bins.c: the membership table of the arena's fastbin entries (and of bin entries that are no
 * noted chunk), filled by ptmd_collect_fastbins before the walk and consulted by it */
typedef struct {
    uint64_t addr;
    uint32_t state;
    uint32_t seen;
} ptmd_list_slot;
int ptmd_collect_fastbins(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err);
ptmd_list_slot *ptmd_lists_find(ptmd_walk *w, uint64_t addr);

/* A chunk free by its bits, as the walk found it (w->notes, one arena at a time); its size is its
 * record's. */
typedef struct {
    uint64_t addr, fd, bk;
    uint32_t rec;                   /* its chunk record */
    uint32_t large;                 /* a large chunk's nextsize pair: w->large_notes[large - 1]; else 0 */
} ptmd_free_note;
typedef struct {
    uint64_t fd_nextsize, bk_nextsize;
} ptmd_large_note;
/* And what following the bins needs of it, small enough to stay in cache (w->note_links). */
typedef struct {
    uint32_t next;                  /* the note fd points at, or UINT32_MAX */
    uint8_t link_ok;                /* and that note's bk points back here */
    uint8_t want;                   /* the bin its size belongs in */
    uint8_t in_fast;                /* a fastbin lists it too */
    uint8_t bin;                    /* the bin whose list holds it; 0 while none */
} ptmd_note_link;
/* After the arena's heaps are walked: its bins followed through the notes, each noted chunk given its
 * bin's state, and every chunk or list entry the lists and the bits disagree on recorded. */
int ptmd_settle_lists(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err);

#endif
