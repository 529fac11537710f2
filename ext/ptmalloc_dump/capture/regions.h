/* The main arena's mmapped regions once sbrk failed (capture/regions.c). */
#ifndef PTMD_REGIONS_H
#define PTMD_REGIONS_H

#include "capture/walk_ctx.h"

/* The regions of a non-contiguous main arena, found among the mappings, appended to
 * w->heaps in address order (a->n_heaps counts them). */
int ptmd_main_regions(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err);

#endif
