/* The regions of a non-contiguous main arena. When sbrk fails (a mapping right above the break,
 * RLIMIT_DATA), sysmalloc takes the main arena's new space from mmap instead (sysmalloc_mmap_fallback)
 * and sets NONCONTIGUOUS_BIT; from then on each new region, even one the kernel places right after
 * the last, gets a new top, and the old top is closed with two fenceposts, CHUNK_HDR_SZ | PREV_INUSE
 * each, the second ending exactly at the old region's page-aligned end (what stays of the old top, if
 * MINSIZE or more, is freed with _int_free). Only a new sbrk that returns the old top's end extends
 * it. Nothing links the regions, and the kernel merges neighbouring mappings, so they are found among
 * the anonymous read-write mappings: a region is a chain of main-arena chunks (no NON_MAIN_ARENA or
 * IS_MMAPPED bit, sizes in bounds) from a page start whose first chunk has prev_size 0 and
 * PREV_INUSE, to top or to a run of fenceposts that ends on a page boundary. A candidate that is not
 * one may be unmapped while it is read (an mmapped chunk freed by another thread): chains are read
 * fault-free, one 4 KiB window at a time, and only pages that are resident (a chunk header's page
 * always is) are looked at. glibc never unmaps these regions: those an earlier search found (the
 * check before glibc's counters are taken, an earlier dump) are read directly. Nothing here calls
 * malloc.
 * glibc: malloc/malloc.c, sysmalloc and sysmalloc_mmap_fallback (2.27 .. 2.43). */
#define _GNU_SOURCE
#include "capture/regions.h"
#include "capture/arena.h"
#include "format/index.h"

#include <errno.h>
#include <string.h>

#define WINDOW 4096u
#define SCAN_PAGES 512u

typedef struct {
    ptmd_walk *w;
    uint64_t base;                   /* address of the window in buf, 1 when none */
    uint64_t brk_start, brk_end;     /* the region found from sbrk_base, scanned no more */
    uint64_t known_start, known_end; /* the known region last read directly */
    unsigned char buf[WINDOW];
} cursor;

/* uint64 {start, end} of the regions the last search found, in address order, kept for the life of
 * the process (one search at a time: dump_busy). */
static ptmd_buf known;

/* The known region that holds p, or NULL. */
static const uint64_t *known_at(uint64_t p)
{
    const uint64_t *r = (const uint64_t *)(const void *)known.base;
    size_t lo = 0, hi = known.len / (2 * sizeof(uint64_t));
    while (lo < hi) { /* the first region ending after p */
        size_t mid = lo + (hi - lo) / 2;
        if (r[2 * mid + 1] <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo < known.len / (2 * sizeof(uint64_t)) && p >= r[2 * lo] ? r + 2 * lo : NULL;
}

/* Whether [p, p + 16) lies in a region an earlier search found (remembered in c). */
static int known_region(cursor *c, uint64_t p)
{
    const uint64_t *r = known_at(p);
    if (!r || r[1] - p < PTMD_CHUNK_HDR_SZ) return 0;
    c->known_start = r[0];
    c->known_end = r[1];
    return 1;
}

/* Where the scan goes on when p lies inside a known region past its start (no region starts
 * there: regions keep their extent), else p. */
static uint64_t past_known(uint64_t p, uint64_t page_mask)
{
    const uint64_t *r = known_at(p);
    return r && p != r[0] ? (r[1] + page_mask) & ~page_mask : p;
}

static int read_header(cursor *c, uint64_t p, uint64_t hdr[2])
{
    uint64_t base = p & ~(uint64_t)(WINDOW - 1);
    if ((p >= c->known_start && p < c->known_end && c->known_end - p >= PTMD_CHUNK_HDR_SZ) || known_region(c, p)) {
        return ptmd_mapped_copy(c->w, p, hdr, 16);
    }
    if (base != c->base) {
        c->base = 1;
        if (ptmd_guarded_copy(c->w, base, c->buf, WINDOW) != 0) return -1;
        c->base = base;
    }
    memcpy(hdr, c->buf + (p - base), 16);
    return 0;
}

static int region_mapping(const ptmd_map *m)
{
    return (m->kind == PTMD_MAPKIND_ANON || m->kind == PTMD_MAPKIND_BRK) &&
           (m->prot & (PTMD_MAP_R | PTMD_MAP_W | PTMD_MAP_PRIVATE)) == (PTMD_MAP_R | PTMD_MAP_W | PTMD_MAP_PRIVATE);
}

/* End of the run of such mappings, each starting where the last ends, from map i on: a region is
 * one mapping, which the kernel may show in parts (a name set on part of it, as glibc 2.43's
 * __set_vma_name does, or madvise flags). */
static uint64_t extent_end(const ptmd_maps *maps, size_t i)
{
    const ptmd_map *m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
    uint64_t end = m->end;
    for (i++; i < maps->count; i++) {
        m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
        if (m->start != end || !region_mapping(m)) break;
        end = m->end;
    }
    return end;
}

/* The end of the region whose first chunk is at `first`, or 0 when no main-arena region starts there:
 * the chain must reach top (whose end then ends the region) or at least two fenceposts followed by a
 * page boundary, within `limit`. Bounded by the number of chunks [first, limit) can hold. */
static uint64_t region_end(cursor *c, const ptmd_arena_ctx *a, uint64_t first, uint64_t limit)
{
    const uint64_t page_mask = c->w->page_size - 1;
    uint64_t p = first, run = 0, steps, hdr[2];
    if (read_header(c, first, hdr) != 0 || hdr[0] != 0 || (hdr[1] & PTMD_SIZE_BITS) != PTMD_PREV_INUSE) return 0;
    for (steps = 0; p < limit && steps <= (limit - first) / PTMD_CHUNK_HDR_SZ; steps++) {
        uint64_t size;
        if (p == a->top && !run) return a->top_end <= limit && a->top_size >= PTMD_MINSIZE ? a->top_end : 0;
        if (limit - p < PTMD_CHUNK_HDR_SZ || read_header(c, p, hdr) != 0) return 0;
        if (hdr[1] & (PTMD_IS_MMAPPED | PTMD_NON_MAIN_ARENA)) return 0;
        size = ptmd_chunksize(hdr[1]);
        if (size == PTMD_CHUNK_HDR_SZ) {
            p += PTMD_CHUNK_HDR_SZ;
            if (++run >= 2 && !(p & page_mask)) return p;
            continue;
        }
        if (run || size < PTMD_MINSIZE || (size & PTMD_MALLOC_ALIGN_MASK) || size > limit - p) return 0;
        p += size;
    }
    return 0;
}

/* The walk's own buffers hold no chunk: their pages are not candidates. */
static int own_memory(const ptmd_walk *w, uint64_t p)
{
    const ptmd_buf *own[] = { PTMD_WALK_BUFFERS(w), &w->maps.text, &w->maps.maps };
    size_t i;
    if (!w->src.in_place) return 0; /* another process's memory: none of it is ours */
    for (i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        uint64_t b = (uint64_t)(uintptr_t)own[i]->base;
        if (b && p >= b && p < b + own[i]->cap) return 1;
    }
    return w->src.pagemap.entries && p >= (uint64_t)(uintptr_t)w->src.pagemap.entries &&
           p < (uint64_t)(uintptr_t)w->src.pagemap.entries + w->src.pagemap.cap * 8;
}

static int add_region(ptmd_walk *w, ptmd_arena_ctx *a, const ptmd_map *m, uint64_t start, uint64_t end)
{
    ptmd_heap_rec *h;
    if (a->n_heaps >= PTMD_MAX_HEAPS_PER_ARENA) return 0;
    h = ptmd_buf_push(&w->heaps, sizeof(*h));
    if (!h) return -1;
    h->start = start;
    h->end = h->reserved_end = end;
    h->arena = a->index;
    h->kind = m && m->kind == PTMD_MAPKIND_BRK ? PTMD_HEAP_SBRK : PTMD_HEAP_MAIN_MMAP;
    a->n_heaps++;
    return 0;
}

/* One mapping run's resident page starts, in address order; returns where the scan got to. */
static int scan_extent(ptmd_walk *w, ptmd_arena_ctx *a, cursor *c, size_t mi, uint64_t from, uint64_t *reached)
{
    const ptmd_map *m = PTMD_BUF_AT(&w->maps.maps, ptmd_map, mi);
    const uint64_t limit = extent_end(&w->maps, mi);
    const uint64_t page_mask = w->page_size - 1;
    uint64_t pos = from;
    while ((pos = past_known(pos, page_mask)) < m->end) {
        uint8_t flags[SCAN_PAGES];
        uintptr_t addrs[SCAN_PAGES];
        uint64_t hdrs[SCAN_PAGES][2], next;
        unsigned char ok[SCAN_PAGES];
        size_t npages = (m->end - pos) / w->page_size, i, n = 0;
        if (npages > SCAN_PAGES) npages = SCAN_PAGES;
        if (npages == 0) break;
        next = pos + npages * w->page_size;
        ptmd_source_pages(&w->src, pos, npages, flags);
        for (i = 0; i < npages; i++) {
            uint64_t p = pos + i * w->page_size;
            if ((flags[i] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED)) && !own_memory(w, p) &&
                !(p >= c->brk_start && p < c->brk_end) && past_known(p, page_mask) == p)
                addrs[n++] = p;
        }
        ptmd_guarded_copy_many(w, addrs, n, 16, hdrs, ok);
        for (i = 0; i < n; i++) {
            uint64_t end;
            if (!ok[i] || addrs[i] < pos || hdrs[i][0] != 0 || (hdrs[i][1] & PTMD_SIZE_BITS) != PTMD_PREV_INUSE ||
                ptmd_chunksize(hdrs[i][1]) < PTMD_MINSIZE)
                continue;
            if ((end = region_end(c, a, addrs[i], limit)) == 0) continue;
            if (add_region(w, a, m, addrs[i], end) != 0) return -1;
            pos = end; /* the rest of this batch lies inside the region or after it */
            if (end > next) next = end;
        }
        pos = next;
    }
    *reached = pos;
    return 0;
}

static int by_start(const void *x, const void *y, void *ctx)
{
    uint64_t s = ((const ptmd_heap_rec *)x)->start, t = ((const ptmd_heap_rec *)y)->start;
    PTMD_UNUSED(ctx);
    return s < t ? -1 : s > t;
}

int ptmd_main_regions(ptmd_walk *w, ptmd_arena_ctx *a, ptmd_err *err)
{
    cursor c;
    uint64_t reached = 0;
    size_t i;
    /* the regions found are this process's: another's search starts afresh and is not kept */
    if (!w->src.in_place) known.len = 0;
    c.w = w;
    c.base = 1;
    c.brk_start = c.brk_end = c.known_start = c.known_end = 0;
    /* the brk region first, where sbrk_base's first chunk is aligned as sysmalloc aligned it */
    if (w->have_mp && w->sbrk_base) {
        const ptmd_map *m = ptmd_maps_find(&w->maps, w->sbrk_base);
        uint64_t first =
            w->sbrk_base + ((PTMD_MALLOC_ALIGNMENT - ((w->sbrk_base + PTMD_CHUNK_HDR_SZ) & PTMD_MALLOC_ALIGN_MASK)) &
                            PTMD_MALLOC_ALIGN_MASK);
        for (i = 0; m && i < w->maps.count; i++) {
            if (PTMD_BUF_AT(&w->maps.maps, ptmd_map, i) != m) continue;
            if (region_mapping(m)) {
                uint64_t end = region_end(&c, a, first, extent_end(&w->maps, i));
                /* from the 16-byte boundary below an unaligned sbrk_base (ptmd_sbrk_pad) */
                if (end && add_region(w, a, m, w->sbrk_base & ~(uint64_t)PTMD_MALLOC_ALIGN_MASK, end) != 0) goto oom;
                if (end) {
                    c.brk_start = w->sbrk_base;
                    c.brk_end = end;
                }
            }
            break;
        }
    }
    for (i = 0; i < w->maps.count; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&w->maps.maps, ptmd_map, i);
        if (!region_mapping(m) || reached >= m->end) continue;
        if (scan_extent(w, a, &c, i, reached > m->start ? reached : m->start, &reached) != 0) goto oom;
    }
    ptmd_sort(PTMD_W_HEAP(w, a->first_heap), a->n_heaps, sizeof(ptmd_heap_rec), by_start, NULL);
    known.len = 0;
    for (i = 0; w->src.in_place && i < a->n_heaps; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, a->first_heap + i);
        uint64_t r[2] = { h->start, h->end };
        if (ptmd_buf_append(&known, r, sizeof(r)) != 0) goto oom;
    }
    return 0;
oom:
    return ptmd_fail_sys(err, errno, "heap table", "mmap");
}
