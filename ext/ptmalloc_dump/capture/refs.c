/* The pointer graph (on by default; references: false turns it off). A conservative scan of every
 * in-use chunk's contents for aligned words equal to another allocated chunk's user address (chunk +
 * 16), and for Ruby Integers holding one ((address << 1) | 1, as Fiddle.malloc hands them out);
 * records (from, to) chunk indices, never the contents. Arena chunks are read under their arena's
 * lock; mmapped chunks, which any thread may unmap, through the fault-free reader.
 *
 * Each word is looked up in O(1) after a range test: a chunk-start map gives one bit per 16 bytes of
 * each heap (set where an allocated chunk starts) and, per 64 bits, the index of the first chunk of
 * the heap at or after them, so a chunk's index is that rank plus the bits set below it. A word in a
 * heap that is no chunk's user address may point into an allocated chunk's user data past its start
 * (an interior pointer, as chap counts them): found by binary search over the heap's chunks, which
 * the walk recorded in address order, and recorded apart (inner_refs), a weaker kind of reference. */
#define _GNU_SOURCE
#include "capture/refs.h"
#include "capture/arena.h"

#include <errno.h>
#include <string.h>

#define PTMD_REFS_BLOCK 8192 /* words per fault-free read of an mmapped chunk */

/* One heap in the chunk-start map, in address order. */
typedef struct {
    uint64_t start, end;  /* start rounded down to MALLOC_ALIGNMENT */
    uint64_t first_chunk; /* chunk index of the heap's first chunk */
    uint64_t n_chunks;
    uint64_t word0; /* its first 64-bit word in the map */
} cmap_heap;

/* Bits set in x. Inline: the baseline x86-64 has no popcnt instruction, and __builtin_popcountll
 * there is a call into libgcc. */
static inline uint64_t bits_set(uint64_t x)
{
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (x * 0x0101010101010101ull) >> 56;
}

/* The map: heaps (cmap_heap[n]), then bits (uint64[words]), then ranks (uint32[words]). */
static cmap_heap *cm_heaps(const ptmd_walk *w)
{
    return (cmap_heap *)(void *)w->cmap.base;
}
static uint64_t *cm_bits(const ptmd_walk *w)
{
    return (uint64_t *)(void *)(w->cmap.base + w->cmap_n * sizeof(cmap_heap));
}
static uint32_t *cm_ranks(const ptmd_walk *w)
{
    return (uint32_t *)(void *)(cm_bits(w) + w->cmap_words);
}

static int build_cmap(ptmd_walk *w)
{
    size_t nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), i;
    const uint32_t *order;
    uint64_t words = 0, *bits;
    uint32_t *ranks;
    cmap_heap *ch;
    if (ptmd_walk_sort_heaps(w) != 0) return -1;
    order = (const uint32_t *)(const void *)w->heap_order.base;
    for (i = 0; i < nh; i++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, order[i]);
        words += ((hp->end - (hp->start & ~15ull)) / 16 + 63) / 64;
    }
    w->cmap.len = 0;
    w->cmap_n = nh;
    w->cmap_words = words;
    if (!ptmd_buf_push(&w->cmap, nh * sizeof(cmap_heap) + words * 12 + 8)) return -1;
    ch = cm_heaps(w);
    bits = cm_bits(w);
    ranks = cm_ranks(w);
    words = 0;
    for (i = 0; i < nh; i++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, order[i]);
        uint64_t ci, nw = ((hp->end - (hp->start & ~15ull)) / 16 + 63) / 64, k, rank = 0;
        ch[i].start = hp->start & ~15ull;
        ch[i].end = hp->end;
        ch[i].first_chunk = hp->first_chunk;
        ch[i].n_chunks = hp->n_chunks;
        ch[i].word0 = words;
        for (ci = hp->first_chunk; ci < hp->first_chunk + hp->n_chunks; ci++) {
            const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
            uint64_t bit = (c->addr - ch[i].start) / 16;
            if (c->addr & 15 || c->addr < ch[i].start || c->addr >= ch[i].end) continue;
            bits[words + bit / 64] |= 1ull << (bit % 64);
        }
        /* ranks: chunks of the heap that start before each word */
        for (k = 0; k < nw; k++) {
            ranks[words + k] = (uint32_t)rank;
            rank += bits_set(bits[words + k]);
        }
        words += nw;
    }
    return 0;
}

static inline const cmap_heap *cm_heap_of(const ptmd_walk *w, uint64_t a)
{
    const cmap_heap *ch = cm_heaps(w);
    size_t lo = 0, hi = w->cmap_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a < ch[mid].start) hi = mid;
        else if (a >= ch[mid].end) lo = mid + 1;
        else return &ch[mid];
    }
    return NULL;
}

long ptmd_refs_chunk_of_mem(const ptmd_walk *w, uint64_t mem)
{
    uint64_t a = mem - PTMD_CHUNK_HDR_SZ, bit, word, below;
    const cmap_heap *h;
    long ci;
    if ((mem & PTMD_MALLOC_ALIGN_MASK) || mem < w->cmap_lo + PTMD_CHUNK_HDR_SZ || mem >= w->cmap_hi) return -1;
    h = cm_heap_of(w, a);
    if (!h) return -1;
    bit = (a - h->start) / 16;
    word = cm_bits(w)[h->word0 + bit / 64];
    if (!(word & (1ull << (bit % 64)))) return -1;
    below = word & ((1ull << (bit % 64)) - 1);
    ci = (long)(h->first_chunk + cm_ranks(w)[h->word0 + bit / 64] + bits_set(below));
    return ptmd_rec_is_allocated(PTMD_W_CHUNK(w, ci)) ? ci : -1;
}

long ptmd_refs_chunk_inside(const ptmd_walk *w, uint64_t a)
{
    const cmap_heap *h;
    const ptmd_chunk_rec *c;
    uint64_t lo, hi;
    if (a - w->cmap_lo >= w->cmap_span || !(h = cm_heap_of(w, a)) || !h->n_chunks) return -1;
    /* the last chunk of the heap that starts at or below a */
    lo = h->first_chunk;
    hi = h->first_chunk + h->n_chunks;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (PTMD_W_CHUNK(w, mid)->addr <= a) lo = mid;
        else hi = mid;
    }
    c = PTMD_W_CHUNK(w, lo);
    if (c->addr > a || a <= c->addr + PTMD_CHUNK_HDR_SZ || a - c->addr >= ptmd_rec_size(c)) return -1;
    return ptmd_rec_is_allocated(c) ? (long)lo : -1;
}

/* An interior reference, once per run of words of `from` into the same chunk. */
static int push_inner(ptmd_walk *w, uint64_t from, long to)
{
    ptmd_ref *r;
    size_t n = PTMD_BUF_COUNT(&w->inner_refs, ptmd_ref);
    if ((uint64_t)to == from) return 0;
    if (n) {
        const ptmd_ref *last = PTMD_BUF_AT(&w->inner_refs, ptmd_ref, n - 1);
        if (last->from == (uint32_t)from && last->to == (uint32_t)to) return 0;
    }
    if (!(r = ptmd_buf_push(&w->inner_refs, sizeof(*r)))) return -1;
    r->from = (uint32_t)from;
    r->to = (uint32_t)to;
    return 0;
}

static int push_ref(ptmd_buf *b, uint64_t from, long to)
{
    ptmd_ref *r;
    if ((uint64_t)to == from) return 0;
    r = ptmd_buf_push(b, sizeof(*r));
    if (!r) return -1;
    r->from = (uint32_t)from;
    r->to = (uint32_t)to;
    return 0;
}

/* A word of chunk `from`: a user address, or a Fixnum of one (low five bits 00001). */
static inline int add_ref(ptmd_walk *w, uint64_t from, uint64_t word)
{
    long to;
    if ((word & 31) == 1) {
        uint64_t a = word >> 1;
        if (a < w->cmap_lo || a >= w->cmap_hi || (to = ptmd_refs_chunk_of_mem(w, a)) < 0) return 0;
        return push_ref(&w->int_refs, from, to);
    }
    if (word < w->cmap_lo || word >= w->cmap_hi) return 0;
    if (!(word & PTMD_MALLOC_ALIGN_MASK) && (to = ptmd_refs_chunk_of_mem(w, word)) >= 0)
        return push_ref(&w->refs, from, to);
    if ((to = ptmd_refs_chunk_inside(w, word)) < 0) return 0;
    return push_inner(w, from, to);
}

static int scan_words(ptmd_walk *w, uint64_t ci, const uint64_t *p, uint64_t n)
{
    /* in locals: a store of a reference may alias w (-fno-strict-aliasing), which would reload them
     * after every word */
    const uint64_t lo = w->cmap_lo, span = w->cmap_span;
    uint64_t k;
    for (k = 0; k < n; k++) {
        uint64_t v;
        __builtin_memcpy(&v, p + k, 8);
        if (PTMD_UNLIKELY(v - lo < span || ((v & 1) && (v >> 1) - lo < span)))
            if (add_ref(w, ci, v) != 0) return -1;
    }
    return 0;
}

/* 1 when the page holding addr in heap hp was neither resident nor swapped at the residency pass:
 * never touched (or given back), it reads as zeros and holds no pointer. */
static int page_untouched(const ptmd_walk *w, const ptmd_heap_rec *hp, uint64_t addr)
{
    uint64_t pg = (addr - hp->page_base) / w->page_size;
    if (pg >= hp->n_pages || hp->first_page + pg >= w->pages.len) return 0;
    return !(w->pages.base[hp->first_page + pg] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED));
}

/* An arena chunk in use owns its usable bytes: from mem up to and including the next chunk's
 * prev_size field (malloc_usable_size = chunksize - SIZE_SZ). A chunk over several pages is read a
 * page at a time, skipping untouched pages. */
static int scan_direct(ptmd_walk *w, uint64_t ci, const ptmd_heap_rec *hp)
{
    const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
    uint64_t p = c->addr + PTMD_CHUNK_HDR_SZ, end = c->addr + ptmd_rec_size(c) + PTMD_SIZE_SZ, ps = w->page_size;
    if (end > hp->end) end = hp->end;
    const uint64_t *words;
    if (end - p < 2 * ps) {
        if (!(words = ptmd_mapped_ptr(w, p, end - p))) return 0;
        return scan_words(w, ci, words, (end - p) / 8);
    }
    while (p + 8 <= end) {
        uint64_t next = (p & ~(ps - 1)) + ps;
        if (next > end) next = end;
        if (!page_untouched(w, hp, p) && (words = ptmd_mapped_ptr(w, p, next - p)) != NULL &&
            scan_words(w, ci, words, (next - p) / 8) != 0)
            return -1;
        p = next;
    }
    return 0;
}

static int scan_safe(ptmd_walk *w, uint64_t ci, const ptmd_heap_rec *hp)
{
    uint64_t buf[PTMD_REFS_BLOCK];
    const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
    uint64_t p = c->addr + PTMD_CHUNK_HDR_SZ, end = c->addr + ptmd_rec_size(c), ps = w->page_size;
    while (p + 8 <= end) {
        uint64_t n = (end - p) / 8, k;
        if (n > PTMD_REFS_BLOCK) n = PTMD_REFS_BLOCK;
        if (n * 8 > (p & ~(ps - 1)) + ps - p) n = ((p & ~(ps - 1)) + ps - p) / 8; /* a page at a time */
        if (!page_untouched(w, hp, p)) {
            if (ptmd_guarded_copy(w, p, buf, n * 8) != 0) return 0; /* unmapped meanwhile */
            for (k = 0; k < n; k++)
                if (add_ref(w, ci, buf[k]) != 0) return -1;
        }
        p += n * 8;
    }
    return 0;
}

int ptmd_walk_build_chunk_map(ptmd_walk *w)
{
    size_t h, nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    w->cmap_lo = UINT64_MAX;
    w->cmap_hi = 0;
    for (h = 0; h < nh; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        if (hp->start < w->cmap_lo) w->cmap_lo = hp->start & ~15ull;
        if (hp->end > w->cmap_hi) w->cmap_hi = hp->end;
    }
    w->cmap_span = w->cmap_hi > w->cmap_lo ? w->cmap_hi - w->cmap_lo : 0;
    return build_cmap(w);
}

int ptmd_walk_references(ptmd_walk *w, ptmd_err *err)
{
    size_t a, na = PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec), nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), h;
    uint64_t t0 = ptmd_now_ns();
    const int self = w->src.in_place;
    if (!w->references) return 0;
    if (ptmd_walk_build_chunk_map(w) != 0) return ptmd_fail_sys(err, errno, "chunk map", "mmap");
    for (a = 0; a < na; a++) {
        const ptmd_arena_rec *ar = PTMD_W_ARENA(w, a);
        int *mutex = (int *)(void *)(uintptr_t)(ar->address + w->L->ms_mutex);
        uint32_t k;
        ptmd_arena_lock(w, mutex);
        for (k = 0; k < ar->n_heaps; k++) {
            const ptmd_heap_rec *hp = PTMD_W_HEAP(w, ar->first_heap + k);
            uint64_t ci, end = hp->first_chunk + hp->n_chunks, ahead;
            /* only what is still there: the heap may have shrunk since the walk */
            if (!ptmd_maps_readable(&w->maps, hp->start, hp->end - hp->start)) {
                for (ci = hp->first_chunk; ci < end; ci++) {
                    const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
                    if (ptmd_rec_state(c) != PTMD_ST_IN_USE) continue;
                    if (!ptmd_maps_readable(&w->maps, c->addr, ptmd_rec_size(c))) break;
                    if (scan_direct(w, ci, hp) != 0) goto oom;
                }
                continue;
            }
            for (ci = hp->first_chunk, ahead = hp->start; ci < end; ci++) {
                const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, ci);
                if (ptmd_rec_state(c) != PTMD_ST_IN_USE) continue;
                if (self) ptmd_prefetch_ahead(&ahead, c->addr, hp->end);
                if (scan_direct(w, ci, hp) != 0) goto oom;
            }
        }
        ptmd_arena_unlock(w, mutex);
        continue;
    oom:
        ptmd_arena_unlock(w, mutex);
        return ptmd_fail_sys(err, errno, "reference table", "mmap");
    }
    for (h = 0; h < nh; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        uint64_t ci;
        if (hp->kind != PTMD_HEAP_MMAPPED_CHUNK) continue;
        for (ci = hp->first_chunk; ci < hp->first_chunk + hp->n_chunks; ci++)
            if (ptmd_rec_state(PTMD_W_CHUNK(w, ci)) == PTMD_ST_MMAPPED && scan_safe(w, ci, hp) != 0)
                return ptmd_fail_sys(err, errno, "reference table", "mmap");
    }
    w->refs_ns = ptmd_now_ns() - t0;
    return 0;
}
