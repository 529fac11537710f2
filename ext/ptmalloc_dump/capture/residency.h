/* The page residency of what the walk found (capture/residency.c). */
#ifndef PTMD_RESIDENCY_H
#define PTMD_RESIDENCY_H

#include "capture/walk_ctx.h"

/* Every heap's and mmapped chunk's pages into w->pages. */
int ptmd_walk_residency(ptmd_walk *w, ptmd_err *err);

#endif
