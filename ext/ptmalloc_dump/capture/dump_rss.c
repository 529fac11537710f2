/* What the whole RSS is accounted from: the mappings and VmRSS at the capture (a snapshot's, its
 * parent's), and the residency of Ruby's object pages. */
#define _GNU_SOURCE
#include "capture/dump_rss.h"

#include <errno.h>
#include <unistd.h>

void ptmd_dump_mappings(ptmd_dump_state *d)
{
    ptmd_err ignored;
    if (d->parent_mappings) {
        if (d->parent_mappings->present) d->mappings = *d->parent_mappings;
        return;
    }
    if (ptmd_mappings_read(&d->mappings, 0, &ignored) != 0) d->mappings.present = 0;
}

void ptmd_dump_parent_mappings(ptmd_mappings *m, int parent)
{
    ptmd_err ignored;
    if (getppid() != parent || ptmd_mappings_read(m, parent, &ignored) != 0) {
        m->present = 0;
        return;
    }
    m->head.flags |= PTMD_MAPF_PARENT;
}

int ptmd_dump_scratch_rss(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_scratch_range ranges[PTMD_SCRATCH_MAX];
    ptmd_walk *w = &d->w;
    uint64_t ps = w->page_size;
    uint8_t flags[64];
    size_t i, n;
    /* a snapshot's mappings are its parent's, another process's hold none of this one's */
    if (!w->src.in_place || d->parent_mappings || !d->mappings.present) return 0;
    n = ptmd_scratch_list(ranges, PTMD_SCRATCH_MAX);
    for (i = 0; i < n; i++) {
        uint64_t lo = ranges[i].start & ~(ps - 1), hi = (ranges[i].start + ranges[i].length + ps - 1) & ~(ps - 1);
        ptmd_scratch_rec *r;
        if (!(r = ptmd_buf_push(&d->scratch, sizeof(*r))))
            return ptmd_fail_sys(err, errno, "scratch residency", "mmap");
        r->start = lo;
        r->length = hi - lo;
        while (lo < hi) {
            size_t k, m = (hi - lo) / ps < sizeof(flags) ? (size_t)((hi - lo) / ps) : sizeof(flags);
            if (ptmd_source_pages(&w->src, (uintptr_t)lo, m, flags) != 0) break;
            for (k = 0; k < m; k++)
                if (flags[k] & PTMD_PAGE_PRESENT) r->resident += ps;
            lo += m * ps;
        }
    }
    return 0;
}

int ptmd_dump_ruby_page_rss(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_walk *w = &d->w;
    size_t i, n = PTMD_BUF_COUNT(&d->ruby.pages, ptmd_ruby_page);
    uint64_t ps = w->page_size;
    uint8_t flags[64];
    if (!d->ruby.present) return 0;
    if (ptmd_buf_reserve(&d->ruby_rss, n * sizeof(uint64_t) + 8) != 0)
        return ptmd_fail_sys(err, errno, "Ruby page residency", "mmap");
    d->ruby_rss.len = n * sizeof(uint64_t);
    for (i = 0; i < n; i++) {
        const ptmd_ruby_page *pg = PTMD_BUF_AT(&d->ruby.pages, ptmd_ruby_page, i);
        uint64_t lo = pg->start & ~(ps - 1), hi = (pg->end + ps - 1) & ~(ps - 1), bytes = 0;
        while (lo < hi) {
            size_t k, m = (hi - lo) / ps < sizeof(flags) ? (size_t)((hi - lo) / ps) : sizeof(flags);
            if (ptmd_source_pages(&w->src, (uintptr_t)lo, m, flags) != 0) break;
            for (k = 0; k < m; k++)
                if (flags[k] & PTMD_PAGE_PRESENT) bytes += ps;
            lo += m * ps;
        }
        *PTMD_BUF_AT(&d->ruby_rss, uint64_t, i) = bytes;
    }
    return 0;
}
