/* Every resident byte in one part. Malloc's heaps are counted page by page from their residency (a
 * resident page's bytes go to the chunks on it), Ruby's pages from theirs; what else each mapping holds
 * (smaps' Rss less what was counted inside it) goes by the mapping: a file, a stack, or other
 * anonymous memory. */
#include "analysis/rss.h"

#include <stdlib.h>
#include <string.h>

const char *const ptmd_rss_part_names[PTMD_RSS_COUNT] = { PTMD_RSS_PARTS(PTMD_ENUM_NAME) };

/* Index of the mapping holding addr, or -1 (the reader checked they are sorted and apart). */
static long mapping_of(const ptmd_view *v, uint64_t addr)
{
    size_t lo = 0, hi = v->n_mappings;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < v->mappings[mid].start) hi = mid;
        else if (addr >= v->mappings[mid].end) lo = mid + 1;
        else return (long)mid;
    }
    return -1;
}

static int chunk_part(const ptmd_heap_rec *h, const ptmd_chunk_rec *c)
{
    int st = ptmd_rec_state(c);
    if (h->kind == PTMD_HEAP_MMAPPED_CHUNK || st == PTMD_ST_MMAPPED) return PTMD_RSS_MMAPPED;
    if (st == PTMD_ST_META || (c->word & PTMD_CF_WORD(PTMD_CF_TCACHE_STRUCT))) return PTMD_RSS_MALLOC_META;
    if (st == PTMD_ST_IN_USE) return PTMD_RSS_MALLOC_IN_USE;
    return PTMD_RSS_MALLOC_FREE;
}

/* One heap's resident pages: each page's bytes to the chunks on it (a page's bytes outside the heap's
 * range to the allocator's metadata), and each page to the mapping it lies in, in known[]. A heap may
 * lie over several mappings: a thread's heap grown by a forked child, whose inherited mapping the
 * kernel does not merge with the new one, or [heap] split the same way. */
static void heap_pages(const ptmd_view *v, const ptmd_heap_rec *h, ptmd_rss *out, uint64_t *known)
{
    uint64_t ps = v->meta->page_size, p, c, map_end = 0;
    const uint8_t *pages = v->pages + h->first_page;
    long m = -1;
    for (p = 0; p < h->n_pages; p++) {
        uint64_t lo = h->page_base + p * ps, hi = lo + ps, inside;
        if (!(pages[p] & PTMD_PAGE_PRESENT)) continue;
        if (lo >= map_end || m < 0) {
            m = mapping_of(v, lo);
            map_end = m >= 0 ? v->mappings[m].end : lo + ps;
        }
        if (m >= 0) known[m] += ps;
        inside = (hi < h->end ? hi : h->end) - (lo > h->start ? lo : h->start);
        out->part[h->kind == PTMD_HEAP_MMAPPED_CHUNK ? PTMD_RSS_MMAPPED : PTMD_RSS_MALLOC_META] += ps - inside;
    }
    for (c = h->first_chunk; c < h->first_chunk + h->n_chunks; c++) {
        const ptmd_chunk_rec *r = &v->chunks[c];
        uint64_t a = r->addr, e = r->addr + ptmd_rec_size(r), i;
        int part = chunk_part(h, r);
        for (i = (a - h->page_base) / ps; i < h->n_pages && h->page_base + i * ps < e; i++) {
            uint64_t lo = h->page_base + i * ps, hi = lo + ps;
            if (pages[i] & PTMD_PAGE_PRESENT) out->part[part] += (hi < e ? hi : e) - (lo > a ? lo : a);
        }
    }
}

static int in_a_heap(const ptmd_view *v, uint64_t addr)
{
    size_t lo = 0, hi = v->n_heaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_heap_rec *h = &v->heaps[v->heap_order[mid]];
        if (addr < h->start) hi = mid;
        else if (addr >= h->end) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* A thread's or a fiber's stack: private read-write memory right above a PROT_NONE guard, the shape
 * of glibc's thread stacks (nptl/allocatestack.c: the guard below the stack, which grows down) and of
 * Ruby's fiber pool stacks (cont.c fiber_pool_expand: each stack's guard page at its low end; the
 * fiber's VM stack is carved from the same stack; a thread's VM stack is alloca'd on its machine
 * stack, thread.c thread_start_func_2). A malloc heap above another heap's PROT_NONE tail has the same shape: the
 * caller rules out mappings that hold a heap. The main thread's stack is [stack]; its VM stack is a
 * malloc chunk (vm.c th_init) and counts as malloc. */
static int is_stack(const ptmd_view *v, size_t i)
{
    const ptmd_mapping_rec *m = &v->mappings[i], *prev = i ? &v->mappings[i - 1] : NULL;
    return prev && prev->end == m->start && prev->kind == PTMD_MK_ANON && prev->prot == 0 &&
           m->prot == (PTMD_MP_READ | PTMD_MP_WRITE);
}

int ptmd_rss_account(const ptmd_view *v, ptmd_rss *out, uint64_t *file_bytes)
{
    uint64_t *known;
    size_t i;
    memset(out, 0, sizeof(*out));
    if (!v->mappings_head) return -1;
    memset(file_bytes, 0, v->n_mappings * sizeof(uint64_t));
    known = calloc(v->n_mappings ? v->n_mappings : 1, sizeof(uint64_t));
    if (!known) return -1;
    for (i = 0; i < v->n_heaps; i++) heap_pages(v, &v->heaps[i], out, known);
    for (i = 0; i < v->n_ruby_page_rss; i++) {
        long m;
        if (v->heap_order && in_a_heap(v, v->ruby_pages[i].start)) continue; /* a malloc chunk: counted with its heap */
        out->part[PTMD_RSS_RUBY_PAGES] += v->ruby_page_rss[i];
        if ((m = mapping_of(v, v->ruby_pages[i].start)) >= 0) known[m] += v->ruby_page_rss[i];
    }
    for (i = 0; v->native_track && i < v->native_track->n_regions; i++) {
        const ptmd_native_region *r = &v->native_track->regions[i];
        long m = mapping_of(v, r->start);
        if (m < 0 || v->mappings[m].kind == PTMD_MK_FILE) continue;
        out->part[PTMD_RSS_TRACKING] += r->resident;
        known[m] += r->resident;
    }
    /* the dump's own scratch: each range inside one anonymous mapping (merged with its neighbours,
     * perhaps), at most what that mapping still has unaccounted */
    for (i = 0; i < v->n_scratch; i++) {
        const ptmd_scratch_rec *r = &v->scratch[i];
        long m = mapping_of(v, r->start);
        uint64_t room, bytes;
        if (m < 0 || v->mappings[m].kind == PTMD_MK_FILE || r->start + r->length > v->mappings[m].end) continue;
        room = v->mappings[m].rss > known[m] ? v->mappings[m].rss - known[m] : 0;
        bytes = r->resident < room ? r->resident : room;
        out->part[PTMD_RSS_SCRATCH] += bytes;
        known[m] += bytes;
    }
    for (i = 0; i < v->n_mappings; i++) {
        const ptmd_mapping_rec *m = &v->mappings[i];
        uint64_t rest = m->rss > known[i] ? m->rss - known[i] : 0;
        if (known[i] > m->rss) out->overshoot += known[i] - m->rss;
        switch (m->kind) {
        case PTMD_MK_FILE:
            out->part[PTMD_RSS_FILE] += rest;
            file_bytes[i] = rest;
            break;
        case PTMD_MK_STACK: out->part[PTMD_RSS_STACKS] += rest; break;
        case PTMD_MK_ANON:
            out->part[!known[i] && is_stack(v, i) ? PTMD_RSS_STACKS : PTMD_RSS_OTHER_ANON] += rest;
            break;
        default: out->part[PTMD_RSS_OTHER_ANON] += rest;
        }
    }
    free(known);
    for (i = 0; i < PTMD_RSS_COUNT; i++) out->total += out->part[i];
    out->vm_rss = v->mappings_head->vm_rss;
    return 0;
}
