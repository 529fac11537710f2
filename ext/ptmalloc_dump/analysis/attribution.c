/* Attribution: objects -> chunks by slot words, then along references (breadth first). */
#include "analysis/attribution.h"

#include <stdlib.h>
#include <string.h>

/* ruby_value_type values (include/ruby/internal/value_type.h); stable since Ruby 2.x. */
#define RT_OBJECT 0x01
#define RT_STRING 0x05
#define RT_ARRAY 0x07
#define RT_HASH 0x08
#define RT_DATA 0x0c
#define RT_IMEMO 0x1a

int ptmd_owner_category(int t)
{
    switch (t) {
    case RT_STRING: return PTMD_OWN_STRING;
    case RT_ARRAY: return PTMD_OWN_ARRAY;
    case RT_HASH: return PTMD_OWN_HASH;
    case RT_OBJECT: return PTMD_OWN_OBJECT;
    case RT_DATA: return PTMD_OWN_DATA;
    case RT_IMEMO: return PTMD_OWN_IMEMO;
    default: return PTMD_OWN_OTHER_RUBY;
    }
}

typedef struct {
    const ptmd_view *v;
    uint32_t *order;          /* heap indices sorted by start */
    size_t n;
    uint64_t lo, hi;
} heap_index;

static const ptmd_view *sort_view;

static int by_start(const void *a, const void *b)
{
    uint64_t x = sort_view->heaps[*(const uint32_t *)a].start, y = sort_view->heaps[*(const uint32_t *)b].start;
    return x < y ? -1 : x > y;
}

static int index_build(heap_index *ix, const ptmd_view *v)
{
    size_t i;
    ix->v = v;
    ix->n = v->n_heaps;
    ix->order = malloc((ix->n ? ix->n : 1) * sizeof(uint32_t));
    if (!ix->order) return -1;
    ix->lo = UINT64_MAX;
    ix->hi = 0;
    for (i = 0; i < ix->n; i++) {
        ix->order[i] = (uint32_t)i;
        if (v->heaps[i].start < ix->lo) ix->lo = v->heaps[i].start;
        if (v->heaps[i].end > ix->hi) ix->hi = v->heaps[i].end;
    }
    sort_view = v;
    qsort(ix->order, ix->n, sizeof(uint32_t), by_start);
    return 0;
}

/* Index of the chunk containing addr (exact start when `exact`), or -1. */
static long index_find(const heap_index *ix, uint64_t addr, int exact)
{
    const ptmd_view *v = ix->v;
    size_t lo = 0, hi = ix->n;
    const ptmd_heap_rec *h = NULL;
    if (addr < ix->lo || addr >= ix->hi) return -1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_heap_rec *m = &v->heaps[ix->order[mid]];
        if (addr < m->start) hi = mid;
        else if (addr >= m->end) lo = mid + 1;
        else { h = m; break; }
    }
    if (!h || !h->n_chunks) return -1;
    lo = h->first_chunk;
    hi = h->first_chunk + h->n_chunks;
    while (lo < hi) {                  /* first chunk starting after addr */
        size_t mid = lo + (hi - lo) / 2;
        if (v->chunks[mid].addr <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo == h->first_chunk) return -1;
    lo--;
    if (exact ? v->chunks[lo].addr != addr : addr >= v->chunks[lo].addr + ptmd_rec_size(&v->chunks[lo])) return -1;
    return (long)lo;
}

static int in_use(const ptmd_chunk_rec *c)
{
    int st = ptmd_rec_state(c);
    return st == PTMD_ST_IN_USE || st == PTMD_ST_MMAPPED;
}

int ptmd_attribute(const ptmd_view *v, ptmd_attribution *a)
{
    heap_index ix;
    size_t i, w = 0;
    uint32_t *queue = NULL, *offs = NULL, *targets = NULL;
    size_t qh = 0, qt = 0;

    memset(a->owner, 0, v->n_chunks * sizeof(uint32_t));
    memset(a->direct, 0, v->n_chunks);
    a->ambiguous = a->direct_count = a->via_refs = 0;
    if (index_build(&ix, v) != 0) return -1;

    /* Ruby's own object pages, where they are malloc chunks (Ruby 2.x and 3.0) */
    for (i = 0; i < v->n_ruby_pages; i++) {
        long ci = index_find(&ix, v->ruby_pages[i].start, 0);
        if (ci >= 0 && in_use(&v->chunks[ci])) a->owner[ci] = UINT32_MAX;
    }
    /* slot words */
    for (i = 0; i < v->n_ruby_objects; i++) {
        const ptmd_ruby_object *o = &v->ruby_objects[i];
        uint16_t k;
        for (k = 0; k < o->n_words && w < v->n_ruby_words; k++, w++) {
            long ci = index_find(&ix, v->ruby_words[w] - 16, 1);
            if (ci < 0 || !in_use(&v->chunks[ci])) continue;
            if (a->owner[ci] == 0) {
                a->owner[ci] = (uint32_t)(i + 1);
                a->direct[ci] = 1;
                a->direct_count++;
            } else if (a->owner[ci] != (uint32_t)(i + 1) && a->owner[ci] != UINT32_MAX) {
                if (a->direct[ci] == 1) a->ambiguous++;
                a->direct[ci] = 2;       /* counted once */
            }
        }
    }
    /* references, breadth first from every owned chunk */
    if (v->n_refs) {
        offs = calloc(v->n_chunks + 1, sizeof(uint32_t));
        targets = malloc(v->n_refs * sizeof(uint32_t));
        queue = malloc((v->n_chunks ? v->n_chunks : 1) * sizeof(uint32_t));
        if (!offs || !targets || !queue) goto oom;
        for (i = 0; i < v->n_refs; i++) offs[v->refs[i].from + 1]++;
        for (i = 0; i < v->n_chunks; i++) offs[i + 1] += offs[i];
        {
            uint32_t *fill = calloc(v->n_chunks ? v->n_chunks : 1, sizeof(uint32_t));
            if (!fill) goto oom;
            for (i = 0; i < v->n_refs; i++) targets[offs[v->refs[i].from] + fill[v->refs[i].from]++] = v->refs[i].to;
            free(fill);
        }
        /* A string's buffer holds bytes and an array's or object's holds VALUEs (object slots, not
         * malloc memory): a word in them that looks like a chunk address is stale data, so ownership
         * spreads only out of the other chunks (tables, typed data structs, iseqs, ...). */
        for (i = 0; i < v->n_chunks; i++) {
            uint32_t o = a->owner[i];
            int t;
            if (!o || o == UINT32_MAX) continue;
            t = v->ruby_objects[o - 1].type;
            if (a->direct[i] && (t == RT_STRING || t == RT_ARRAY || t == RT_OBJECT)) continue;
            queue[qt++] = (uint32_t)i;
        }
        while (qh < qt) {
            uint32_t from = queue[qh++], e;
            for (e = offs[from]; e < offs[from + 1]; e++) {
                uint32_t to = targets[e];
                if (a->owner[to] || !in_use(&v->chunks[to])) continue;
                a->owner[to] = a->owner[from];
                a->via_refs++;
                queue[qt++] = to;
            }
        }
    }
    for (i = 0; i < v->n_chunks; i++) {
        const ptmd_chunk_rec *c = &v->chunks[i];
        uint32_t o = a->owner[i];
        if (!in_use(c)) a->category[i] = PTMD_OWN_NONE;
        else if (o == UINT32_MAX) a->category[i] = PTMD_OWN_RUBY_PAGE;
        else if (o) a->category[i] = (uint8_t)ptmd_owner_category(v->ruby_objects[o - 1].type);
        else a->category[i] = PTMD_OWN_NATIVE;
    }
    free(queue);
    free(offs);
    free(targets);
    free(ix.order);
    return 0;
oom:
    free(queue);
    free(offs);
    free(targets);
    free(ix.order);
    return -1;
}
