/* The page residency of every heap and mmapped chunk the walk found, as the source gives it. */
#define _GNU_SOURCE
#include "capture/residency.h"

#include <errno.h>

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
        if (h->n_pages) ptmd_source_pages(&w->src, h->page_base, h->n_pages, w->pages.base + h->first_page);
    }
    return 0;
}
