/* The walk: every chunk of each arena's heaps, each arena under its own mutex (arena.c), with the
 * fastbin and bin lists (bins.c) deciding what a chunk's bits cannot (fastbin chunks look in use);
 * the records' index for lookups; and the walk from start to end. Nothing here calls malloc. */
#define _GNU_SOURCE
#include "capture/arena.h"
#include "format/index.h"

#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- records ------------------------------------------------------------------------------ */

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

static inline int push_chunk(ptmd_walk *w, uint64_t addr, uint64_t size, int state, uint64_t flags)
{
    ptmd_chunk_rec *r;
    if (PTMD_UNLIKELY(w->chunks.len + sizeof(*r) > w->chunks.cap) &&
        ptmd_buf_reserve(&w->chunks, 1u << 20) != 0)
        return -1;
    r = (ptmd_chunk_rec *)(void *)(w->chunks.base + w->chunks.len);
    r->addr = addr;
    r->word = (size & PTMD_SIZE_MASK) | (uint64_t)state | flags;
    w->chunks.len += sizeof(*r);
    return 0;
}

/* Notes a chunk free by its bits, whose record is the next one pushed: its links (in the lines just
 * read for its header), and a large one's nextsize pair. */
static inline int push_note(ptmd_walk *w, int self, uint64_t addr, uint64_t size)
{
    ptmd_free_note *e;
    if (PTMD_UNLIKELY(PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec) >= UINT32_MAX)) {
        errno = EOVERFLOW;          /* a note names its record in 32 bits, as a reference does */
        return -1;
    }
    if (PTMD_UNLIKELY(w->notes.len + sizeof(*e) > w->notes.cap) && ptmd_buf_reserve(&w->notes, 1u << 20) != 0)
        return -1;
    e = (ptmd_free_note *)(void *)(w->notes.base + w->notes.len);
    e->addr = addr;
    e->fd = ptmd_rd64_as(w, self, addr + PTMD_MCHUNK_FD);
    e->bk = ptmd_rd64_as(w, self, addr + PTMD_MCHUNK_BK);
    e->rec = (uint32_t)PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec);
    e->large = 0;
    w->notes.len += sizeof(*e);
    if (size >= PTMD_MIN_LARGE_SIZE) {
        ptmd_large_note *l = ptmd_buf_push(&w->large_notes, sizeof(*l));
        if (!l) return -1;
        l->fd_nextsize = ptmd_rd64_as(w, self, addr + PTMD_MCHUNK_FD_NEXTSIZE);
        l->bk_nextsize = ptmd_rd64_as(w, self, addr + PTMD_MCHUNK_BK_NEXTSIZE);
        e->large = (uint32_t)PTMD_BUF_COUNT(&w->large_notes, ptmd_large_note);
    }
    return 0;
}

/* A chunk that may hold a tcache_perthread_struct: tcache_init's request as malloc sizes it, or 16
 * bytes more, where _int_malloc handed out a whole free chunk rather than leave less than MINSIZE of
 * it (malloc.c, "Exhaust"). tcache.c checks each candidate's structure. */
static inline int tcache_struct_sized(const ptmd_layout *L, uint64_t size, uint64_t csize)
{
    const uint64_t alt = L->tcache_struct_csize_int_malloc;
    return size == csize || size == csize + PTMD_MALLOC_ALIGNMENT ||
           (alt && (size == alt || size == alt + PTMD_MALLOC_ALIGNMENT));
}

static int walk_heap_chunks(ptmd_walk *w, ptmd_arena_ctx *a, uint32_t heap_index, uint64_t first, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    ptmd_heap_rec *h = PTMD_W_HEAP(w, heap_index);
    const uint64_t end = h->end, start = h->start;
    const int has_top = a->top >= start && a->top < end;
    const uint64_t tcache_csize = (L->tcache_struct_size + PTMD_SIZE_SZ + PTMD_MALLOC_ALIGN_MASK) & ~(uint64_t)PTMD_MALLOC_ALIGN_MASK;
    const uint64_t last_rem = ptmd_arena_field(w, a->av, L->ms_last_remainder);
    const int self = w->src.kind == PTMD_SOURCE_SELF;
    uint64_t p = first, ahead = first;

    h->first_chunk = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec);
    if (first > start && push_chunk(w, start, first - start, PTMD_ST_META, 0) != 0) goto oom;

    while (p < end) {
        uint64_t size, next, flags = 0;
        int state;
        if (p == a->top) {
            if (p + a->top_size != end) ptmd_walk_anomaly(w, PTMD_AN_TOP, p, a->top_size, a->index);
            if (push_chunk(w, p, end - p, PTMD_ST_TOP, 0) != 0) goto oom;
            p = end;
            break;
        }
        if (end - p < PTMD_CHUNK_HDR_SZ) {
            ptmd_walk_anomaly(w, PTMD_AN_PAST_END, p, end - p, a->index);
            goto rest;
        }
        if (self) ptmd_prefetch_ahead(&ahead, p, end);
        size = ptmd_rd64_as(w, self, p + PTMD_MCHUNK_SIZE);
        flags = (size & PTMD_SIZE_BITS) << PTMD_CF_RAW_SHIFT;
        size = ptmd_chunksize(size);
        /* Fenceposts (sysmalloc, when an arena moves to a new heap): a 16-byte chunk, then a 0-size
         * header ending exactly at the old heap's end. No real chunk is smaller than MINSIZE. */
        if (size == PTMD_CHUNK_HDR_SZ || (size == 0 && !has_top && p + PTMD_CHUNK_HDR_SZ == end)) {
            if (push_chunk(w, p, PTMD_CHUNK_HDR_SZ, PTMD_ST_META, flags) != 0) goto oom;
            p += PTMD_CHUNK_HDR_SZ;
            continue;
        }
        if (size < PTMD_MINSIZE || (size & PTMD_MALLOC_ALIGN_MASK)) goto bad;
        if (size > end - p) {
            ptmd_walk_anomaly(w, PTMD_AN_PAST_END, p, size, a->index);
            goto rest;
        }
        next = p + size;
        if (next + PTMD_CHUNK_HDR_SZ <= end && !(ptmd_rd64_as(w, self, next + PTMD_MCHUNK_SIZE) & PTMD_PREV_INUSE)) {
            /* a bin's, to be settled by ptmd_settle_lists: the size's bin until then */
            flags |= PTMD_CF_WORD(PTMD_CF_FREE_BIT);
            state = size < PTMD_MIN_LARGE_SIZE ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN;
            if (p == last_rem) flags |= PTMD_CF_WORD(PTMD_CF_LAST_REMAINDER);
            if (push_note(w, self, p, size) != 0) goto oom;
        } else {
            state = PTMD_ST_IN_USE;
            if (a->fast_entries && size <= PTMD_MAX_FAST_CHUNK) {
                ptmd_list_slot *s = ptmd_lists_find(w, p);   /* the fastbins' entries alone, so far */
                if (s) {
                    s->seen = 1;
                    state = PTMD_ST_FASTBIN;
                }
            } else if (size == PTMD_MINSIZE && !has_top && next + PTMD_CHUNK_HDR_SZ == end &&
                       ptmd_chunksize(ptmd_mchunk_size(w, next)) == 0) {
                state = PTMD_ST_META;       /* the old top too small to free, kept as a fencepost */
            } else if (L->tcache_bins && tcache_struct_sized(L, size, tcache_csize)) {
                uint64_t *c = ptmd_buf_push(&w->tcache_cands, sizeof(uint64_t));
                if (!c) goto oom;
                *c = p;
            }
        }
        /* an allocated chunk carries NON_MAIN_ARENA exactly when its arena is not main_arena (glibc sets
         * it on every chunk it hands out from another arena; free chunks and top lose it) */
        if ((state == PTMD_ST_IN_USE || state == PTMD_ST_FASTBIN) &&
            (!(flags & ((uint64_t)PTMD_NON_MAIN_ARENA << PTMD_CF_RAW_SHIFT))) != a->main) {
            ptmd_walk_anomaly(w, PTMD_AN_WRONG_ARENA, p, ptmd_mchunk_size(w, p), a->index);
            flags |= PTMD_CF_WORD(PTMD_CF_ANOMALY);
        }
        if (push_chunk(w, p, size, state, flags) != 0) goto oom;
        p = next;
    }
    goto done;
bad:
    ptmd_walk_anomaly(w, PTMD_AN_BAD_SIZE, p, ptmd_mchunk_size(w, p), a->index);
rest:
    /* account for the rest so the totals still cover the heap, and say the walk stopped here */
    if (push_chunk(w, p, end - p, PTMD_ST_META, PTMD_CF_WORD(PTMD_CF_ANOMALY)) != 0) goto oom;
    h = PTMD_W_HEAP(w, heap_index);
    h->flags |= PTMD_HF_TRUNCATED;
done:
    h = PTMD_W_HEAP(w, heap_index);
    h->n_chunks = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec) - h->first_chunk;
    return 0;
oom:
    return ptmd_fail_sys(err, errno, "chunk table", "mmap");
}

/* First chunk of a heap: after heap_info (and the arena itself in an arena's first heap). */

static uint64_t first_chunk_of(const ptmd_walk *w, const ptmd_arena_ctx *a, const ptmd_heap_rec *h)
{
    uint64_t p;
    if (a->main) {
        /* a heap recorded from the 16-byte boundary below an unaligned sbrk_base (ptmd_sbrk_pad) */
        p = h->start;
        if (w->have_mp) p += ptmd_sbrk_pad(p, w->sbrk_base);
    }
    else if (h->start + w->L->hi_size_total == a->av) p = a->av + w->L->ms_size;
    else p = h->start + w->L->hi_size_total;
    /* chunk2mem must be MALLOC_ALIGNMENT aligned */
    return p + ((PTMD_MALLOC_ALIGNMENT - ((p + PTMD_CHUNK_HDR_SZ) & PTMD_MALLOC_ALIGN_MASK)) & PTMD_MALLOC_ALIGN_MASK);
}

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
    ar->glibc_flags = (uint32_t)ptmd_rd64(w, av + L->ms_flags);
    if (ar->glibc_flags & PTMD_NONCONTIGUOUS_BIT) ar->flags |= PTMD_AF_NONCONTIGUOUS;
    if (L->ms_have_fastchunks != PTMD_NONE && (uint32_t)ptmd_rd64(w, av + L->ms_have_fastchunks))
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
    if (a.heaps_broken) w->lists_unsafe = 1;   /* the lists' bounds come from the heaps */
    for (i = 0; i < a.n_heaps; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, a.first_heap + i);
        heap_bytes += h->end - h->start;
        if (h->kind == PTMD_HEAP_SBRK && w->have_mp) heap_bytes -= ptmd_sbrk_pad(h->start, w->sbrk_base);
    }
    a.bound = heap_bytes / PTMD_MINSIZE + 1;
    if ((rc = ptmd_collect_fastbins(w, &a, err)) != 0) goto out;
    for (i = 0; i < a.n_heaps; i++) {
        uint32_t hi = a.first_heap + i;
        if ((rc = walk_heap_chunks(w, &a, hi, first_chunk_of(w, &a, PTMD_W_HEAP(w, hi)), err)) != 0) goto out;
    }
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

/* ---- lookups ------------------------------------------------------------------------------ */

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
    if (lc->mp && L->mp_hp_pagesize != PTMD_NONE) ptmd_walk_read(w, lc->mp + L->mp_hp_pagesize, &hp, 8);
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
    if (w->src.kind == PTMD_SOURCE_SELF) {
        w->pagemap.fd = -1;
        if (ptmd_maps_load(&w->maps, err) != 0) return -1;
        if (ptmd_source_self(&w->src, err) != 0) return -1;
        if (ptmd_pagemap_open(&w->pagemap, err) != 0) return -1;
    } else {
        /* a copy: its mappings were read while the target was stopped, its residency with it */
        w->pagemap.fd = -1;
        w->pagemap.snap = &w->src;
        w->pagemap.page_size = w->page_size;
        w->pagemap.source = PTMD_RESIDENCY_PAGEMAP;
    }
    w->heap_max = PTMD_DEFAULT_HEAP_MAX_SIZE;
    if (lc->mp && ptmd_maps_readable(&w->maps, lc->mp, L->mp_size)) {
        uint32_t n;
        w->have_mp = 1;
        w->sbrk_base = ptmd_rd64(w, lc->mp + L->mp_sbrk_base);
        n = (uint32_t)ptmd_rd64(w, lc->mp + L->mp_n_mmaps);
        w->n_mmaps = n;
        w->mmapped_mem = ptmd_rd64(w, lc->mp + L->mp_mmapped_mem);
        if (L->mp_tcache_count != PTMD_NONE) w->tcache_count_max = ptmd_rd64(w, lc->mp + L->mp_tcache_count);
        if (L->mp_tcache_bins != PTMD_NONE) w->tcache_bins = ptmd_rd64(w, lc->mp + L->mp_tcache_bins);
        if (L->mp_hp_pagesize != PTMD_NONE) w->heap_max = heap_max_size(L, ptmd_rd64(w, lc->mp + L->mp_hp_pagesize));
    }
    if (lc->tcache_key && ptmd_maps_readable(&w->maps, lc->tcache_key, 8)) {
        w->tcache_key = ptmd_rd64(w, lc->tcache_key);
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

void ptmd_walk_release(ptmd_walk *w)
{
    ptmd_buf *bufs[] = { PTMD_WALK_BUFFERS(w) };
    size_t i;
    for (i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) ptmd_buf_release(bufs[i]);
    ptmd_maps_release(&w->maps);
    ptmd_source_release(&w->src);
    ptmd_pagemap_close(&w->pagemap);
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
