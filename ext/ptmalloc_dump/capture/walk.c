/* The walk from start to end: every arena on the ring, each under its own mutex (arena.c), its heaps'
 * chunks (chunks.c) and lists (bins.c); then the threads, the mmapped chunks and the tcaches. Nothing
 * here calls malloc. */
#define _GNU_SOURCE
#include "capture/walk.h"
#include "capture/source_self.h"
#include "capture/arena.h"
#include "capture/bins.h"
#include "capture/chunks.h"
#include "capture/mmapped.h"
#include "capture/tcache.h"
#include "capture/threads.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static int walk_arena(ptmd_walk *w, uintptr_t av, uint32_t index, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    ptmd_arena_rec *ar = ptmd_buf_push(&w->arenas, sizeof(*ar));
    ptmd_arena_ctx a;
    int *mutex = (int *)(void *)(av + L->ms_mutex);
    uint64_t heap_bytes = 0;
    uint32_t i;
    int rc = 0;

    if (!ar) return ptmd_fail_sys(err, errno, "arena table", "mmap");
    memset(&a, 0, sizeof(a));
    a.index = index;
    a.av = av;
    a.main = av == w->lc->main_arena;

    ptmd_arena_lock(w, mutex);
    ar = PTMD_W_ARENA(w, index);
    ar->address = av;
    ar->flags = PTMD_AF_LOCKED | (a.main ? PTMD_AF_MAIN : 0);
    ar->glibc_flags = (uint32_t)ptmd_mapped_word(w, av + L->ms_flags);
    if (ar->glibc_flags & PTMD_NONCONTIGUOUS_BIT) ar->flags |= PTMD_AF_NONCONTIGUOUS;
    if (L->ms_have_fastchunks != PTMD_NONE && (uint32_t)ptmd_mapped_word(w, av + L->ms_have_fastchunks))
        ar->flags |= PTMD_AF_HAVE_FASTCHUNKS;
    a.top = ptmd_arena_field(w, av, L->ms_top);
    if (!ptmd_maps_readable(&w->maps, a.top, 16)) ptmd_arena_maps_reload(w, &a);
    a.top_size = ptmd_maps_readable(&w->maps, a.top, 16) ? ptmd_chunksize(ptmd_mchunk_size(w, a.top)) : 0;
    a.top_end = a.top + a.top_size;
    ar->top = a.top;
    ar->top_size = a.top_size;
    ar->last_remainder = ptmd_arena_field(w, av, L->ms_last_remainder);
    ar->system_mem = ptmd_arena_field(w, av, L->ms_system_mem);
    ar->max_system_mem = ptmd_arena_field(w, av, L->ms_max_system_mem);
    ar->next = ptmd_arena_field(w, av, L->ms_next);
    ar->next_free = ptmd_arena_field(w, av, L->ms_next_free);
    ar->attached_threads = ptmd_arena_field(w, av, L->ms_attached_threads);

    if ((rc = ptmd_arena_collect_heaps(w, &a, err)) != 0) goto out;
    if (a.heaps_broken) w->lists_unsafe = 1; /* the lists' bounds come from the heaps */
    for (i = 0; i < a.n_heaps; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, a.first_heap + i);
        heap_bytes += h->end - h->start;
        if (h->kind == PTMD_HEAP_SBRK && w->have_mp) heap_bytes -= ptmd_sbrk_pad(h->start, w->sbrk_base);
    }
    a.bound = heap_bytes / PTMD_MINSIZE + 1;
    if ((rc = ptmd_collect_fastbins(w, &a, err)) != 0) goto out;
    for (i = 0; i < a.n_heaps; i++)
        if ((rc = ptmd_walk_heap_chunks(w, &a, a.first_heap + i, err)) != 0) goto out;
    if ((rc = ptmd_settle_lists(w, &a, err)) != 0) goto out;
    if (a.n_heaps && heap_bytes != PTMD_W_ARENA(w, index)->system_mem)
        ptmd_walk_anomaly(w, PTMD_AN_SYSTEM_MEM, av, heap_bytes, index);
out:
    ptmd_arena_unlock(w, mutex);
    ar = PTMD_W_ARENA(w, index);
    ar->first_heap = a.first_heap;
    ar->n_heaps = a.n_heaps;
    return rc;
}

/* The ring as it is now (a thread may have made an arena since it was validated): each arena on it
 * once, up to where it breaks. */
int ptmd_walk_arenas(ptmd_walk *w, ptmd_err *err)
{
    size_t i;
    int ring = ptmd_arena_ring(w, 1);
    if (ring < 0) return ptmd_fail_sys(err, errno, "arena ring", "mmap");
    if (ring > 0) w->lists_unsafe = 1;
    for (i = 0; i < PTMD_BUF_COUNT(&w->ring, uint64_t); i++)
        if (walk_arena(w, PTMD_BUF_AT(&w->ring, uint64_t, i)[0], (uint32_t)i, err) != 0) return -1;
    return 0;
}

/* ---- the walk from start to end ---------------------------------------------------------- */

/* heap_max_size (): 4 huge pages when hugetlb arenas are configured (2.35 .. 2.41) */
static uint64_t heap_max_size(const ptmd_layout *L, uint64_t hp_pagesize)
{
    if (L->heap_max_fixed || !hp_pagesize || (hp_pagesize & (hp_pagesize - 1))) return PTMD_DEFAULT_HEAP_MAX_SIZE;
    return hp_pagesize * 4;
}

int ptmd_walk_ring_before_fork(ptmd_walk *w, const ptmd_libc *lc)
{
    const ptmd_layout *L = lc->layout;
    uint64_t hp = 0;
    w->lc = lc;
    w->L = L;
    if (lc->mp && L->mp_hp_pagesize != PTMD_NONE) ptmd_guarded_copy(w, lc->mp + L->mp_hp_pagesize, &hp, 8);
    w->heap_max = heap_max_size(L, hp);
    return ptmd_arena_ring(w, 1);
}

int ptmd_walk_prepare(ptmd_walk *w, const ptmd_libc *lc, ptmd_err *err)
{
    const ptmd_layout *L = lc->layout;
    long ps = sysconf(_SC_PAGESIZE);
    w->lc = lc;
    w->L = L;
    w->page_size = ps > 0 ? (size_t)ps : 4096;
    if (!w->src.ops || w->src.in_place) {
        /* this process, unless another source was opened */
        if (ptmd_maps_load(&w->maps, err) != 0) return -1;
        if (ptmd_source_self(&w->src, err) != 0) return -1;
        if (ptmd_pagemap_open(&w->src.pagemap, err) != 0) return -1;
    } else {
        /* a copy: its mappings were read while the target was stopped, its residency with it */
        w->src.pagemap.page_size = w->page_size;
        w->src.pagemap.source = PTMD_RESIDENCY_PAGEMAP;
    }
    w->heap_max = PTMD_DEFAULT_HEAP_MAX_SIZE;
    if (lc->mp && ptmd_maps_readable(&w->maps, lc->mp, L->mp_size)) {
        uint32_t n;
        w->have_mp = 1;
        w->sbrk_base = ptmd_mapped_word(w, lc->mp + L->mp_sbrk_base);
        n = (uint32_t)ptmd_mapped_word(w, lc->mp + L->mp_n_mmaps);
        w->n_mmaps = n;
        w->mmapped_mem = ptmd_mapped_word(w, lc->mp + L->mp_mmapped_mem);
        if (L->mp_tcache_count != PTMD_NONE) w->tcache_count_max = ptmd_mapped_word(w, lc->mp + L->mp_tcache_count);
        if (L->mp_tcache_bins != PTMD_NONE) w->tcache_bins = ptmd_mapped_word(w, lc->mp + L->mp_tcache_bins);
        if (L->mp_hp_pagesize != PTMD_NONE)
            w->heap_max = heap_max_size(L, ptmd_mapped_word(w, lc->mp + L->mp_hp_pagesize));
    }
    if (lc->tcache_key && ptmd_maps_readable(&w->maps, lc->tcache_key, 8)) {
        w->tcache_key = ptmd_mapped_word(w, lc->tcache_key);
        w->have_tcache_key = 1;
    }
    /* the walk's buffers are mapped now, so the mmapped-chunk scan sees them and their growth is rare */
    if (ptmd_buf_reserve(&w->chunks, 1u << 20) != 0 || ptmd_buf_reserve(&w->heaps, 1u << 16) != 0 ||
        ptmd_buf_reserve(&w->arenas, 1u << 16) != 0 || ptmd_buf_reserve(&w->anomalies, 1u << 16) != 0 ||
        ptmd_buf_reserve(&w->threads, 1u << 16) != 0 || ptmd_buf_reserve(&w->tcache_cands, 1u << 16) != 0 ||
        ptmd_buf_reserve(&w->lists, 1u << 16) != 0 || ptmd_buf_reserve(&w->gone, 1u << 12) != 0 ||
        ptmd_buf_reserve(&w->notes, 1u << 20) != 0 || ptmd_buf_reserve(&w->note_index, 1u << 16) != 0 ||
        ptmd_buf_reserve(&w->note_links, 1u << 16) != 0 || ptmd_buf_reserve(&w->large_notes, 1u << 16) != 0)
        return ptmd_fail_sys(err, errno, "walk buffers", "mmap");
    return 0;
}

int ptmd_walk_run(ptmd_walk *w, ptmd_err *err)
{
    if (ptmd_walk_arenas(w, err) != 0) return -1;
    /* the mmapped-chunk scan skips thread stacks, and from glibc 2.43 a tcache can hold mmapped
     * chunks: threads, then mmapped chunks, then the tcaches */
    if (ptmd_walk_threads(w, err) != 0) return -1;
    if (ptmd_walk_mmapped(w, err) != 0) return -1;
    if (ptmd_walk_tcaches(w, err) != 0) return -1;
    return 0;
}
