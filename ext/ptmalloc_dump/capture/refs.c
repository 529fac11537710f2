/* references: true. A conservative scan of every in-use chunk's contents for aligned words equal to
 * another chunk's user address (chunk + 16); records (from, to) chunk indices, never the contents.
 * Arena chunks are read under their arena's lock; mmapped chunks, which any thread may unmap, through
 * the fault-free reader. */
#define _GNU_SOURCE
#include "capture/walk.h"

#include <errno.h>

#define PTMD_REFS_BLOCK 8192          /* words per fault-free read of an mmapped chunk */

typedef struct {
    uint64_t lo, hi;                  /* all heaps: a quick range test before any search */
} span;

static int add_ref(ptmd_walk *w, uint64_t from, uint64_t word, const span *sp)
{
    long to;
    ptmd_ref *r;
    if ((word & PTMD_MALLOC_ALIGN_MASK) || word < sp->lo + PTMD_CHUNK_HDR_SZ || word >= sp->hi) return 0;
    to = ptmd_walk_find_chunk(w, word - PTMD_CHUNK_HDR_SZ);
    if (to < 0 || (uint64_t)to == from || !ptmd_rec_is_allocated(PTMD_W_CHUNK(w, to))) return 0;
    r = ptmd_buf_push(&w->refs, sizeof(*r));
    if (!r) return -1;
    r->from = (uint32_t)from;
    r->to = (uint32_t)to;
    return 0;
}

/* An arena chunk in use owns its usable bytes: from mem up to and including the next chunk's
 * prev_size field (malloc_usable_size = chunksize - SIZE_SZ). */
static int scan_direct(ptmd_walk *w, uint64_t ci, uint64_t heap_end, const span *sp)
{
    const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
    uint64_t p = c->addr + PTMD_CHUNK_HDR_SZ, end = c->addr + ptmd_rec_size(c) + PTMD_SIZE_SZ;
    if (end > heap_end) end = heap_end;
    for (; p + 8 <= end; p += 8)
        if (add_ref(w, ci, ptmd_rd64(p), sp) != 0) return -1;
    return 0;
}

static int scan_safe(ptmd_walk *w, uint64_t ci, const span *sp)
{
    uint64_t buf[PTMD_REFS_BLOCK];
    const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
    uint64_t p = c->addr + PTMD_CHUNK_HDR_SZ, end = c->addr + ptmd_rec_size(c);
    while (p + 8 <= end) {
        uint64_t n = (end - p) / 8, k;
        if (n > PTMD_REFS_BLOCK) n = PTMD_REFS_BLOCK;
        if (ptmd_safe_read(&w->mem, p, buf, n * 8) != 0) return 0;   /* unmapped meanwhile */
        for (k = 0; k < n; k++)
            if (add_ref(w, ci, buf[k], sp) != 0) return -1;
        p += n * 8;
    }
    return 0;
}

int ptmd_walk_references(ptmd_walk *w, ptmd_err *err)
{
    size_t a, na = PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec), nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), h;
    span sp = { UINT64_MAX, 0 };
    uint64_t t0 = ptmd_now_ns();
    if (!w->references) return 0;
    if (ptmd_walk_sort_heaps(w) != 0) return ptmd_fail_sys(err, errno, "heap index", "mmap");
    for (h = 0; h < nh; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        if (hp->start < sp.lo) sp.lo = hp->start;
        if (hp->end > sp.hi) sp.hi = hp->end;
    }
    for (a = 0; a < na; a++) {
        const ptmd_arena_rec *ar = PTMD_W_ARENA(w, a);
        int *mutex = (int *)(void *)(uintptr_t)(ar->address + w->L->ms_mutex);
        uint32_t k;
        ptmd_arena_lock(w, mutex);
        for (k = 0; k < ar->n_heaps; k++) {
            const ptmd_heap_rec *hp = PTMD_W_HEAP(w, ar->first_heap + k);
            uint64_t ci, end = hp->first_chunk + hp->n_chunks;
            /* only what is still there: the heap may have shrunk since the walk */
            for (ci = hp->first_chunk; ci < end; ci++) {
                const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
                if (ptmd_rec_state(c) != PTMD_ST_IN_USE) continue;
                if (!ptmd_maps_readable(&w->maps, c->addr, ptmd_rec_size(c))) break;
                if (scan_direct(w, ci, hp->end, &sp) != 0) {
                    ptmd_arena_unlock(mutex);
                    return ptmd_fail_sys(err, errno, "reference table", "mmap");
                }
            }
        }
        ptmd_arena_unlock(mutex);
    }
    for (h = 0; h < nh; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        uint64_t ci;
        if (hp->kind != PTMD_HEAP_MMAPPED_CHUNK) continue;
        for (ci = hp->first_chunk; ci < hp->first_chunk + hp->n_chunks; ci++)
            if (ptmd_rec_state(PTMD_W_CHUNK(w, ci)) == PTMD_ST_MMAPPED && scan_safe(w, ci, &sp) != 0)
                return ptmd_fail_sys(err, errno, "reference table", "mmap");
    }
    w->refs_ns = ptmd_now_ns() - t0;
    return 0;
}
