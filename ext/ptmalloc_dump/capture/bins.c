/* The arena's lists before its chunks are walked: every fastbin and bin entry into a membership table
 * (open addressing keyed by chunk address), each list checked as it is followed (bounded, in the
 * arena's heaps, linked both ways), and the large bins' nextsize rings. A list found broken marks the
 * walk's lists_unsafe: glibc's malloc_info() and mallinfo2() would follow it blindly. Nothing here
 * calls malloc. */
#define _GNU_SOURCE
#include "capture/arena.h"

#include <errno.h>
#include <string.h>

static inline size_t slot_hash(uint64_t addr, size_t mask)
{
    return (size_t)(((addr >> 4) * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static int lists_reset(ptmd_walk *w, size_t cap)
{
    size_t bytes = cap * sizeof(ptmd_list_slot);
    w->lists.len = 0;
    if (ptmd_buf_reserve(&w->lists, bytes) != 0) return -1;
    memset(w->lists.base, 0, bytes);
    w->lists.len = bytes;
    w->lists_cap = cap;
    w->lists_used = 0;
    return 0;
}

ptmd_list_slot *ptmd_lists_find(ptmd_walk *w, uint64_t addr)
{
    ptmd_list_slot *t = (ptmd_list_slot *)(void *)w->lists.base;
    size_t mask = w->lists_cap - 1, i = slot_hash(addr, mask);
    for (;;) {
        if (t[i].addr == addr) return &t[i];
        if (t[i].addr == 0) return NULL;
        i = (i + 1) & mask;
    }
}

/* Inserts; returns the slot, with *dup set when the address was already there. NULL on mmap failure. */
static ptmd_list_slot *lists_insert(ptmd_walk *w, uint64_t addr, uint32_t state, int *dup)
{
    ptmd_list_slot *t;
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
            ptmd_list_slot *s = &((ptmd_list_slot *)(void *)old.base)[k];
            if (s->addr) {
                int d;
                ptmd_list_slot *n = lists_insert(w, s->addr, s->state, &d);
                n->seen = s->seen;
            }
        }
        ptmd_buf_release(&old);
    }
    t = (ptmd_list_slot *)(void *)w->lists.base;
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


/* A large bin's second list, over its fd list (walked and found whole just before): the first chunk
 * of each size ("leader", sizes decreasing along fd) links to the next and previous leaders through
 * fd_nextsize and bk_nextsize, in a ring; every other chunk has fd_nextsize NULL (_int_free and the
 * remainder code clear it, and unlink_chunk takes a non-NULL one for a leader). glibc's own malloc
 * follows these when it searches the bin; malloc_info() and mallinfo2() do not. */
static void check_nextsize(ptmd_walk *w, ptmd_arena_ctx *a, uint64_t head, int bin)
{
    uint64_t p, first = 0, last = 0, last_size = 0, steps = 0;
    for (p = ptmd_chunk_fd(w, head); p != head && steps <= a->bound; p = ptmd_chunk_fd(w, p), steps++) {
        uint64_t size, fdn;
        if (!ptmd_in_arena(w, a, p, PTMD_MCHUNK_BK_NEXTSIZE + 8)) {
            ptmd_walk_anomaly(w, PTMD_AN_BAD_POINTER, p, (uint64_t)bin, a->index);
            return;
        }
        size = ptmd_chunksize(ptmd_mchunk_size(w, p));
        fdn = ptmd_rd64(w, p + PTMD_MCHUNK_FD_NEXTSIZE);
        if (last && size == last_size) {
            if (fdn) ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, p, fdn, a->index);
            continue;
        }
        if (last && size > last_size) ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, p, size, a->index);   /* out of order */
        if (last && (ptmd_rd64(w, last + PTMD_MCHUNK_FD_NEXTSIZE) != p || ptmd_rd64(w, p + PTMD_MCHUNK_BK_NEXTSIZE) != last))
            ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, p, ptmd_rd64(w, p + PTMD_MCHUNK_BK_NEXTSIZE), a->index);
        if (!first) first = p;
        last = p;
        last_size = size;
    }
    if (first && (ptmd_rd64(w, last + PTMD_MCHUNK_FD_NEXTSIZE) != first || ptmd_rd64(w, first + PTMD_MCHUNK_BK_NEXTSIZE) != last))
        ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, first, (uint64_t)bin, a->index);
}

static void list_broken(ptmd_walk *w, const ptmd_arena_ctx *a, uint32_t kind, uint64_t where, uint64_t what)
{
    ptmd_walk_anomaly(w, kind, where, what, a->index);
    w->lists_unsafe = 1;
}

int ptmd_collect_lists(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    int i;
    uint64_t steps;
    if (lists_reset(w, 1024) != 0) return ptmd_fail_sys(err, errno, "list table", "mmap");
    a->fast_entries = 0;
    for (i = 0; i < L->nfastbins; i++) {
        uint64_t p = ptmd_arena_field(w, a->av, L->ms_fastbins + (size_t)i * 8);
        for (steps = 0; p; steps++) {
            int dup;
            uint64_t size, fd;
            if (steps > a->bound) { list_broken(w, a, PTMD_AN_LIST_CYCLE, p, (uint64_t)i); break; }
            if (!ptmd_in_arena(w, a, p, 32)) { list_broken(w, a, PTMD_AN_BAD_POINTER, p, (uint64_t)i); break; }
            size = ptmd_chunksize(ptmd_mchunk_size(w, p));
            if (size < PTMD_MINSIZE || ptmd_fastbin_index(size) != i)
                ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, p, size, a->index);
            if (!lists_insert(w, p, PTMD_ST_FASTBIN, &dup)) return ptmd_fail_sys(err, errno, "list table", "mmap");
            if (dup) { list_broken(w, a, PTMD_AN_DUPLICATE, p, (uint64_t)i); break; }
            a->fast_entries++;
            fd = ptmd_chunk_fd(w, p);
            p = L->safe_linking ? ptmd_reveal_ptr(p + PTMD_MCHUNK_FD, fd) : fd;
        }
    }
    for (i = 1; i < PTMD_NBINS; i++) {
        uint64_t head = ptmd_bin_at(a->av + L->ms_bins, i);
        uint64_t p = ptmd_chunk_fd(w, head), prev = head;
        uint32_t state = i == 1 ? PTMD_ST_UNSORTED : i < PTMD_NSMALLBINS ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN;
        for (steps = 0; p != head; steps++) {
            int dup;
            uint64_t size;
            if (steps > a->bound) { list_broken(w, a, PTMD_AN_LIST_CYCLE, p, (uint64_t)i); break; }
            if (!ptmd_in_arena(w, a, p, 32)) { list_broken(w, a, PTMD_AN_BAD_POINTER, p, (uint64_t)i); break; }
            if (ptmd_chunk_bk(w, p) != prev) list_broken(w, a, PTMD_AN_LIST_LINK, p, prev);
            size = ptmd_chunksize(ptmd_mchunk_size(w, p));
            if (i >= 2 && ptmd_bin_index(size) != i) ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, p, size, a->index);
            if (!lists_insert(w, p, state, &dup)) return ptmd_fail_sys(err, errno, "list table", "mmap");
            if (dup) { list_broken(w, a, PTMD_AN_DUPLICATE, p, (uint64_t)i); break; }
            prev = p;
            p = ptmd_chunk_fd(w, p);
        }
        if (p != head) continue;
        /* every bk was the chunk before along fd: with the head's own bk the last one, the bk list
         * (mallinfo2's way) is the same chunks in reverse */
        if (ptmd_chunk_bk(w, head) != prev) list_broken(w, a, PTMD_AN_LIST_LINK, head, prev);
        if (state == PTMD_ST_LARGEBIN) check_nextsize(w, a, head, i);
    }
    return 0;
}
