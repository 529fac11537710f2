/* What every source shares: its setup and release, the regions of a copy (another process's or a
 * core's) and the reads and residency from them, and the calls through its table. */
#define _GNU_SOURCE
#include "capture/source.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void ptmd_source_init(ptmd_source *s, const ptmd_source_ops *ops, int pid)
{
    long ps = sysconf(_SC_PAGESIZE);
    memset(s, 0, sizeof(*s));
    s->ops = ops;
    s->in_place = ops->in_place;
    s->pid = pid;
    s->mem.mem_fd = -1;
    s->pagemap.fd = -1;
    s->page_size = ps > 0 ? (size_t)ps : 4096;
}

void *ptmd_source_zeroed(size_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int ptmd_source_thread_table(ptmd_source *s)
{
    s->tids = ptmd_source_zeroed(PTMD_SOURCE_MAX_TASKS * (sizeof(int) + sizeof(uint64_t)));
    if (!s->tids) return -1;
    s->thread_ptr = (uint64_t *)(void *)(s->tids + PTMD_SOURCE_MAX_TASKS);
    return 0;
}

void ptmd_source_release(ptmd_source *s)
{
    size_t k;
    ptmd_source_let_go(s);
    for (k = 0; k < s->n_regions; k++) {
        ptmd_region *r = PTMD_BUF_AT(&s->regions, ptmd_region, k);
        if (r->local && !s->core) munmap(r->local, r->end - r->start);
        if (r->pages) munmap(r->pages, (r->end - r->start) / s->page_size ? (r->end - r->start) / s->page_size : 1);
    }
    ptmd_buf_release(&s->regions);
    if (s->core) munmap((void *)s->core, s->core_size);
    s->core = NULL;
    s->nt_file = NULL;
    s->auxv = NULL;
    ptmd_buf_release(&s->made_nt_file);
    if (s->tids) munmap(s->tids, PTMD_SOURCE_MAX_TASKS * (sizeof(int) + sizeof(uint64_t)));
    s->tids = NULL;
    s->thread_ptr = NULL;
    s->n_tids = 0;
    s->n_regions = 0;
    s->last = 0;
    ptmd_memreader_close(&s->mem);
    ptmd_pagemap_close(&s->pagemap);
}

/* ---- the copy's regions ---------------------------------------------------------------------- */

const unsigned char *ptmd_source_find(ptmd_source *s, uint64_t addr, size_t len)
{
    const ptmd_region *v = (const ptmd_region *)(const void *)s->regions.base;
    size_t lo = 0, hi = s->n_regions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < v[mid].start) hi = mid;
        else if (addr >= v[mid].end) lo = mid + 1;
        else {
            if (len > v[mid].end - addr) return NULL;
            s->last = mid;
            return v[mid].local + (addr - v[mid].start);
        }
    }
    return NULL;
}

int ptmd_source_copy_read(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    const unsigned char *p;
    if (len == 0) return 0;
    if (!(p = ptmd_source_at(s, addr, len))) return -1;
    memcpy(dst, p, len);
    return 0;
}

void ptmd_source_read_each(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok)
{
    size_t i;
    for (i = 0; i < n; i++) ok[i] = ptmd_source_read(s, addrs[i], (unsigned char *)dst + i * each, each) == 0;
}

uint64_t ptmd_source_rd64_slow(ptmd_source *s, uint64_t addr)
{
    const unsigned char *p = ptmd_source_at(s, addr, 8);
    uint64_t v = 0;
    if (p) memcpy(&v, p, 8);
    return v;
}

int ptmd_source_copy_pages(ptmd_source *s, uint64_t start, size_t npages, uint8_t *out)
{
    const ptmd_region *v = (const ptmd_region *)(const void *)s->regions.base;
    size_t lo = 0, hi = s->n_regions, i;
    int rc = 0;
    for (i = 0; i < npages; i++) {
        uint64_t a = start + i * s->page_size;
        const ptmd_region *r = NULL;
        if (lo < s->n_regions && a >= v[lo].start && a < v[lo].end) r = &v[lo];
        else {
            size_t l = 0, h = hi;
            while (l < h) {
                size_t mid = l + (h - l) / 2;
                if (a < v[mid].start) h = mid;
                else if (a >= v[mid].end) l = mid + 1;
                else {
                    r = &v[mid];
                    lo = mid;
                    break;
                }
            }
        }
        if (r) out[i] = r->pages[(a - r->start) / s->page_size];
        else {
            out[i] = 0;
            rc = -1;
        }
    }
    return rc;
}

int ptmd_source_held_threads(const ptmd_source *s, const int **tids, const uint64_t **thread_ptr)
{
    *tids = s->tids;
    *thread_ptr = s->thread_ptr;
    return s->n_tids;
}

/* ---- through the table ------------------------------------------------------------------------ */

int ptmd_source_read_now(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    return s->ops->read_now ? s->ops->read_now(s, addr, dst, len) : s->ops->read(s, addr, dst, len);
}

int ptmd_source_pages(ptmd_source *s, uint64_t start, size_t npages, uint8_t *out)
{
    return s->ops->pages(s, start, npages, out);
}

int ptmd_source_maps_again(ptmd_source *s, ptmd_maps *maps, ptmd_err *err)
{
    if (!s->ops->maps_again) return 0;
    return s->ops->maps_again(s, maps, err) == 0 ? 1 : -1;
}

int ptmd_source_threads(const ptmd_source *s, const int **tids, const uint64_t **thread_ptr)
{
    return s->ops->threads ? s->ops->threads(s, tids, thread_ptr) : -1;
}

void ptmd_source_hold_range(ptmd_source *s, uint64_t start, uint64_t end)
{
    if (s->ops->hold_range) s->ops->hold_range(s, start, end);
}

void ptmd_source_let_go(ptmd_source *s)
{
    if (s->ops && s->ops->let_go) s->ops->let_go(s);
}
