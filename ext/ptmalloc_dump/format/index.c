/* The one sort and the one chunk index (index.h). */
#include "format/index.h"

#include <string.h>

#define PTMD_SORT_MAX_ELEM 256

static void swap(unsigned char *a, unsigned char *b, size_t size)
{
    unsigned char t[PTMD_SORT_MAX_ELEM];
    memcpy(t, a, size);
    memcpy(a, b, size);
    memcpy(b, t, size);
}

static void sift(unsigned char *base, size_t i, size_t n, size_t size, int (*cmp)(const void *, const void *, void *),
                 void *ctx)
{
    for (;;) {
        size_t big = i, l = 2 * i + 1, r = l + 1;
        if (l < n && cmp(base + l * size, base + big * size, ctx) > 0) big = l;
        if (r < n && cmp(base + r * size, base + big * size, ctx) > 0) big = r;
        if (big == i) return;
        swap(base + i * size, base + big * size, size);
        i = big;
    }
}

void ptmd_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *), void *ctx)
{
    unsigned char *b = base;
    size_t i;
    if (n < 2 || size > PTMD_SORT_MAX_ELEM) return;
    /* input already in order (the Ruby pass's lists, in page order) costs one comparison a record */
    for (i = 1; i < n && cmp(b + (i - 1) * size, b + i * size, ctx) <= 0; i++) {}
    if (i == n) return;
    for (i = n / 2; i-- > 0;) sift(b, i, n, size, cmp, ctx);
    for (i = n - 1; i > 0; i--) {
        swap(b, b + i * size, size);
        sift(b, 0, i, size, cmp, ctx);
    }
}

static int by_start(const void *a, const void *b, void *ctx)
{
    const ptmd_heap_rec *heaps = ctx;
    uint64_t x = heaps[*(const uint32_t *)a].start, y = heaps[*(const uint32_t *)b].start;
    return x < y ? -1 : x > y;
}

void ptmd_heap_order(const ptmd_heap_rec *heaps, size_t n, uint32_t *order)
{
    size_t i;
    for (i = 0; i < n; i++) order[i] = (uint32_t)i;
    ptmd_sort(order, n, sizeof(uint32_t), by_start, (void *)heaps);
}

long ptmd_chunk_find(const ptmd_chunk_index *ix, uint64_t addr, int containing)
{
    size_t lo = 0, hi = ix->n_heaps;
    const ptmd_heap_rec *h = NULL;
    while (lo < hi) { /* the heap holding addr */
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_heap_rec *m = &ix->heaps[ix->order[mid]];
        if (addr < m->start) hi = mid;
        else if (addr >= m->end) lo = mid + 1;
        else {
            h = m;
            break;
        }
    }
    if (!h || !h->n_chunks) return -1;
    lo = h->first_chunk;
    hi = h->first_chunk + h->n_chunks;
    while (lo < hi) { /* the first chunk starting after addr */
        size_t mid = lo + (hi - lo) / 2;
        if (ix->chunks[mid].addr <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo == h->first_chunk) return -1;
    lo--;
    if (containing ? addr >= ix->chunks[lo].addr + ptmd_rec_size(&ix->chunks[lo]) : ix->chunks[lo].addr != addr)
        return -1;
    return (long)lo;
}
