/* Lookups over the walk's records (heaps sorted by address, chunks sorted within each heap) and the
 * page residency of every heap. */
#define _GNU_SOURCE
#include "capture/walk.h"

#include <errno.h>

int ptmd_walk_sort_heaps(ptmd_walk *w)
{
    size_t n = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), i, j;
    uint32_t *ord;
    w->heap_order.len = 0;
    if (!ptmd_buf_push(&w->heap_order, n * sizeof(uint32_t) + 1)) return -1;
    w->heap_order.len = n * sizeof(uint32_t);
    ord = (uint32_t *)(void *)w->heap_order.base;
    /* insertion sort: heaps are few and arrive nearly sorted per arena */
    for (i = 0; i < n; i++) {
        uint32_t v = (uint32_t)i;
        uint64_t s = PTMD_W_HEAP(w, v)->start;
        for (j = i; j > 0 && PTMD_W_HEAP(w, ord[j - 1])->start > s; j--) ord[j] = ord[j - 1];
        ord[j] = v;
    }
    return 0;
}

long ptmd_walk_find_chunk(ptmd_walk *w, uint64_t addr)
{
    const uint32_t *ord = (const uint32_t *)(const void *)w->heap_order.base;
    size_t lo = 0, hi = PTMD_BUF_COUNT(&w->heap_order, uint32_t);
    const ptmd_heap_rec *h = NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_heap_rec *m = PTMD_W_HEAP(w, ord[mid]);
        if (addr < m->start) hi = mid;
        else if (addr >= m->end) lo = mid + 1;
        else { h = m; break; }
    }
    if (!h || !h->n_chunks) return -1;
    lo = h->first_chunk;
    hi = h->first_chunk + h->n_chunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_chunk_rec *c = PTMD_W_CHUNK(w, mid);
        if (addr < c->addr) hi = mid;
        else if (addr > c->addr) lo = mid + 1;
        else return (long)mid;
    }
    return -1;
}

int ptmd_walk_residency(ptmd_walk *w, ptmd_err *err)
{
    size_t i, n = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), total = 0;
    uint64_t ps = w->page_size;
    for (i = 0; i < n; i++) {
        ptmd_heap_rec *h = PTMD_W_HEAP(w, i);
        h->page_base = h->start & ~(ps - 1);
        h->n_pages = h->end > h->page_base ? (h->end - h->page_base + ps - 1) / ps : 0;
        h->first_page = total;
        total += h->n_pages;
    }
    w->pages.len = 0;
    if (ptmd_buf_reserve(&w->pages, total + 1) != 0) return ptmd_fail_sys(err, errno, "page table", "mmap");
    w->pages.len = total;
    for (i = 0; i < n; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, i);
        if (h->n_pages) ptmd_pagemap_read(&w->pagemap, h->page_base, h->n_pages, w->pages.base + h->first_page);
    }
    return 0;
}
