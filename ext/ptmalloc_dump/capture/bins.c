/* The arena's lists. Fastbin entries look in use, so the fastbins are followed before the chunks are
 * walked, into a membership table (open addressing keyed by chunk address) the walk consults. The
 * bins hold chunks free by their bits: the walk notes each one with its fd and bk as it passes (the
 * same cache lines as its header). Each note's successor is then found by a lookup that stands
 * alone, in note order, so the processor overlaps them, and the bins are followed through those links,
 * which fit in cache, where following them through the heap waits on memory at every step. A bin
 * entry that is no noted chunk is read from the heap. Every list is checked as it is followed
 * (bounded, in the arena's heaps, linked both ways, on no other list), and the large bins' nextsize
 * rings. A list found broken marks the walk's lists_unsafe: glibc's malloc_info() and mallinfo2()
 * would follow it blindly. Nothing here calls malloc. */
#define _GNU_SOURCE
#include "capture/bins.h"
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

static void list_broken(ptmd_walk *w, const ptmd_arena_ctx *a, uint32_t kind, uint64_t where, uint64_t what)
{
    ptmd_walk_anomaly(w, kind, where, what, a->index);
    w->lists_unsafe = 1;
}

int ptmd_collect_fastbins(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    int i;
    uint64_t steps;
    if (lists_reset(w, 1024) != 0) return ptmd_fail_sys(err, errno, "list table", "mmap");
    w->notes.len = 0;
    w->large_notes.len = 0;
    a->fast_entries = 0;
    for (i = 0; i < L->nfastbins; i++) {
        uint64_t p = ptmd_arena_field(w, a->av, L->ms_fastbins + (size_t)i * 8);
        for (steps = 0; p; steps++) {
            int dup;
            uint64_t size, fd;
            if (steps > a->bound) {
                list_broken(w, a, PTMD_AN_LIST_CYCLE, p, (uint64_t)i);
                break;
            }
            if (!ptmd_in_arena(w, a, p, 32)) {
                list_broken(w, a, PTMD_AN_BAD_POINTER, p, (uint64_t)i);
                break;
            }
            size = ptmd_chunksize(ptmd_mchunk_size(w, p));
            if (size < PTMD_MINSIZE || ptmd_fastbin_index(size) != i)
                ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, p, size, a->index);
            if (!lists_insert(w, p, PTMD_ST_FASTBIN, &dup)) return ptmd_fail_sys(err, errno, "list table", "mmap");
            if (dup) {
                list_broken(w, a, PTMD_AN_DUPLICATE, p, (uint64_t)i);
                break;
            }
            a->fast_entries++;
            fd = ptmd_chunk_fd(w, p);
            p = L->safe_linking ? ptmd_reveal_ptr(p + PTMD_MCHUNK_FD, fd) : fd;
        }
    }
    w->list_entries += a->fast_entries;
    return 0;
}

/* ---- the notes ---------------------------------------------------------------------------- */

#define NOTE_NONE UINT32_MAX

static ptmd_free_note *notes(const ptmd_walk *w)
{
    return (ptmd_free_note *)(void *)w->notes.base;
}
static uint64_t note_size(const ptmd_walk *w, const ptmd_free_note *e)
{
    return ptmd_rec_size(PTMD_W_CHUNK(w, e->rec));
}
static ptmd_note_link *links(const ptmd_walk *w)
{
    return (ptmd_note_link *)(void *)w->note_links.base;
}

/* An index over the arena's notes: uint32 slots holding a note's position + 1, 0 when empty. */
static int notes_index(ptmd_walk *w)
{
    size_t n = PTMD_BUF_COUNT(&w->notes, ptmd_free_note), cap = 1024, i;
    uint32_t *slot;
    while (cap < 2 * n) cap *= 2;
    w->note_index.len = 0;
    if (ptmd_buf_reserve(&w->note_index, cap * sizeof(uint32_t)) != 0) return -1;
    slot = (uint32_t *)(void *)w->note_index.base;
    memset(slot, 0, cap * sizeof(uint32_t));
    w->note_index.len = cap * sizeof(uint32_t);
    w->note_mask = cap - 1;
    for (i = 0; i < n; i++) {
        size_t k = slot_hash(notes(w)[i].addr, w->note_mask);
        while (slot[k]) k = (k + 1) & w->note_mask;
        slot[k] = (uint32_t)(i + 1);
    }
    return 0;
}

/* The position of the note of the chunk at addr, or NOTE_NONE. */
static uint32_t note_at(const ptmd_walk *w, uint64_t addr)
{
    const uint32_t *slot = (const uint32_t *)(const void *)w->note_index.base;
    size_t k;
    for (k = slot_hash(addr, w->note_mask); slot[k]; k = (k + 1) & w->note_mask)
        if (notes(w)[slot[k] - 1].addr == addr) return slot[k] - 1;
    return NOTE_NONE;
}

/* A large bin's second list, over its fd list (walked and found whole just before): the first chunk
 * of each size ("leader", sizes decreasing along fd) links to the next and previous leaders through
 * fd_nextsize and bk_nextsize, in a ring; every other chunk has fd_nextsize NULL (_int_free and the
 * remainder code clear it, and unlink_chunk takes a non-NULL one for a leader). glibc's own malloc
 * follows these when it searches the bin; malloc_info() and mallinfo2() do not. A noted chunk's
 * fields come from its note (the walk took the nextsize pair of every large one), any other entry's
 * from the heap. */
static int large_entry(ptmd_walk *w, const ptmd_arena_ctx *a, uint64_t p, uint64_t f[4])
{
    uint32_t k = note_at(w, p);
    if (k != NOTE_NONE && notes(w)[k].large) {
        const ptmd_free_note *e = &notes(w)[k];
        const ptmd_large_note *l = PTMD_BUF_AT(&w->large_notes, ptmd_large_note, e->large - 1);
        f[0] = note_size(w, e);
        f[1] = e->fd;
        f[2] = l->fd_nextsize;
        f[3] = l->bk_nextsize;
        return 1;
    }
    if (!ptmd_in_arena(w, a, p, PTMD_MCHUNK_BK_NEXTSIZE + 8)) return 0;
    f[0] = ptmd_chunksize(ptmd_mchunk_size(w, p));
    f[1] = ptmd_chunk_fd(w, p);
    f[2] = ptmd_mapped_word(w, p + PTMD_MCHUNK_FD_NEXTSIZE);
    f[3] = ptmd_mapped_word(w, p + PTMD_MCHUNK_BK_NEXTSIZE);
    return 1;
}

static void check_nextsize(ptmd_walk *w, ptmd_arena_ctx *a, uint64_t head, int bin)
{
    uint64_t p, first = 0, first_bkn = 0, last = 0, last_size = 0, last_fdn = 0, steps = 0;
    uint64_t f[4]; /* size, fd, fd_nextsize, bk_nextsize */
    for (p = ptmd_chunk_fd(w, head); p != head && steps <= a->bound; p = f[1], steps++) {
        if (!large_entry(w, a, p, f)) {
            ptmd_walk_anomaly(w, PTMD_AN_BAD_POINTER, p, (uint64_t)bin, a->index);
            return;
        }
        if (last && f[0] == last_size) {
            if (f[2]) ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, p, f[2], a->index);
            continue;
        }
        if (last && f[0] > last_size) ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, p, f[0], a->index); /* out of order */
        if (last && (last_fdn != p || f[3] != last)) ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, p, f[3], a->index);
        if (!first) {
            first = p;
            first_bkn = f[3];
        }
        last = p;
        last_size = f[0];
        last_fdn = f[2];
    }
    if (first && (last_fdn != first || first_bkn != last))
        ptmd_walk_anomaly(w, PTMD_AN_NEXTSIZE, first, (uint64_t)bin, a->index);
}

/* Each note's successor along fd as a note position, and whether that successor's bk leads back;
 * the bin its size belongs in; whether a fastbin lists it too. The notes are taken in order and each
 * lookup stands alone, so the processor runs many of them at once: the bins are then followed
 * through these links, which fit in cache, instead of one wait on memory a step. */
static int link_notes(ptmd_walk *w, const ptmd_arena_ctx *a)
{
    const size_t n = PTMD_BUF_COUNT(&w->notes, ptmd_free_note), ahead = 16;
    const ptmd_free_note *e = notes(w);
    const uint32_t *slot;
    ptmd_note_link *l;
    size_t i;
    w->note_links.len = 0;
    if (!ptmd_buf_push(&w->note_links, n * sizeof(ptmd_note_link) + 1)) return -1;
    w->note_links.len = n * sizeof(ptmd_note_link);
    slot = (const uint32_t *)(const void *)w->note_index.base;
    l = links(w);
    for (i = 0; i < n; i++) {
        if (i + ahead < n) __builtin_prefetch(&slot[slot_hash(e[i + ahead].fd, w->note_mask)]);
        l[i].next = note_at(w, e[i].fd);
        l[i].want = (uint8_t)ptmd_bin_index(note_size(w, &e[i]));
        l[i].in_fast = a->fast_entries && ptmd_lists_find(w, e[i].addr);
    }
    for (i = 0; i < n; i++) l[i].link_ok = l[i].next != NOTE_NONE && e[l[i].next].bk == e[i].addr;
    return 0;
}

/* The chunk record of the arena starting at addr, or NULL (binary search in its heap's records). */
static ptmd_chunk_rec *arena_record(ptmd_walk *w, const ptmd_arena_ctx *a, uint64_t addr)
{
    uint32_t h;
    for (h = a->first_heap; h < a->first_heap + a->n_heaps; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        uint64_t lo = hp->first_chunk, hi = hp->first_chunk + hp->n_chunks;
        if (addr < hp->start || addr >= hp->end) continue;
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            ptmd_chunk_rec *c = PTMD_W_CHUNK(w, mid);
            if (c->addr == addr) return c;
            if (c->addr < addr) lo = mid + 1;
            else hi = mid;
        }
        return NULL;
    }
    return NULL;
}

static uint32_t bin_state(int bin)
{
    return bin == 1 ? PTMD_ST_UNSORTED : bin < PTMD_NSMALLBINS ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN;
}

/* Bin i from its head along fd: through the links while the list runs over noted chunks, from the
 * heap where it does not (such an entry goes into the membership table, for the end to say what it
 * was). Each entry is checked as the heap walk of old did: bounded, in the arena, on no other list,
 * its bk the entry before, its size of this bin. */
static int follow_bin(ptmd_walk *w, ptmd_arena_ctx *a, int i, ptmd_err *err)
{
    const ptmd_free_note *e = notes(w);
    ptmd_note_link *l = links(w);
    const uint64_t head = ptmd_bin_at(a->av + w->L->ms_bins, i);
    const uint32_t state = bin_state(i);
    uint64_t p = ptmd_chunk_fd(w, head), prev = head, steps;
    uint32_t cur = p == head ? NOTE_NONE : note_at(w, p), prev_note = NOTE_NONE;
    for (steps = 0; cur != NOTE_NONE || p != head; steps++) {
        uint64_t size, fd, bk;
        int dup;
        if (cur != NOTE_NONE) {
            if (steps > a->bound) {
                list_broken(w, a, PTMD_AN_LIST_CYCLE, e[cur].addr, (uint64_t)i);
                return 0;
            }
            if (l[cur].bin || l[cur].in_fast) {
                list_broken(w, a, PTMD_AN_DUPLICATE, e[cur].addr, (uint64_t)i);
                return 0;
            }
            l[cur].bin = (uint8_t)i;
            if (prev_note != NOTE_NONE ? !l[prev_note].link_ok : e[cur].bk != prev)
                list_broken(w, a, PTMD_AN_LIST_LINK, e[cur].addr, prev_note != NOTE_NONE ? e[prev_note].addr : prev);
            if (i >= 2 && l[cur].want != i)
                ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, e[cur].addr, note_size(w, &e[cur]), a->index);
            if (l[cur].next != NOTE_NONE) {
                prev_note = cur;
                cur = l[cur].next;
                continue;
            }
            /* off the notes: to the head, or to an entry that is no noted chunk */
            prev = e[cur].addr;
            p = e[cur].fd;
            prev_note = cur = NOTE_NONE;
            continue;
        }
        if (steps > a->bound) {
            list_broken(w, a, PTMD_AN_LIST_CYCLE, p, (uint64_t)i);
            return 0;
        }
        if (!ptmd_in_arena(w, a, p, 32)) {
            list_broken(w, a, PTMD_AN_BAD_POINTER, p, (uint64_t)i);
            return 0;
        }
        if (!lists_insert(w, p, state, &dup)) return ptmd_fail_sys(err, errno, "list table", "mmap");
        if (dup) {
            list_broken(w, a, PTMD_AN_DUPLICATE, p, (uint64_t)i);
            return 0;
        }
        size = ptmd_chunksize(ptmd_mchunk_size(w, p));
        fd = ptmd_chunk_fd(w, p);
        bk = ptmd_chunk_bk(w, p);
        if (bk != prev) list_broken(w, a, PTMD_AN_LIST_LINK, p, prev);
        if (i >= 2 && ptmd_bin_index(size) != i) ptmd_walk_anomaly(w, PTMD_AN_WRONG_BIN, p, size, a->index);
        prev = p;
        p = fd;
        cur = p == head ? NOTE_NONE : note_at(w, p);
    }
    /* every bk was the entry before along fd: with the head's own bk the last one, the bk list
     * (mallinfo2's way) is the same chunks in reverse */
    w->list_entries += steps;
    if (prev_note != NOTE_NONE) prev = e[prev_note].addr;
    if (ptmd_chunk_bk(w, head) != prev) list_broken(w, a, PTMD_AN_LIST_LINK, head, prev);
    if (state == PTMD_ST_LARGEBIN) check_nextsize(w, a, head, i);
    return 0;
}

int ptmd_settle_lists(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err)
{
    size_t i, n = PTMD_BUF_COUNT(&w->notes, ptmd_free_note);
    int bin;
    if (notes_index(w) != 0 || link_notes(w, a) != 0) return ptmd_fail_sys(err, errno, "list table", "mmap");
    for (bin = 1; bin < PTMD_NBINS; bin++)
        if (follow_bin(w, a, bin, err) != 0) return -1;
    /* each noted chunk takes its bin's state; one on no bin is an anomaly */
    for (i = 0; i < n; i++) {
        const ptmd_free_note *e = &notes(w)[i];
        ptmd_chunk_rec *r = PTMD_W_CHUNK(w, e->rec);
        ptmd_list_slot *s;
        uint64_t size = ptmd_rec_size(r);
        if (links(w)[i].bin) {
            ptmd_rec_set_state(r, (int)bin_state(links(w)[i].bin));
            continue;
        }
        s = a->fast_entries ? ptmd_lists_find(w, e->addr) : NULL; /* only a fastbin entry can have its address */
        ptmd_walk_anomaly(w, s ? PTMD_AN_FASTBIN_FREE : PTMD_AN_FREE_NOT_IN_BIN, e->addr, size, a->index);
        if (s) s->seen = 1;
        ptmd_rec_set_state(r, s ? (int)s->state : size < PTMD_MIN_LARGE_SIZE ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN);
        r->word |= PTMD_CF_WORD(PTMD_CF_ANOMALY);
    }
    /* list entries that no chunk of the walk took: a bin entry in use, or no chunk at all */
    for (i = 0; i < w->lists_cap; i++) {
        ptmd_list_slot *s = &((ptmd_list_slot *)(void *)w->lists.base)[i];
        ptmd_chunk_rec *r;
        if (!s->addr || s->seen) continue;
        if (s->state != PTMD_ST_FASTBIN && (r = arena_record(w, a, s->addr)) != NULL &&
            ptmd_rec_state(r) == PTMD_ST_IN_USE) {
            ptmd_walk_anomaly(w, PTMD_AN_LIST_IN_USE, s->addr, s->state, a->index);
            r->word |= PTMD_CF_WORD(PTMD_CF_ANOMALY);
            continue;
        }
        ptmd_walk_anomaly(w, PTMD_AN_LIST_NOT_CHUNK, s->addr, s->state, a->index);
    }
    return 0;
}
