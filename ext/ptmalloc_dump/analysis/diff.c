/* The diff: one merge over both dumps' chunks in address order, and a page-by-page comparison. */
#include "analysis/diff.h"

#include <string.h>

const char *const ptmd_page_change_names[PTMD_PCHG_COUNT] = { PTMD_PAGE_CHANGES(PTMD_ENUM_NAME) };

long ptmd_first_difference(const ptmd_view *a, const ptmd_view *b)
{
    size_t i, n = a->n_chunks < b->n_chunks ? a->n_chunks : b->n_chunks;
    for (i = 0; i < n; i++) {
        const ptmd_chunk_rec *x = &a->chunks[i], *y = &b->chunks[i];
        if (x->addr != y->addr || ptmd_rec_size(x) != ptmd_rec_size(y) || ptmd_rec_state(x) != ptmd_rec_state(y))
            return (long)i;
    }
    return a->n_chunks == b->n_chunks ? -1 : (long)n;
}

typedef struct {
    const ptmd_view *v;
    const uint32_t *order;
    size_t h;   /* position in order */
    uint64_t c; /* chunk index, or the end of the current heap */
} cursor;

static const ptmd_chunk_rec *cur(cursor *k)
{
    while (k->h < k->v->n_heaps) {
        const ptmd_heap_rec *hp = &k->v->heaps[k->order[k->h]];
        if (k->c < hp->first_chunk) k->c = hp->first_chunk;
        if (k->c < hp->first_chunk + hp->n_chunks) return &k->v->chunks[k->c];
        k->h++;
        k->c = 0;
    }
    return NULL;
}

/* Finds the page at addr in v: its index into PAGES, or -1. */
static long page_at(const ptmd_view *v, const uint32_t *order, uint64_t addr)
{
    size_t lo = 0, hi = v->n_heaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_heap_rec *hp = &v->heaps[order[mid]];
        if (addr < hp->page_base) hi = mid;
        else if (addr >= hp->page_base + hp->n_pages * v->meta->page_size) lo = mid + 1;
        else return (long)(hp->first_page + (addr - hp->page_base) / v->meta->page_size);
    }
    return -1;
}

/* More than half of the page: free bytes (any bin, cache or top), or in-use bytes. */
static int mostly_free(const ptmd_page_usage *u, uint64_t page_size)
{
    return 2 * ((uint64_t)u->free + u->top) > page_size;
}

static int mostly_live(const ptmd_page_usage *u, uint64_t page_size)
{
    return 2 * (uint64_t)u->in_use > page_size;
}

uint8_t ptmd_page_change(const ptmd_page_usage *ua, uint8_t fa, const ptmd_page_usage *ub, uint8_t fb,
                         uint64_t page_size)
{
    int pres_a = ua && (fa & PTMD_PAGE_PRESENT), pres_b = (fb & PTMD_PAGE_PRESENT) != 0;
    if (pres_a && !pres_b && !(fb & PTMD_PAGE_SWAPPED)) return PTMD_PCHG_RELEASED;
    if (pres_b && mostly_live(ub, page_size) && !(pres_a && mostly_live(ua, page_size))) return PTMD_PCHG_NEW_IN_USE;
    if (pres_b && mostly_free(ub, page_size) && !(pres_a && mostly_free(ua, page_size)))
        return PTMD_PCHG_NEW_FREE_RESIDENT;
    return ua ? PTMD_PCHG_UNCHANGED : PTMD_PCHG_NEW_PAGE;
}

void ptmd_diff(const ptmd_view *a, const ptmd_page_usage *ua, const ptmd_view *b, const ptmd_page_usage *ub,
               ptmd_diff_totals *t, uint8_t *change)
{
    const uint32_t *oa = a->heap_order,
                   *ob = b->heap_order; /* heaps never overlap: in this order their chunks are sorted */
    cursor ka, kb;
    const ptmd_chunk_rec *x, *y;
    size_t h;
    memset(t, 0, sizeof(*t));
    ka.v = a;
    ka.order = oa;
    ka.h = 0;
    ka.c = 0;
    kb.v = b;
    kb.order = ob;
    kb.h = 0;
    kb.c = 0;
    x = cur(&ka);
    y = cur(&kb);
    while (x || y) {
        if (x && y && x->addr == y->addr) {
            if (x->word == y->word ||
                (ptmd_rec_size(x) == ptmd_rec_size(y) && ptmd_rec_state(x) == ptmd_rec_state(y))) {
                t->same_count++;
                t->same_bytes += ptmd_rec_size(y);
            } else {
                t->gone_count++;
                t->gone_bytes += ptmd_rec_size(x);
                t->new_count++;
                t->new_bytes += ptmd_rec_size(y);
            }
            ka.c++;
            kb.c++;
        } else if (y && (!x || y->addr < x->addr)) {
            t->new_count++;
            t->new_bytes += ptmd_rec_size(y);
            kb.c++;
        } else {
            t->gone_count++;
            t->gone_bytes += ptmd_rec_size(x);
            ka.c++;
        }
        x = cur(&ka);
        y = cur(&kb);
    }
    for (h = 0; h < b->n_heaps; h++) {
        const ptmd_heap_rec *hp = &b->heaps[h];
        uint64_t p;
        for (p = 0; p < hp->n_pages; p++) {
            uint64_t addr = hp->page_base + p * b->meta->page_size, bi = hp->first_page + p;
            long ai = page_at(a, oa, addr);
            uint8_t fb = b->pages[bi], fa = ai >= 0 ? a->pages[ai] : 0;
            uint8_t c = ptmd_page_change(ai >= 0 ? &ua[ai] : NULL, fa, &ub[bi], fb, b->meta->page_size);
            change[bi] = c;
            t->pages[c]++;
            if ((fb & PTMD_PAGE_PRESENT) && !(fa & PTMD_PAGE_PRESENT)) t->became_resident++;
        }
    }
}
