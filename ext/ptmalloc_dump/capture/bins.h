/* The arena's lists: fastbins, bins and what the chunk walk notes for them (capture/bins.c). */
#ifndef PTMD_BINS_H
#define PTMD_BINS_H

#include "capture/walk_ctx.h"

/* The membership table of the arena's fastbin entries (and of bin entries that are no
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
    uint32_t rec;   /* its chunk record */
    uint32_t large; /* a large chunk's nextsize pair: w->large_notes[large - 1]; else 0 */
} ptmd_free_note;
typedef struct {
    uint64_t fd_nextsize, bk_nextsize;
} ptmd_large_note;
/* And what following the bins needs of it, small enough to stay in cache (w->note_links). */
typedef struct {
    uint32_t next;   /* the note fd points at, or UINT32_MAX */
    uint8_t link_ok; /* and that note's bk points back here */
    uint8_t want;    /* the bin its size belongs in */
    uint8_t in_fast; /* a fastbin lists it too */
    uint8_t bin;     /* the bin whose list holds it; 0 while none */
} ptmd_note_link;
/* After the arena's heaps are walked: its bins followed through the notes, each noted chunk given its
 * bin's state, and every chunk or list entry the lists and the bits disagree on recorded. */
int ptmd_settle_lists(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err);

#endif
