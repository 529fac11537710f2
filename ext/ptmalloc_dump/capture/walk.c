/* Walking arenas: the arena ring, each arena's heaps, every chunk, and the fastbin and bin lists that
 * decide what a chunk's bits cannot (fastbin chunks look in use). Each arena is walked under its own
 * mutex, taken the way glibc's lll_lock does. Nothing here calls malloc. */
#define _GNU_SOURCE
#include "capture/walk.h"

#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PTMD_MAX_ARENAS 65536
#define PTMD_MAX_HEAPS_PER_ARENA 65536

/* ---- arena locks: glibc's low-level lock (0 free, 1 locked, 2 locked with waiters) ----------- */

void ptmd_arena_lock(ptmd_walk *w, int *futex)
{
    int expected = 0;
    uint64_t t0;
    if (__atomic_compare_exchange_n(futex, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    t0 = ptmd_now_ns();
    /* __lll_lock_wait_private: announce a waiter by storing 2, sleep while the value stays 2 */
    while (__atomic_exchange_n(futex, 2, __ATOMIC_ACQUIRE) != 0)
        syscall(SYS_futex, futex, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    w->lock_wait_ns += ptmd_now_ns() - t0;
}

void ptmd_arena_unlock(int *futex)
{
    if (__atomic_exchange_n(futex, 0, __ATOMIC_RELEASE) > 1)
        syscall(SYS_futex, futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

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

/* ---- list membership: open addressing keyed by chunk address ------------------------------- */

typedef struct {
    uint64_t addr;
    uint32_t state;
    uint32_t seen;
} list_slot;

static inline size_t slot_hash(uint64_t addr, size_t mask)
{
    return (size_t)(((addr >> 4) * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static int lists_reset(ptmd_walk *w, size_t cap)
{
    size_t bytes = cap * sizeof(list_slot);
    w->lists.len = 0;
    if (ptmd_buf_reserve(&w->lists, bytes) != 0) return -1;
    memset(w->lists.base, 0, bytes);
    w->lists.len = bytes;
    w->lists_cap = cap;
    w->lists_used = 0;
    return 0;
}

static list_slot *lists_find(ptmd_walk *w, uint64_t addr)
{
    list_slot *t = (list_slot *)(void *)w->lists.base;
    size_t mask = w->lists_cap - 1, i = slot_hash(addr, mask);
    for (;;) {
        if (t[i].addr == addr) return &t[i];
        if (t[i].addr == 0) return NULL;
        i = (i + 1) & mask;
    }
}

/* Inserts; returns the slot, with *dup set when the address was already there. NULL on mmap failure. */
static list_slot *lists_insert(ptmd_walk *w, uint64_t addr, uint32_t state, int *dup)
{
    list_slot *t;
    size_t mask, i;
    if (PTMD_UNLIKELY((w->lists_used + 1) * 2 > w->lists_cap)) {
        /* grow: rebuild into a fresh mapping */
        ptmd_buf old = w->lists;
        size_t old_cap = w->lists_cap, k;
        memset(&w->lists, 0, sizeof(w->lists));
        if (lists_reset(w, old_cap * 2) != 0) {
            ptmd_buf_release(&w->lists);
            w->lists = old;
            return NULL;
        }
        for (k = 0; k < old_cap; k++) {
            list_slot *s = &((list_slot *)(void *)old.base)[k];
            if (s->addr) {
                int d;
                list_slot *n = lists_insert(w, s->addr, s->state, &d);
                n->seen = s->seen;
            }
        }
        ptmd_buf_release(&old);
    }
    t = (list_slot *)(void *)w->lists.base;
    mask = w->lists_cap - 1;
    i = slot_hash(addr, mask);
    while (t[i].addr && t[i].addr != addr) i = (i + 1) & mask;
    *dup = t[i].addr == addr;
    if (!*dup) {
        t[i].addr = addr;
        t[i].state = state;
        t[i].seen = 0;
        w->lists_used++;
    }
    return &t[i];
}

/* ---- one arena ---------------------------------------------------------------------------- */

typedef struct {
    uint32_t index;
    uintptr_t av;
    int main;
    uint64_t top, top_size, top_end;
    uint32_t first_heap, n_heaps;   /* into w->heaps */
    uint64_t bound;                 /* most chunks the arena's memory could hold */
    int maps_reloaded;              /* /proc/self/maps read again under this arena's lock */
    size_t fast_entries;
} arena_ctx;

/* True when [p, p+len) lies inside one of the arena's heaps (and so was checked readable). */
static int in_arena(ptmd_walk *w, const arena_ctx *a, uint64_t p, uint64_t len)
{
    uint32_t i;
    if (p & PTMD_MALLOC_ALIGN_MASK) return 0;
    for (i = 0; i < a->n_heaps; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, a->first_heap + i);
        if (p >= h->start && p < h->end && len <= h->end - p) return 1;
    }
    return 0;
}

static uint64_t arena_field(const ptmd_walk *w, uintptr_t av, size_t off)
{
    PTMD_UNUSED(w);
    return off == PTMD_NONE ? 0 : ptmd_rd64(av + off);
}

/* heap_info checks: aligned to heap_max, readable, ar_ptr == the arena, sane size. */
static int heap_info_ok(ptmd_walk *w, uintptr_t h, uintptr_t av)
{
    const ptmd_layout *L = w->L;
    uint64_t size;
    if (!h || (h & (w->heap_max - 1))) return 0;
    if (!ptmd_maps_readable(&w->maps, h, L->hi_size_total)) return 0;
    if (ptmd_rd64(h + L->hi_ar_ptr) != av) return 0;
    size = ptmd_rd64(h + L->hi_size);
    if (size < L->hi_size_total || size > w->heap_max) return 0;
    return ptmd_maps_readable(&w->maps, h, size);
}

/* The mappings were read before this arena's lock was taken: a heap made or grown since (new_heap's
 * mmap, grow_heap's mprotect, sbrk) is missing from them or still PROT_NONE there. Reads them again,
 * at most once per arena; true when that happened, so that a failed check is worth repeating. */
static int maps_reload(ptmd_walk *w, arena_ctx *a)
{
    ptmd_err ignored;
    if (a->maps_reloaded) return 0;
    a->maps_reloaded = 1;
    return ptmd_maps_load(&w->maps, &ignored) == 0;
}

static ptmd_heap_rec *new_heap(ptmd_walk *w, arena_ctx *a, uint32_t kind, uint64_t start, uint64_t end)
{
    ptmd_heap_rec *h = ptmd_buf_push(&w->heaps, sizeof(*h));
    if (!h) return NULL;
    h->start = start;
    h->end = end;
    h->reserved_end = end;
    h->arena = a ? a->index : PTMD_NO_ARENA;
    h->kind = kind;
    return h;
}

/* Collects the arena's heaps (oldest first) into w->heaps. */
static int collect_heaps(ptmd_walk *w, arena_ctx *a, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    a->first_heap = (uint32_t)PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    a->n_heaps = 0;
    if (a->main) {
        uint64_t start = w->have_mp && w->sbrk_base ? w->sbrk_base : 0;
        const ptmd_map *m;
        if (a->top == ptmd_initial_top(a->av + L->ms_bins)) return 0;       /* initial_top: never used */
        if (!start) {
            m = ptmd_maps_find(&w->maps, a->top);
            start = m ? m->start : a->top;
        }
        if (start <= a->top && !ptmd_maps_readable(&w->maps, start, a->top_end - start)) maps_reload(w, a);
        if (start > a->top || !ptmd_maps_readable(&w->maps, start, a->top_end - start)) {
            ptmd_walk_anomaly(w, PTMD_AN_TOP, a->top, start, a->index);
            start = a->top;     /* walk only what can be read */
            if (!ptmd_maps_readable(&w->maps, a->top, a->top_end - a->top)) return 0;
        }
        if (!new_heap(w, a, PTMD_HEAP_SBRK, start, a->top_end)) return ptmd_fail_sys(err, errno, "heap table", "mmap");
        a->n_heaps = 1;
        return 0;
    } else {
        uintptr_t h = ptmd_heap_for_ptr(a->top, w->heap_max);
        uint32_t n = 0, i;
        while (h) {
            uint64_t size, prev;
            ptmd_heap_rec *hr;
            if (n < PTMD_MAX_HEAPS_PER_ARENA && !heap_info_ok(w, h, a->av) && maps_reload(w, a)) continue;
            if (n >= PTMD_MAX_HEAPS_PER_ARENA || !heap_info_ok(w, h, a->av)) {
                ptmd_walk_anomaly(w, PTMD_AN_HEAP_INFO, h, n, a->index);
                break;
            }
            size = ptmd_rd64(h + L->hi_size);
            prev = ptmd_rd64(h + L->hi_prev);
            hr = new_heap(w, a, PTMD_HEAP_MMAP_HEAP, h, h + size);
            if (!hr) return ptmd_fail_sys(err, errno, "heap table", "mmap");
            hr->reserved_end = h + w->heap_max;
            hr->prev = prev;
            hr->mprotect_size = ptmd_rd64(h + L->hi_mprotect_size);
            n++;
            h = prev;
        }
        /* the chain runs newest to oldest: store oldest first */
        for (i = 0; i < n / 2; i++) {
            ptmd_heap_rec tmp = *PTMD_W_HEAP(w, a->first_heap + i);
            *PTMD_W_HEAP(w, a->first_heap + i) = *PTMD_W_HEAP(w, a->first_heap + n - 1 - i);
            *PTMD_W_HEAP(w, a->first_heap + n - 1 - i) = tmp;
        }
        a->n_heaps = n;
        return 0;
    }
}

/* Walks fastbins and the regular bins into the membership table. */
static int collect_lists(ptmd_walk *w, arena_ctx *a, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    int i;
    uint64_t steps;
    if (lists_reset(w, 1024) != 0) return ptmd_fail_sys(err, errno, "list table", "mmap");
    a->fast_entries = 0;
    for (i = 0; i < L->nfastbins; i++) {
        uint64_t p = arena_field(w, a->av, L->ms_fastbins + (size_t)i * 8);
        for (steps = 0; p; steps++) {
            int dup;
            uint64_t size, fd;
            if (steps > a->bound) { ptmd_walk_anomaly(w, PTMD_AN_LIST_CYCLE, p, (uint64_t)i, a->index); break; }
            if (!in_arena(w, a, p, 32)) { ptmd_walk_anomaly(w, PTMD_AN_BAD_POINTER, p, (uint64_t)i, a->index); break; }
            size = ptmd_chunksize(ptmd_mchunk_size(p));
            if (size < PTMD_MINSIZE || ptmd_fastbin_index(size) != i)
                ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, p, size, a->index);
            if (!lists_insert(w, p, PTMD_ST_FASTBIN, &dup)) return ptmd_fail_sys(err, errno, "list table", "mmap");
            if (dup) { ptmd_walk_anomaly(w, PTMD_AN_DUPLICATE, p, (uint64_t)i, a->index); break; }
            a->fast_entries++;
            fd = ptmd_chunk_fd(p);
            p = L->safe_linking ? ptmd_reveal_ptr(p + PTMD_MCHUNK_FD, fd) : fd;
        }
    }
    for (i = 1; i < PTMD_NBINS; i++) {
        uint64_t head = ptmd_bin_at(a->av + L->ms_bins, i);
        uint64_t p = ptmd_chunk_fd(head), prev = head;
        uint32_t state = i == 1 ? PTMD_ST_UNSORTED : i < PTMD_NSMALLBINS ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN;
        for (steps = 0; p != head; steps++) {
            int dup;
            uint64_t size;
            if (steps > a->bound) { ptmd_walk_anomaly(w, PTMD_AN_LIST_CYCLE, p, (uint64_t)i, a->index); break; }
            if (!in_arena(w, a, p, 32)) { ptmd_walk_anomaly(w, PTMD_AN_BAD_POINTER, p, (uint64_t)i, a->index); break; }
            if (ptmd_chunk_bk(p) != prev) ptmd_walk_anomaly(w, PTMD_AN_LIST_LINK, p, prev, a->index);
            size = ptmd_chunksize(ptmd_mchunk_size(p));
            if (i >= 2 && ptmd_bin_index(size) != i) ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, p, size, a->index);
            if (!lists_insert(w, p, state, &dup)) return ptmd_fail_sys(err, errno, "list table", "mmap");
            if (dup) { ptmd_walk_anomaly(w, PTMD_AN_DUPLICATE, p, (uint64_t)i, a->index); break; }
            prev = p;
            p = ptmd_chunk_fd(p);
        }
    }
    return 0;
}

static int walk_heap_chunks(ptmd_walk *w, arena_ctx *a, uint32_t heap_index, uint64_t first, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    ptmd_heap_rec *h = PTMD_W_HEAP(w, heap_index);
    const uint64_t end = h->end, start = h->start;
    const int has_top = a->top >= start && a->top < end;
    const uint64_t tcache_csize = (L->tcache_struct_size + PTMD_SIZE_SZ + PTMD_MALLOC_ALIGN_MASK) & ~(uint64_t)PTMD_MALLOC_ALIGN_MASK;
    const uint64_t last_rem = arena_field(w, a->av, L->ms_last_remainder);
    uint64_t p = first;

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
        size = ptmd_mchunk_size(p);
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
        if (next + PTMD_CHUNK_HDR_SZ <= end && !(ptmd_mchunk_size(next) & PTMD_PREV_INUSE)) {
            list_slot *s = lists_find(w, p);
            flags |= PTMD_CF_FREE_BIT;
            if (s && s->state >= PTMD_ST_UNSORTED && s->state <= PTMD_ST_LARGEBIN) {
                state = (int)s->state;
                s->seen = 1;
            } else {
                ptmd_walk_anomaly(w, s ? PTMD_AN_FASTBIN_FREE : PTMD_AN_FREE_NOT_IN_BIN, p, size, a->index);
                if (s) s->seen = 1;
                state = s ? (int)s->state : size < PTMD_MIN_LARGE_SIZE ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN;
                flags |= PTMD_CF_ANOMALY;
            }
            if (p == last_rem) flags |= PTMD_CF_LAST_REMAINDER;
        } else {
            state = PTMD_ST_IN_USE;
            if (a->fast_entries && size <= PTMD_MAX_FAST_CHUNK) {
                list_slot *s = lists_find(w, p);
                if (s) {
                    s->seen = 1;
                    if (s->state == PTMD_ST_FASTBIN) state = PTMD_ST_FASTBIN;
                    else { ptmd_walk_anomaly(w, PTMD_AN_LIST_IN_USE, p, s->state, a->index); flags |= PTMD_CF_ANOMALY; }
                }
            } else if (size == PTMD_MINSIZE && !has_top && next + PTMD_CHUNK_HDR_SZ == end &&
                       ptmd_chunksize(ptmd_mchunk_size(next)) == 0) {
                state = PTMD_ST_META;       /* the old top too small to free, kept as a fencepost */
            } else if ((size == tcache_csize || size == L->tcache_struct_csize_int_malloc) && L->tcache_bins) {
                uint64_t *c = ptmd_buf_push(&w->tcache_cands, sizeof(uint64_t));
                if (!c) goto oom;
                *c = p;
            }
        }
        if (push_chunk(w, p, size, state, flags) != 0) goto oom;
        p = next;
    }
    goto done;
bad:
    ptmd_walk_anomaly(w, PTMD_AN_BAD_SIZE, p, ptmd_mchunk_size(p), a->index);
rest:
    /* account for the rest so the totals still cover the heap, and say the walk stopped here */
    if (push_chunk(w, p, end - p, PTMD_ST_META, PTMD_CF_ANOMALY) != 0) goto oom;
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
static uint64_t first_chunk_of(const ptmd_walk *w, const arena_ctx *a, const ptmd_heap_rec *h)
{
    uint64_t p;
    if (a->main) p = h->start;
    else if (h->start + w->L->hi_size_total == a->av) p = a->av + w->L->ms_size;
    else p = h->start + w->L->hi_size_total;
    /* chunk2mem must be MALLOC_ALIGNMENT aligned */
    return p + ((PTMD_MALLOC_ALIGNMENT - ((p + PTMD_CHUNK_HDR_SZ) & PTMD_MALLOC_ALIGN_MASK)) & PTMD_MALLOC_ALIGN_MASK);
}

static int walk_arena(ptmd_walk *w, uintptr_t av, uint32_t index, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    ptmd_arena_rec *ar = ptmd_buf_push(&w->arenas, sizeof(*ar));
    arena_ctx a;
    int *mutex = (int *)(void *)(av + L->ms_mutex);
    uint64_t heap_bytes = 0, k;
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
    ar->glibc_flags = (uint32_t)ptmd_rd64(av + L->ms_flags);
    if (ar->glibc_flags & PTMD_NONCONTIGUOUS_BIT) ar->flags |= PTMD_AF_NONCONTIGUOUS;
    if (L->ms_have_fastchunks != PTMD_NONE && (uint32_t)ptmd_rd64(av + L->ms_have_fastchunks))
        ar->flags |= PTMD_AF_HAVE_FASTCHUNKS;
    a.top = arena_field(w, av, L->ms_top);
    if (!ptmd_maps_readable(&w->maps, a.top, 16)) maps_reload(w, &a);
    a.top_size = ptmd_maps_readable(&w->maps, a.top, 16) ? ptmd_chunksize(ptmd_mchunk_size(a.top)) : 0;
    a.top_end = a.top + a.top_size;
    ar->top = a.top;
    ar->top_size = a.top_size;
    ar->last_remainder = arena_field(w, av, L->ms_last_remainder);
    ar->system_mem = arena_field(w, av, L->ms_system_mem);
    ar->max_system_mem = arena_field(w, av, L->ms_max_system_mem);
    ar->next = arena_field(w, av, L->ms_next);
    ar->next_free = arena_field(w, av, L->ms_next_free);
    ar->attached_threads = arena_field(w, av, L->ms_attached_threads);
    if (a.main && (ar->flags & PTMD_AF_NONCONTIGUOUS))
        ptmd_walk_anomaly(w, PTMD_AN_NONCONTIGUOUS, av, ar->system_mem, index);

    if ((rc = collect_heaps(w, &a, err)) != 0) goto out;
    for (i = 0; i < a.n_heaps; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, a.first_heap + i);
        heap_bytes += h->end - h->start;
    }
    a.bound = heap_bytes / PTMD_MINSIZE + 1;
    if ((rc = collect_lists(w, &a, err)) != 0) goto out;
    for (i = 0; i < a.n_heaps; i++) {
        uint32_t hi = a.first_heap + i;
        if ((rc = walk_heap_chunks(w, &a, hi, first_chunk_of(w, &a, PTMD_W_HEAP(w, hi)), err)) != 0) goto out;
    }
    /* list entries that no chunk of the walk matched */
    for (k = 0; k < w->lists_cap; k++) {
        const list_slot *s = &((const list_slot *)(const void *)w->lists.base)[k];
        if (s->addr && !s->seen) ptmd_walk_anomaly(w, PTMD_AN_LIST_NOT_CHUNK, s->addr, s->state, index);
    }
    if (a.n_heaps && heap_bytes != PTMD_W_ARENA(w, index)->system_mem &&
        !(PTMD_W_ARENA(w, index)->flags & PTMD_AF_NONCONTIGUOUS))
        ptmd_walk_anomaly(w, PTMD_AN_SYSTEM_MEM, av, heap_bytes, index);
out:
    ptmd_arena_unlock(mutex);
    ar = PTMD_W_ARENA(w, index);
    ar->first_heap = a.first_heap;
    ar->n_heaps = a.n_heaps;
    return rc;
}

/* Next arena on the ring, validated: main_arena itself, or a non-main arena, whose malloc_state
 * follows the heap_info at the start of its first heap, which points back at it. Checked before the arena's lock is taken, while threads may be making
 * arenas and growing heaps: the two structs are read fault-free (an arena made since the mappings were
 * read is not in them), and the heap's extent is checked under the lock. */
static int arena_ok(ptmd_walk *w, uintptr_t av)
{
    const ptmd_layout *L = w->L;
    unsigned char head[4096];
    size_t n = L->hi_size_total + L->ms_size;
    uintptr_t h;
    uint64_t ar, size;
    if (av == w->lc->main_arena) return 1;
    if (!av || (av & 7) || n > sizeof(head)) return 0;
    h = av - L->hi_size_total;
    if ((h & (w->heap_max - 1)) != 0) return 0;
    if (ptmd_safe_read(&w->mem, h, head, n) != 0) return 0;
    memcpy(&ar, head + L->hi_ar_ptr, 8);
    memcpy(&size, head + L->hi_size, 8);
    return ar == av && size >= n && size <= w->heap_max;
}

static const char *validate_once(ptmd_walk *w);

/* The mappings were read before any lock was taken: another thread may have grown the heap since
 * (sbrk, a new arena's heap). A failed check is repeated once over a fresh read of them. */
int ptmd_walk_validate(ptmd_walk *w, ptmd_err *err)
{
    const ptmd_libc *lc = w->lc;
    const char *what = validate_once(w);
    ptmd_err ignored;
    if (what && ptmd_maps_load(&w->maps, &ignored) == 0) what = validate_once(w);
    if (!what) return 0;
    if (lc->layout_assumed)
        return ptmd_fail(err, PTMD_E_LIBC,
                         "glibc %s is newer than the newest glibc ptmalloc_dump knows (2.%d), and its malloc "
                         "structures at main_arena %#lx do not match that version's layout (%s); refusing to "
                         "walk them", lc->glibc_version, ptmd_layout_newest_minor(),
                         (unsigned long)lc->main_arena, what);
    return ptmd_fail(err, PTMD_E_LIBC,
                     "glibc %s: the malloc structures at main_arena %#lx do not match the layout "
                     "known for this version (%s); refusing to walk them",
                     lc->glibc_version, (unsigned long)lc->main_arena, what);
}

/* NULL when main_arena and the arena ring pass every check, else what failed. */
static const char *validate_once(ptmd_walk *w)
{
    const ptmd_layout *L = w->L;
    const ptmd_libc *lc = w->lc;
    uintptr_t av = lc->main_arena, top;
    uint64_t top_size, system_mem;
    unsigned n = 0;
    const char *what = NULL;

    if (!ptmd_maps_readable(&w->maps, av, L->ms_size) || av < lc->rw_start || av + L->ms_size > lc->rw_end) {
        what = "main_arena is not inside libc's writable segment";
        goto fail;
    }
    top = ptmd_rd64(av + L->ms_top);
    system_mem = ptmd_rd64(av + L->ms_system_mem);
    if (top != ptmd_initial_top(av + L->ms_bins)) {     /* initial_top means the main arena was never used */
        if ((top & PTMD_MALLOC_ALIGN_MASK) || !ptmd_maps_readable(&w->maps, top, 16)) {
            what = "main_arena.top does not point at readable memory";
            goto fail;
        }
        top_size = ptmd_chunksize(ptmd_mchunk_size(top));
        if (top_size < PTMD_MINSIZE || !ptmd_maps_readable(&w->maps, top, top_size)) {
            what = "main_arena.top does not lie inside its heap";
            goto fail;
        }
        if (system_mem < top_size || (system_mem & (w->page_size - 1)) || system_mem > (1ull << 47)) {
            what = "main_arena.system_mem is not sane";
            goto fail;
        }
        if (w->have_mp && w->sbrk_base && w->sbrk_base > top) {
            what = "mp_.sbrk_base does not precede main_arena.top";
            goto fail;
        }
    }
    do {
        uintptr_t next = ptmd_rd64(av + L->ms_next);
        if (++n > PTMD_MAX_ARENAS) { what = "the arena ring does not return to main_arena"; goto fail; }
        if (!arena_ok(w, next)) { what = "an arena on the ring fails its heap_info check"; goto fail; }
        av = next;
    } while (av != lc->main_arena);
    return NULL;
fail:
    return what;
}

/* Follows one list (fd or bk links) from a bin head or fastbin, checking every step. */
static int list_sane(ptmd_walk *w, arena_ctx *a, uint64_t first, uint64_t head, size_t link, int fast)
{
    uint64_t p = first, steps;
    for (steps = 0; fast ? p != 0 : p != head; steps++) {
        uint64_t next;
        if (steps > a->bound || !in_arena(w, a, p, 32)) return 0;
        next = ptmd_rd64(p + link);
        p = fast && w->L->safe_linking ? ptmd_reveal_ptr(p + link, next) : next;
    }
    return 1;
}

/* Before glibc's own malloc_info() and mallinfo2() are called (they follow every list without any
 * check, fd for one and bk for the other, and abort on a misaligned fastbin chunk): every arena's
 * lists, both directions, under the arena's lock. Returns 1 when all of them are sane. */
int ptmd_walk_precheck(ptmd_walk *w)
{
    const ptmd_layout *L = w->L;
    uintptr_t av = w->lc->main_arena;
    uint32_t n = 0;
    int sane = 1;
    size_t heaps_mark = w->heaps.len;
    do {
        arena_ctx a;
        int *mutex = (int *)(void *)(av + L->ms_mutex), i;
        uint32_t k;
        uint64_t bytes = 0;
        ptmd_err ignored;
        memset(&a, 0, sizeof(a));
        a.av = av;
        a.main = av == w->lc->main_arena;
        a.index = PTMD_NO_ARENA;
        ptmd_arena_lock(w, mutex);
        a.top = arena_field(w, av, L->ms_top);
        if (!ptmd_maps_readable(&w->maps, a.top, 16)) maps_reload(w, &a);
        a.top_size = ptmd_maps_readable(&w->maps, a.top, 16) ? ptmd_chunksize(ptmd_mchunk_size(a.top)) : 0;
        a.top_end = a.top + a.top_size;
        if (collect_heaps(w, &a, &ignored) != 0) sane = 0;
        for (k = 0; k < a.n_heaps; k++) bytes += PTMD_W_HEAP(w, a.first_heap + k)->end - PTMD_W_HEAP(w, a.first_heap + k)->start;
        a.bound = bytes / PTMD_MINSIZE + 1;
        for (i = 0; sane && i < L->nfastbins; i++)
            sane = list_sane(w, &a, arena_field(w, av, L->ms_fastbins + (size_t)i * 8), 0, 16, 1);
        for (i = 1; sane && i < PTMD_NBINS; i++) {
            uint64_t head = ptmd_bin_at(av + L->ms_bins, i);
            sane = list_sane(w, &a, ptmd_chunk_fd(head), head, 16, 0) && list_sane(w, &a, ptmd_chunk_bk(head), head, 24, 0);
        }
        ptmd_arena_unlock(mutex);
        w->heaps.len = heaps_mark;          /* the walk collects them again, under the same lock as its chunks */
        av = arena_field(w, av, L->ms_next);
    } while (sane && av != w->lc->main_arena && ++n < PTMD_MAX_ARENAS);
    w->anomalies.len = 0;                   /* what matters is recorded by the walk itself */
    return sane;
}

int ptmd_walk_arenas(ptmd_walk *w, ptmd_err *err)
{
    uintptr_t av = w->lc->main_arena;
    uint32_t index = 0;
    do {
        uintptr_t next;
        if (!arena_ok(w, av)) {
            ptmd_walk_anomaly(w, PTMD_AN_BAD_POINTER, av, index, PTMD_NO_ARENA);
            break;
        }
        if (walk_arena(w, av, index, err) != 0) return -1;
        next = PTMD_W_ARENA(w, index)->next;
        index++;
        if (index >= PTMD_MAX_ARENAS) break;
        av = next;
    } while (av != w->lc->main_arena);
    return 0;
}
