/* The chunks of one heap, header by header (capture/chunks.c). */
#ifndef PTMD_CHUNKS_H
#define PTMD_CHUNKS_H

#include "capture/walk_ctx.h"

/* Walks heap_index's chunks from its first (after heap_info and the arena), noting the free ones for
 * the lists and the possible tcache structs. */
int ptmd_walk_heap_chunks(ptmd_walk *w, ptmd_arena_ctx *a, uint32_t heap_index, ptmd_err *err);

#endif
