/* The chunks of one heap, header by header: each one's state as its bits and the fastbins tell it,
 * the free ones noted for the bins (bins.c), tcache struct candidates for tcache.c. */
#define _GNU_SOURCE
#include "capture/chunks.h"
#include "capture/arena.h"
#include "capture/bins.h"

#include <errno.h>

/* First chunk of a heap: after heap_info (and the arena itself in an arena's first heap). */
static uint64_t first_chunk_of(const ptmd_walk *w, const ptmd_arena_ctx *a, const ptmd_heap_rec *h)
{
    uint64_t p;
    if (a->main) {
        /* a heap recorded from the 16-byte boundary below an unaligned sbrk_base (ptmd_sbrk_pad) */
        p = h->start;
        if (w->have_mp) p += ptmd_sbrk_pad(p, w->sbrk_base);
    } else if (h->start + w->L->hi_size_total == a->av) p = a->av + w->L->ms_size;
    else p = h->start + w->L->hi_size_total;
    /* chunk2mem must be MALLOC_ALIGNMENT aligned */
    return p + ((PTMD_MALLOC_ALIGNMENT - ((p + PTMD_CHUNK_HDR_SZ) & PTMD_MALLOC_ALIGN_MASK)) & PTMD_MALLOC_ALIGN_MASK);
}

static inline int push_chunk(ptmd_walk *w, uint64_t addr, uint64_t size, int state, uint64_t flags)
{
    ptmd_chunk_rec *r;
    if (PTMD_UNLIKELY(w->chunks.len + sizeof(*r) > w->chunks.cap) && ptmd_buf_reserve(&w->chunks, 1u << 20) != 0)
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
        errno = EOVERFLOW; /* a note names its record in 32 bits, as a reference does */
        return -1;
    }
    if (PTMD_UNLIKELY(w->notes.len + sizeof(*e) > w->notes.cap) && ptmd_buf_reserve(&w->notes, 1u << 20) != 0)
        return -1;
    e = (ptmd_free_note *)(void *)(w->notes.base + w->notes.len);
    e->addr = addr;
    e->fd = ptmd_mapped_word_as(w, self, addr + PTMD_MCHUNK_FD);
    e->bk = ptmd_mapped_word_as(w, self, addr + PTMD_MCHUNK_BK);
    e->rec = (uint32_t)PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec);
    e->large = 0;
    w->notes.len += sizeof(*e);
    if (size >= PTMD_MIN_LARGE_SIZE) {
        ptmd_large_note *l = ptmd_buf_push(&w->large_notes, sizeof(*l));
        if (!l) return -1;
        l->fd_nextsize = ptmd_mapped_word_as(w, self, addr + PTMD_MCHUNK_FD_NEXTSIZE);
        l->bk_nextsize = ptmd_mapped_word_as(w, self, addr + PTMD_MCHUNK_BK_NEXTSIZE);
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

int ptmd_walk_heap_chunks(ptmd_walk *w, ptmd_arena_ctx *a, uint32_t heap_index, ptmd_err *err)
{
    const ptmd_layout *L = w->L;
    ptmd_heap_rec *h = PTMD_W_HEAP(w, heap_index);
    const uint64_t end = h->end, start = h->start;
    const int has_top = a->top >= start && a->top < end;
    const uint64_t tcache_csize =
        (L->tcache_struct_size + PTMD_SIZE_SZ + PTMD_MALLOC_ALIGN_MASK) & ~(uint64_t)PTMD_MALLOC_ALIGN_MASK;
    const uint64_t last_rem = ptmd_arena_field(w, a->av, L->ms_last_remainder);
    const int self = w->src.in_place;
    const uint64_t first = first_chunk_of(w, a, h);
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
        size = ptmd_mapped_word_as(w, self, p + PTMD_MCHUNK_SIZE);
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
        if (next + PTMD_CHUNK_HDR_SZ <= end &&
            !(ptmd_mapped_word_as(w, self, next + PTMD_MCHUNK_SIZE) & PTMD_PREV_INUSE)) {
            /* a bin's, to be settled by ptmd_settle_lists: the size's bin until then */
            flags |= PTMD_CF_WORD(PTMD_CF_FREE_BIT);
            state = size < PTMD_MIN_LARGE_SIZE ? PTMD_ST_SMALLBIN : PTMD_ST_LARGEBIN;
            if (p == last_rem) flags |= PTMD_CF_WORD(PTMD_CF_LAST_REMAINDER);
            if (push_note(w, self, p, size) != 0) goto oom;
        } else {
            state = PTMD_ST_IN_USE;
            if (a->fast_entries && size <= PTMD_MAX_FAST_CHUNK) {
                ptmd_list_slot *s = ptmd_lists_find(w, p); /* the fastbins' entries alone, so far */
                if (s) {
                    s->seen = 1;
                    state = PTMD_ST_FASTBIN;
                }
            } else if (size == PTMD_MINSIZE && !has_top && next + PTMD_CHUNK_HDR_SZ == end &&
                       ptmd_chunksize(ptmd_mchunk_size(w, next)) == 0) {
                state = PTMD_ST_META; /* the old top too small to free, kept as a fencepost */
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
