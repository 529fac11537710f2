/* Every thread's tcache and the chunks it holds (capture/tcache.c). */
#ifndef PTMD_TCACHE_H
#define PTMD_TCACHE_H

#include "capture/walk_ctx.h"

/* After the arenas, the threads and the mmapped chunks: each tcache found and its entries recorded. */
int ptmd_walk_tcaches(ptmd_walk *w, ptmd_err *err);

#endif
