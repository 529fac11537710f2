/* The walk's records indexed for lookups (format/index.h), and the page residency of every heap. */
#define _GNU_SOURCE
#include "capture/walk.h"
#include "format/index.h"

#include <errno.h>

int ptmd_walk_sort_heaps(ptmd_walk *w)
{
    size_t n = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    w->heap_order.len = 0;
    if (!ptmd_buf_push(&w->heap_order, n * sizeof(uint32_t) + 1)) return -1;
    w->heap_order.len = n * sizeof(uint32_t);
    ptmd_heap_order((const ptmd_heap_rec *)(const void *)w->heaps.base, n, (uint32_t *)(void *)w->heap_order.base);
    return 0;
}

long ptmd_walk_find_chunk(ptmd_walk *w, uint64_t addr)
{
    ptmd_chunk_index ix = { (const ptmd_heap_rec *)(const void *)w->heaps.base,
                            (const uint32_t *)(const void *)w->heap_order.base,
                            PTMD_BUF_COUNT(&w->heap_order, uint32_t),
                            (const ptmd_chunk_rec *)(const void *)w->chunks.base };
    return ptmd_chunk_find(&ix, addr, 0);
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
