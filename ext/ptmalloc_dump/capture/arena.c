/* Arenas before and around the walk: glibc's lock on each, the checks of main_arena and the ring
 * before anything is walked, each arena's heaps (the sbrk region, or heap_info regions through
 * prev), and the check that every list can be followed before glibc's own counters are called.
 * Nothing here calls malloc. */
#define _GNU_SOURCE
#include "capture/arena.h"
#include "capture/regions.h"

#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- arena locks: glibc's low-level lock (0 free, 1 locked, 2 locked with waiters) ----------- */

void ptmd_arena_lock(ptmd_walk *w, int *futex)
{
    int expected = 0;
    uint64_t t0;
    /* a copy of a stopped process: its locks were found free when it was taken (dump.c) */
    if (!w->src.in_place) return;
    if (__atomic_compare_exchange_n(futex, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    t0 = ptmd_now_ns();
    /* __lll_lock_wait_private: announce a waiter by storing 2, sleep while the value stays 2 */
    while (__atomic_exchange_n(futex, 2, __ATOMIC_ACQUIRE) != 0)
        syscall(SYS_futex, futex, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    w->lock_wait_ns += ptmd_now_ns() - t0;
}

void ptmd_arena_unlock(ptmd_walk *w, int *futex)
{
    if (!w->src.in_place) return;
    if (__atomic_exchange_n(futex, 0, __ATOMIC_RELEASE) > 1)
        syscall(SYS_futex, futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* True when [p, p+len) lies inside one of the arena's heaps (and so was checked readable). */
int ptmd_in_arena(ptmd_walk *w, const ptmd_arena_ctx *a, uint64_t p, uint64_t len)
{
    uint32_t i;
    if (p & PTMD_MALLOC_ALIGN_MASK) return 0;
    if (a->heaps_sorted) {
        uint32_t lo = 0, hi = a->n_heaps;
        while (lo < hi) { /* the first heap ending after p */
            uint32_t mid = lo + (hi - lo) / 2;
            if (PTMD_W_HEAP(w, a->first_heap + mid)->end <= p) lo = mid + 1;
            else hi = mid;
        }
        if (lo == a->n_heaps) return 0;
        {
            const ptmd_heap_rec *h = PTMD_W_HEAP(w, a->first_heap + lo);
            return p >= h->start && len <= h->end - p;
        }
    }
    for (i = 0; i < a->n_heaps; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, a->first_heap + i);
        if (p >= h->start && p < h->end && len <= h->end - p) return 1;
    }
    return 0;
}

uint64_t ptmd_arena_field(ptmd_walk *w, uintptr_t av, size_t off)
{
    return off == PTMD_NONE ? 0 : ptmd_mapped_word(w, av + off);
}

/* heap_info checks: aligned to heap_max, readable, ar_ptr == the arena, sane size. */
static int heap_info_ok(ptmd_walk *w, uintptr_t h, uintptr_t av)
{
    const ptmd_layout *L = w->L;
    uint64_t size;
    if (!h || (h & (w->heap_max - 1))) return 0;
    if (!ptmd_maps_readable(&w->maps, h, L->hi_size_total)) return 0;
    if (ptmd_mapped_word(w, h + L->hi_ar_ptr) != av) return 0;
    size = ptmd_mapped_word(w, h + L->hi_size);
    if (size < L->hi_size_total || size > w->heap_max) return 0;
    return ptmd_maps_readable(&w->maps, h, size);
}

/* The mappings were read before this arena's lock was taken: a heap made or grown since (new_heap's
 * mmap, grow_heap's mprotect, sbrk) is missing from them or still PROT_NONE there. Reads them again,
 * at most once per arena; true when that happened, so that a failed check is worth repeating. */
int ptmd_arena_maps_reload(ptmd_walk *w, ptmd_arena_ctx *a)
{
    ptmd_err ignored;
    int again;
    if (a->maps_reloaded || !(again = ptmd_source_maps_again(&w->src, &w->maps, &ignored))) return 0;
    a->maps_reloaded = 1;
    return again > 0;
}

static ptmd_heap_rec *new_heap(ptmd_walk *w, ptmd_arena_ctx *a, uint32_t kind, uint64_t start, uint64_t end)
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

/* True when the heap_info at h is one of the n this arena's chain already gave: prev led back. */
static int heap_listed(ptmd_walk *w, const ptmd_arena_ctx *a, uintptr_t h, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        if (PTMD_W_HEAP(w, a->first_heap + i)->start == h) return 1;
    return 0;
}

/* The main arena once sbrk failed: its regions (regions.c), which together hold system_mem bytes and
 * one of which ends in top. A region made since the mappings were read is missing from them: on a
 * shortfall they are read again and the regions found again, once. What then still cannot be found
 * is recorded (system_mem, and top when its region is not among them), and top's own chunk walked. */
static int noncontiguous_heaps(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err)
{
    const size_t mark = w->heaps.len;
    uint64_t bytes = 0, system_mem = ptmd_arena_field(w, a->av, w->L->ms_system_mem);
    uint32_t i;
    int has_top = 0;
    for (;;) {
        w->heaps.len = mark;
        a->n_heaps = 0;
        bytes = 0;
        if (ptmd_main_regions(w, a, err) != 0) return -1;
        for (i = 0; i < a->n_heaps; i++) {
            const ptmd_heap_rec *h = PTMD_W_HEAP(w, a->first_heap + i);
            bytes += h->end - h->start;
            if (h->kind == PTMD_HEAP_SBRK && w->have_mp) bytes -= ptmd_sbrk_pad(h->start, w->sbrk_base);
        }
        a->heaps_sorted = 1;
        has_top = ptmd_in_arena(w, a, a->top, a->top_size);
        if ((has_top && bytes == system_mem) || !ptmd_arena_maps_reload(w, a)) break;
    }
    if (!has_top) {
        ptmd_walk_anomaly(w, PTMD_AN_TOP, a->top, a->top_size, a->index);
        if (a->top_size >= PTMD_MINSIZE && ptmd_maps_readable(&w->maps, a->top, a->top_size) &&
            !ptmd_in_arena(w, a, a->top_end - 1, 1)) {
            uint32_t at = a->n_heaps;
            if (!new_heap(w, a, PTMD_HEAP_MAIN_MMAP, a->top, a->top_end))
                return ptmd_fail_sys(err, errno, "heap table", "mmap");
            /* keep address order */
            while (at > 0 && PTMD_W_HEAP(w, a->first_heap + at - 1)->start > a->top) {
                ptmd_heap_rec tmp = *PTMD_W_HEAP(w, a->first_heap + at);
                *PTMD_W_HEAP(w, a->first_heap + at) = *PTMD_W_HEAP(w, a->first_heap + at - 1);
                *PTMD_W_HEAP(w, a->first_heap + at - 1) = tmp;
                at--;
            }
            a->n_heaps++;
        }
    }
    return 0;
}

int ptmd_arena_collect_heaps(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    a->first_heap = (uint32_t)PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    a->n_heaps = 0;
    if (a->main) {
        uint64_t start = w->have_mp && w->sbrk_base ? w->sbrk_base : 0;
        const ptmd_map *m;
        if (a->top == ptmd_initial_top(a->av + L->ms_bins)) return 0; /* initial_top: never used */
        if ((uint32_t)ptmd_mapped_word(w, a->av + L->ms_flags) & PTMD_NONCONTIGUOUS_BIT)
            return noncontiguous_heaps(w, a, err);
        if (!start) {
            m = ptmd_maps_find(&w->maps, a->top);
            start = m ? m->start : a->top;
        }
        if (start <= a->top && !ptmd_maps_readable(&w->maps, start, a->top_end - start)) ptmd_arena_maps_reload(w, a);
        if (start > a->top || !ptmd_maps_readable(&w->maps, start, a->top_end - start)) {
            ptmd_walk_anomaly(w, PTMD_AN_TOP, a->top, start, a->index);
            start = a->top; /* walk only what can be read */
            if (!ptmd_maps_readable(&w->maps, a->top, a->top_end - a->top)) return 0;
        }
        /* an unaligned sbrk_base: the heap recorded from the boundary below (ptmd_sbrk_pad), its
         * alignment gap a meta chunk */
        start &= ~(uint64_t)PTMD_MALLOC_ALIGN_MASK;
        if (!new_heap(w, a, PTMD_HEAP_SBRK, start, a->top_end)) return ptmd_fail_sys(err, errno, "heap table", "mmap");
        a->n_heaps = 1;
        return 0;
    } else {
        uintptr_t h = ptmd_heap_for_ptr(a->top, w->heap_max);
        uint32_t n = 0, i;
        while (h) {
            uint64_t size, prev;
            ptmd_heap_rec *hr;
            if (n < PTMD_MAX_HEAPS_PER_ARENA && !heap_info_ok(w, h, a->av) && ptmd_arena_maps_reload(w, a)) continue;
            if (n >= PTMD_MAX_HEAPS_PER_ARENA || !heap_info_ok(w, h, a->av) || heap_listed(w, a, h, n)) {
                /* glibc follows prev without a check (malloc_info, heap_trim): a chain that is not
                 * finite must keep it from being called */
                ptmd_walk_anomaly(w, PTMD_AN_HEAP_INFO, h, n, a->index);
                a->heaps_broken = 1;
                break;
            }
            size = ptmd_mapped_word(w, h + L->hi_size);
            prev = ptmd_mapped_word(w, h + L->hi_prev);
            hr = new_heap(w, a, PTMD_HEAP_MMAP_HEAP, h, h + size);
            if (!hr) return ptmd_fail_sys(err, errno, "heap table", "mmap");
            hr->reserved_end = h + w->heap_max;
            hr->prev = prev;
            hr->mprotect_size = ptmd_mapped_word(w, h + L->hi_mprotect_size);
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

/* Next arena on the ring, validated: main_arena itself, or a non-main arena, whose malloc_state
 * follows the heap_info at the start of its first heap, which points back at it. Checked before the
 * arena's lock is taken, while threads may be making arenas and growing heaps: the two structs are
 * read fault-free (an arena made since the mappings were read is not in them). The heap_info's other
 * fields are checked with its heap chain, under the lock (ptmd_arena_collect_heaps): damage there is
 * recorded against this arena, and the others are still walked. */
int ptmd_arena_ok(ptmd_walk *w, uintptr_t av)
{
    const ptmd_layout *L = w->L;
    unsigned char head[4096];
    size_t n = L->hi_size_total + L->ms_size;
    uintptr_t h;
    uint64_t ar;
    if (av == w->lc->main_arena) return 1;
    if (!av || (av & 7) || n > sizeof(head)) return 0;
    h = av - L->hi_size_total;
    if ((h & (w->heap_max - 1)) != 0) return 0;
    if (ptmd_guarded_copy(w, h, head, n) != 0) return 0;
    memcpy(&ar, head + L->hi_ar_ptr, 8);
    return ar == av;
}

static int ring_has(const ptmd_buf *ring, uint64_t av)
{
    size_t i, n = PTMD_BUF_COUNT(ring, uint64_t);
    for (i = 0; i < n; i++)
        if (PTMD_BUF_AT(ring, uint64_t, i)[0] == av) return 1;
    return 0;
}

/* glibc goes round the ring (malloc_info, mallinfo2, arena_get2's reuse) until it is back at
 * main_arena, without a check: a ring that does not lead back must keep those from being called. */
int ptmd_arena_ring(ptmd_walk *w, int record)
{
    uint64_t av = w->lc->main_arena;
    w->ring.len = 0;
    for (;;) {
        uint64_t next;
        if (ptmd_buf_append(&w->ring, &av, sizeof(av)) != 0) return -1;
        next = ptmd_mapped_word(w, av + w->L->ms_next);
        if (next == w->lc->main_arena) return 0;
        if (!ptmd_arena_ok(w, next)) {
            if (record)
                ptmd_walk_anomaly(w, PTMD_AN_BAD_POINTER, next, PTMD_BUF_COUNT(&w->ring, uint64_t), PTMD_NO_ARENA);
            return 1;
        }
        if (PTMD_BUF_COUNT(&w->ring, uint64_t) >= PTMD_MAX_ARENAS || ring_has(&w->ring, next)) {
            if (record) ptmd_walk_anomaly(w, PTMD_AN_ARENA_RING, av, next, PTMD_NO_ARENA);
            return 1;
        }
        av = next;
    }
}

static const char *validate_once(ptmd_walk *w);

/* The mappings were read before any lock was taken: another thread may have grown the heap since
 * (sbrk, a new arena's heap). A failed check is repeated once over a fresh read of them. */
int ptmd_walk_validate(ptmd_walk *w, ptmd_err *err)
{
    const ptmd_libc *lc = w->lc;
    const char *what = validate_once(w);
    ptmd_err ignored;
    if (what && ptmd_source_maps_again(&w->src, &w->maps, &ignored) > 0) what = validate_once(w);
    if (!what) return 0;
    if (lc->layout_assumed)
        return ptmd_fail(err, PTMD_E_LIBC,
                         "glibc %s is newer than the newest glibc ptmalloc_dump knows (2.%d), and its malloc "
                         "structures at main_arena %#lx do not match that version's layout (%s); refusing to "
                         "walk them",
                         lc->glibc_version, ptmd_layout_newest_minor(), (unsigned long)lc->main_arena, what);
    return ptmd_fail(err, PTMD_E_LIBC,
                     "glibc %s: the malloc structures at main_arena %#lx do not match the layout "
                     "known for this version (%s); refusing to walk them",
                     lc->glibc_version, (unsigned long)lc->main_arena, what);
}

/* NULL when main_arena passes every check, else what failed. A wrong layout shows there; the ring
 * beyond it is followed by ptmd_arena_ring, where a break is damage, recorded as an anomaly. */
static const char *validate_once(ptmd_walk *w)
{
    const ptmd_layout *L = w->L;
    const ptmd_libc *lc = w->lc;
    uintptr_t av = lc->main_arena, top;
    uint64_t top_size, system_mem;
    const char *what = NULL;

    if (!ptmd_maps_readable(&w->maps, av, L->ms_size) || av < lc->rw_start || av + L->ms_size > lc->rw_end) {
        what = "main_arena is not inside libc's writable segment";
        goto fail;
    }
    top = ptmd_mapped_word(w, av + L->ms_top);
    system_mem = ptmd_mapped_word(w, av + L->ms_system_mem);
    if (top != ptmd_initial_top(av + L->ms_bins)) { /* initial_top means the main arena was never used */
        if ((top & PTMD_MALLOC_ALIGN_MASK) || !ptmd_maps_readable(&w->maps, top, 16)) {
            what = "main_arena.top does not point at readable memory";
            goto fail;
        }
        top_size = ptmd_chunksize(ptmd_mchunk_size(w, top));
        if (top_size < PTMD_MINSIZE || !ptmd_maps_readable(&w->maps, top, top_size)) {
            what = "main_arena.top does not lie inside its heap";
            goto fail;
        }
        /* not a whole number of pages where the break had moved before malloc's first sbrk: sysmalloc
         * counts its alignment correction too (glibc before 2.33 copies GLIBC_TUNABLES with sbrk) */
        if (system_mem < top_size || system_mem > (1ull << 47)) {
            what = "main_arena.system_mem is not sane";
            goto fail;
        }
        /* once non-contiguous, top may lie in a region mmapped below the break */
        if (w->have_mp && w->sbrk_base && w->sbrk_base > top &&
            !((uint32_t)ptmd_mapped_word(w, av + L->ms_flags) & PTMD_NONCONTIGUOUS_BIT)) {
            what = "mp_.sbrk_base does not precede main_arena.top";
            goto fail;
        }
    }
    return NULL;
fail:
    return what;
}
