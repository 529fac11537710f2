/* The mmapped chunks, found among the anonymous mappings (capture/mmapped.c). */
#ifndef PTMD_MMAPPED_H
#define PTMD_MMAPPED_H

#include "capture/walk_ctx.h"

/* Every mmapped chunk into w->heaps and w->chunks, checked against mp_'s counts. */
int ptmd_walk_mmapped(ptmd_walk *w, ptmd_err *err);

#endif
