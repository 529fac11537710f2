/* The trim check: what malloc_trim(0) really gives back, measured after the walk. */
#define _GNU_SOURCE
#include "capture/dump_trim.h"

#include <errno.h>
#include <malloc.h>

int ptmd_dump_trim_check(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_walk *w = &d->w;
    size_t h, nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), na = PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec);
    uint8_t after[4096];
    if (!ptmd_buf_push(&d->trim, na * sizeof(uint64_t) + 1)) return ptmd_fail_sys(err, errno, "trim check", "mmap");
    d->trim.len = na * sizeof(uint64_t);
    malloc_trim(0);
    for (h = 0; h < nh; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        uint64_t p = 0;
        if (hp->arena == PTMD_NO_ARENA) continue;
        while (p < hp->n_pages) {
            uint64_t n = hp->n_pages - p < sizeof(after) ? hp->n_pages - p : sizeof(after), k;
            ptmd_source_pages(&w->src, hp->page_base + p * w->page_size, n, after);
            for (k = 0; k < n; k++)
                if ((w->pages.base[hp->first_page + p + k] & PTMD_PAGE_PRESENT) &&
                    !(after[k] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED)))
                    *PTMD_BUF_AT(&d->trim, uint64_t, hp->arena) += w->page_size;
            p += n;
        }
    }
    return 0;
}
