/* The page residency of what the walk found (capture/residency.c). */
#ifndef PTMD_RESIDENCY_H
#define PTMD_RESIDENCY_H

#include "capture/walk_ctx.h"

/* Every heap's and mmapped chunk's pages into w->pages; in a snapshot child (w->sharing_from set) with
 * the exclusivity its parent read before the fork. */
int ptmd_walk_residency(ptmd_walk *w, ptmd_err *err);

/* A fork snapshot's parent, just before the fork: the PTMD_PAGE_* flags of its private writable
 * anonymous mappings from its own pagemap, into w->sharing and w->sharing_pages (sharing_taken set).
 * Opens w->src.pagemap. Without pagemap, or when the mappings cannot be read, nothing is taken and
 * the child says that sharing is unknown; -1 only when scratch cannot be mapped. */
int ptmd_residency_before_fork(ptmd_walk *w, ptmd_err *err);

#endif
