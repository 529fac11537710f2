/* An arena before and while it is walked: its lock, its fields, its heaps, the ring (capture/arena.c). */
#ifndef PTMD_ARENA_H
#define PTMD_ARENA_H

#include "capture/walk_ctx.h"

#define PTMD_MAX_ARENAS 65536
#define PTMD_MAX_HEAPS_PER_ARENA 65536

/* glibc's arena mutex protocol (lll_lock / lll_unlock, private futex); a copy's locks are not taken */
void ptmd_arena_lock(ptmd_walk *w, int *futex);
void ptmd_arena_unlock(ptmd_walk *w, int *futex);
/* Checks main_arena and the arena ring before anything is walked (UnsupportedLibcError on failure). */
int ptmd_walk_validate(ptmd_walk *w, ptmd_err *err);
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

#endif
