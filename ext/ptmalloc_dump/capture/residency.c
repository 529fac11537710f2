/* The page residency of every heap and mmapped chunk the walk found, as the source gives it; in a fork
 * snapshot with the exclusivity its parent read before the fork. */
#define _GNU_SOURCE
#include "capture/residency.h"

#include <errno.h>
#include <string.h>

/* Pages read before a fork at most: 64 GiB of anonymous mappings, 16 MiB of flags. Beyond it the
 * child says that sharing is unknown. */
#define PTMD_SHARING_MAX_PAGES (1ull << 24)

int ptmd_residency_before_fork(ptmd_walk *w, ptmd_err *err)
{
    ptmd_maps maps;
    ptmd_err ignored;
    uint64_t ps, total = 0;
    size_t i;
    w->sharing.len = 0;
    w->sharing_pages.len = 0;
    w->sharing_taken = 0;
    if (ptmd_pagemap_open(&w->src.pagemap, err) != 0) return -1;
    /* mincore tells no sharing: the child says that it is unknown */
    if (w->src.pagemap.fd < 0) return 0;
    ps = w->src.pagemap.page_size;
    memset(&maps, 0, sizeof(maps));
    memset(&ignored, 0, sizeof(ignored));
    if (ptmd_maps_load(&maps, &ignored) != 0) {
        ptmd_maps_release(&maps);
        return 0;
    }
    /* every private writable anonymous mapping: the heaps, the mmapped chunks and the rest, which the
     * walk in the child tells apart */
    for (i = 0; i < maps.count; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&maps.maps, ptmd_map, i);
        uint64_t n = (m->end - m->start) / ps;
        if ((m->kind != PTMD_MAPKIND_ANON && m->kind != PTMD_MAPKIND_BRK) ||
            (m->prot & (PTMD_MAP_W | PTMD_MAP_PRIVATE)) != (PTMD_MAP_W | PTMD_MAP_PRIVATE) || !n)
            continue;
        if (total + n > PTMD_SHARING_MAX_PAGES) break;
        total += n;
    }
    if (ptmd_buf_reserve(&w->sharing, (i ? i : 1) * sizeof(ptmd_sharing_range)) != 0 ||
        ptmd_buf_reserve(&w->sharing_pages, total ? total : 1) != 0) {
        ptmd_maps_release(&maps);
        return ptmd_fail_sys(err, errno, "sharing table", "mmap");
    }
    for (i = 0; i < maps.count && w->sharing_pages.len < total; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&maps.maps, ptmd_map, i);
        uint64_t n = (m->end - m->start) / ps;
        ptmd_sharing_range *r;
        if ((m->kind != PTMD_MAPKIND_ANON && m->kind != PTMD_MAPKIND_BRK) ||
            (m->prot & (PTMD_MAP_W | PTMD_MAP_PRIVATE)) != (PTMD_MAP_W | PTMD_MAP_PRIVATE) || !n)
            continue;
        if (n > total - w->sharing_pages.len) break;
        if (ptmd_pagemap_read(&w->src.pagemap, (uintptr_t)m->start, (size_t)n,
                              w->sharing_pages.base + w->sharing_pages.len) != 0)
            continue; /* unmapped since the maps were read: unknown */
        r = (ptmd_sharing_range *)ptmd_buf_push(&w->sharing, sizeof(*r));
        r->start = m->start;
        r->end = m->start + n * ps;
        r->first = w->sharing_pages.len;
        w->sharing_pages.len += n;
    }
    ptmd_maps_release(&maps);
    w->sharing_taken = 1;
    return 0;
}

/* The parent's flags of the page at addr, or 0 when its reading did not cover it. */
static uint8_t parent_flags(const ptmd_walk *p, uint64_t addr)
{
    const ptmd_sharing_range *r = (const ptmd_sharing_range *)(const void *)p->sharing.base;
    size_t lo = 0, hi = PTMD_BUF_COUNT(&p->sharing, ptmd_sharing_range);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < r[mid].start) hi = mid;
        else if (addr >= r[mid].end) lo = mid + 1;
        else {
            uint64_t k = r[mid].first + (addr - r[mid].start) / p->src.pagemap.page_size;
            return k < p->sharing_pages.len ? p->sharing_pages.base[k] : 0;
        }
    }
    return 0;
}

/* In a snapshot child every page it holds is mapped by its parent too, so its own pagemap calls none
 * exclusive: a present page's exclusivity is the parent's from before the fork, and unknown where
 * that reading did not find the page present. Presence does not change across the fork. */
static void take_parent_sharing(const ptmd_walk *p, uint64_t page_base, uint64_t n, uint64_t ps, uint8_t *pages)
{
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint8_t f = pages[i], pf;
        if (!(f & PTMD_PAGE_PRESENT)) continue;
        pf = parent_flags(p, page_base + i * ps);
        f &= (uint8_t)~PTMD_PAGE_EXCLUSIVE;
        if (pf & PTMD_PAGE_PRESENT) f |= pf & PTMD_PAGE_EXCLUSIVE;
        else f |= PTMD_PAGE_SHARING_UNKNOWN;
        pages[i] = f;
    }
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
        if (!h->n_pages) continue;
        ptmd_source_pages(&w->src, h->page_base, h->n_pages, w->pages.base + h->first_page);
        if (w->sharing_from)
            take_parent_sharing(w->sharing_from, h->page_base, h->n_pages, ps, w->pages.base + h->first_page);
    }
    return 0;
}
