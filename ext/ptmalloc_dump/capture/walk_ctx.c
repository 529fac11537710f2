/* The walk's records and lookups, and the release of its state. */
#define _GNU_SOURCE
#include "capture/walk_ctx.h"
#include "format/index.h"

int ptmd_walk_anomaly(ptmd_walk *w, uint32_t kind, uint64_t address, uint64_t detail, uint32_t arena)
{
    ptmd_anomaly_rec *a = ptmd_buf_push(&w->anomalies, sizeof(*a));
    if (!a) return -1;
    a->kind = kind;
    a->address = address;
    a->detail = detail;
    a->arena = arena;
    if (arena != PTMD_NO_ARENA && arena < PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec))
        PTMD_W_ARENA(w, arena)->flags |= PTMD_AF_CORRUPT;
    return 0;
}

int ptmd_walk_sort_heaps(ptmd_walk *w)
{
    size_t n = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    w->heap_order.len = 0;
    if (!ptmd_buf_push(&w->heap_order, n * sizeof(uint32_t) + 1)) return -1;
    w->heap_order.len = n * sizeof(uint32_t);
    ptmd_heap_order((const ptmd_heap_rec *)(const void *)w->heaps.base, n, (uint32_t *)(void *)w->heap_order.base);
    return 0;
}

long ptmd_walk_find_chunk(ptmd_walk *w, uint64_t addr)
{
    ptmd_chunk_index ix = { (const ptmd_heap_rec *)(const void *)w->heaps.base,
                            (const uint32_t *)(const void *)w->heap_order.base,
                            PTMD_BUF_COUNT(&w->heap_order, uint32_t),
                            (const ptmd_chunk_rec *)(const void *)w->chunks.base };
    return ptmd_chunk_find(&ix, addr, 0);
}

void ptmd_walk_release(ptmd_walk *w)
{
    ptmd_buf *bufs[] = { PTMD_WALK_BUFFERS(w) };
    size_t i;
    for (i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ptmd_buf_release(bufs[i]);
    ptmd_maps_release(&w->maps);
    ptmd_source_release(&w->src);
}
