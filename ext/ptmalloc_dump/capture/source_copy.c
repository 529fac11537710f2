/* The copy of a stopped process: the mappings the walk reads, copied with process_vm_readv (many
 * ranges a call) into mmapped regions, with the residency /proc/PID/pagemap gives; its buffers made
 * ready and faulted in while the target still runs. */
#define _GNU_SOURCE
#include "capture/source_copy.h"
#include "capture/source_ptrace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

static int copied_mapping(const ptmd_map *m, uint64_t lib_lo, uint64_t lib_hi)
{
    if (!(m->prot & PTMD_MAP_R) || !(m->prot & PTMD_MAP_PRIVATE)) return 0;
    if (m->start < lib_hi && m->end > lib_lo) return 1;
    return (m->prot & PTMD_MAP_W) && m->kind != PTMD_MAPKIND_SPECIAL;
}

/* [remote, remote + len) into local, as much as can be read: a page that cannot (unmapped since,
 * [vvar]-like) stays zero and loses its residency. Bounded by the pages of the range. */
static void copy_range(ptmd_source *s, ptmd_region *r, uint64_t remote, uint64_t len)
{
    uint64_t done = 0;
    while (done < len) {
        struct iovec local = { r->local + (remote + done - r->start), len - done },
                     rem = { (void *)(uintptr_t)(remote + done), len - done };
        ssize_t n = process_vm_readv(s->pid, &local, 1, &rem, 1, 0);
        if (n > 0) {
            done += (uint64_t)n;
            s->copied_bytes += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == ESRCH) {
            s->gone = 1;
            return;
        }
        {
            uint64_t at = remote + done, next = (at & ~(uint64_t)(s->page_size - 1)) + s->page_size;
            r->pages[(at - r->start) / s->page_size] = 0;
            done = next - remote < len ? next - remote : len;
        }
    }
}

/* Ranges to copy, gathered into one process_vm_readv of many iovecs (one system call for up to
 * COPY_BATCH runs of pages); a batch that does not arrive whole is copied again range by range. */
#define COPY_BATCH 512

typedef struct {
    struct iovec local[COPY_BATCH], remote[COPY_BATCH];
    ptmd_region *region[COPY_BATCH];
    size_t n;
    uint64_t bytes;
} copy_batch;

static void batch_flush(ptmd_source *s, copy_batch *b)
{
    ssize_t got;
    size_t i;
    if (!b->n) return;
    got = process_vm_readv(s->pid, b->local, b->n, b->remote, b->n, 0);
    if (got == (ssize_t)b->bytes) s->copied_bytes += b->bytes;
    else if (got < 0 && errno == ESRCH) s->gone = 1;
    else
        for (i = 0; i < b->n && !s->gone; i++)
            copy_range(s, b->region[i], (uint64_t)(uintptr_t)b->remote[i].iov_base, b->remote[i].iov_len);
    b->n = 0;
    b->bytes = 0;
}

static void batch_add(ptmd_source *s, copy_batch *b, ptmd_region *r, uint64_t remote, uint64_t len)
{
    if (b->n == COPY_BATCH) batch_flush(s, b);
    b->local[b->n].iov_base = r->local + (remote - r->start);
    b->local[b->n].iov_len = len;
    b->remote[b->n].iov_base = (void *)(uintptr_t)remote;
    b->remote[b->n].iov_len = len;
    b->region[b->n] = r;
    b->bytes += len;
    b->n++;
}

/* The copy's regions: runs of adjacent mappings the copy takes, appended to *regions (start and end
 * only). */
static int gather_regions(ptmd_buf *regions, size_t *n, const ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi)
{
    size_t i;
    for (i = 0; i < maps->count; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
        ptmd_region *r = *n ? PTMD_BUF_AT(regions, ptmd_region, *n - 1) : NULL;
        if (!copied_mapping(m, lib_lo, lib_hi)) continue;
        if (r && r->end == m->start) {
            r->end = m->end;
            continue;
        }
        if (!(r = ptmd_buf_push(regions, sizeof(*r)))) return -1;
        r->start = m->start;
        r->end = m->end;
        (*n)++;
    }
    return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Faults in [p, p + len) of a buffer of ours: in one call where the kernel can, else a write a page. */
static void populate(unsigned char *p, size_t len, size_t page_size)
{
    size_t k;
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return;
    for (k = 0; k < len; k += page_size) ((volatile unsigned char *)p)[k] = 0;
}

void ptmd_source_prefault(ptmd_copy_spare *sp, int pid, const ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi)
{
    const size_t batch = 8192;
    long ps = sysconf(_SC_PAGESIZE);
    const size_t page_size = ps > 0 ? (size_t)ps : 4096;
    uint64_t *entries;
    char path[64];
    size_t i, k = 0;
    int fd;
    memset(sp, 0, sizeof(*sp));
    if (gather_regions(&sp->regions, &sp->n, maps, lib_lo, lib_hi) != 0) return;
    snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return;
    if (!(entries = ptmd_source_zeroed(batch * sizeof(uint64_t)))) {
        close(fd);
        return;
    }
    for (k = 0; k < sp->n; k++) {
        ptmd_region *r = PTMD_BUF_AT(&sp->regions, ptmd_region, k);
        r->local = ptmd_source_zeroed(r->end - r->start);
    }
    /* anonymous memory where a page is resident or swapped, a file mapping whole: what the copy reads */
    for (i = 0, k = 0; i < maps->count && k < sp->n; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
        ptmd_region *r = PTMD_BUF_AT(&sp->regions, ptmd_region, k);
        size_t np, done = 0;
        if (!copied_mapping(m, lib_lo, lib_hi)) continue;
        while (m->start >= r->end && k + 1 < sp->n) r = PTMD_BUF_AT(&sp->regions, ptmd_region, ++k);
        if (!r->local || m->start < r->start || m->end > r->end) continue;
        if (m->kind == PTMD_MAPKIND_FILE) {
            populate(r->local + (m->start - r->start), m->end - m->start, page_size);
            continue;
        }
        np = (size_t)((m->end - m->start) / page_size);
        while (done < np) {
            size_t n = np - done < batch ? np - done : batch, j, run = 0;
            ssize_t got = pread(fd, entries, n * 8, (off_t)((m->start / page_size + done) * 8));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break;
            n = (size_t)got / 8;
            for (j = 0; j <= n; j++) {
                if (j < n && (ptmd_pagemap_flags(entries[j]) & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED))) {
                    run++;
                    continue;
                }
                if (run)
                    populate(r->local + (m->start - r->start) + (done + j - run) * page_size, run * page_size,
                             page_size);
                run = 0;
            }
            done += n;
        }
    }
    munmap(entries, batch * sizeof(uint64_t));
    close(fd);
}

void ptmd_copy_spare_release(ptmd_copy_spare *sp)
{
    size_t k;
    for (k = 0; k < sp->n; k++) {
        ptmd_region *r = PTMD_BUF_AT(&sp->regions, ptmd_region, k);
        if (r->local) munmap(r->local, r->end - r->start);
    }
    ptmd_buf_release(&sp->regions);
    sp->n = 0;
}

/* The buffer for [start, end): a spare's of the same start, resized in place or moved with its pages
 * (mremap), else a fresh one. */
static unsigned char *copy_buffer(ptmd_copy_spare *sp, uint64_t start, uint64_t end)
{
    size_t k;
    for (k = 0; sp && k < sp->n; k++) {
        ptmd_region *r = PTMD_BUF_AT(&sp->regions, ptmd_region, k);
        void *p;
        if (r->start != start || !r->local) continue;
        p = r->end - r->start == end - start ? r->local
                                             : mremap(r->local, r->end - r->start, end - start, MREMAP_MAYMOVE);
        if (p == MAP_FAILED) break;
        r->local = NULL;
        return p;
    }
    return ptmd_source_zeroed(end - start);
}

int ptmd_source_copy(ptmd_source *s, ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi, ptmd_copy_spare *spare,
                     ptmd_err *err)
{
    static copy_batch b; /* one copy at a time (dump_busy); 20 KiB, kept off the stack */
    char path[64];
    uint64_t *entries = NULL;
    const size_t batch = 8192;
    size_t i, k;
    int fd = -1, rc = -1;
    b.n = 0;
    b.bytes = 0;
    snprintf(path, sizeof(path), "/proc/%d/pagemap", s->pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ptmd_fail_sys(err, errno, path, "open");
    entries = ptmd_source_zeroed(batch * sizeof(uint64_t));
    if (!entries) {
        ptmd_fail_sys(err, errno, "copy of the target", "mmap");
        goto out;
    }
    /* the regions: runs of adjacent copied mappings; a mapping not copied fails every read */
    if (gather_regions(&s->regions, &s->n_regions, maps, lib_lo, lib_hi) != 0) {
        ptmd_fail_sys(err, errno, "copy of the target", "mmap");
        goto out;
    }
    for (i = 0; i < maps->count; i++) {
        ptmd_map *m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
        if (!copied_mapping(m, lib_lo, lib_hi)) m->prot &= ~(uint32_t)PTMD_MAP_R;
    }
    for (k = 0; k < s->n_regions; k++) {
        ptmd_region *r = PTMD_BUF_AT(&s->regions, ptmd_region, k);
        size_t np = (size_t)((r->end - r->start) / s->page_size), done = 0;
        r->local = copy_buffer(spare, r->start, r->end);
        r->pages = ptmd_source_zeroed(np);
        if (!r->local || !r->pages) {
            ptmd_fail_sys(err, errno, "copy of the target", "mmap");
            goto out;
        }
        while (done < np) {
            size_t n = np - done < batch ? np - done : batch, j;
            ssize_t got = pread(fd, entries, n * 8, (off_t)((r->start / s->page_size + done) * 8));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                ptmd_fail_sys(err, got < 0 ? errno : EIO, path, "read");
                goto out;
            }
            n = (size_t)got / 8;
            for (j = 0; j < n; j++) r->pages[done + j] = ptmd_pagemap_flags(entries[j]);
            done += n;
        }
    }
    ptmd_source_test_kill(s, "copy");
    /* the bytes, mapping by mapping: anonymous memory only where a page is resident or swapped */
    for (i = 0, k = 0; i < maps->count && k < s->n_regions; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
        ptmd_region *r = PTMD_BUF_AT(&s->regions, ptmd_region, k);
        uint64_t p;
        if (!(m->prot & PTMD_MAP_R)) continue;
        while (m->start >= r->end && k + 1 < s->n_regions) r = PTMD_BUF_AT(&s->regions, ptmd_region, ++k);
        if (m->start < r->start || m->end > r->end) continue;
        if (m->kind == PTMD_MAPKIND_FILE) {
            batch_add(s, &b, r, m->start, m->end - m->start);
            continue;
        }
        for (p = m->start; p < m->end;) {
            uint64_t q;
            if (!(r->pages[(p - r->start) / s->page_size] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED))) {
                p += s->page_size;
                continue;
            }
            for (q = p + s->page_size;
                 q < m->end && (r->pages[(q - r->start) / s->page_size] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED));)
                q += s->page_size;
            batch_add(s, &b, r, p, q - p);
            p = q;
        }
    }
    batch_flush(s, &b);
    s->last = 0;
    if (s->gone) {
        ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being read", s->pid);
        goto out;
    }
    rc = 0;
out:
    if (entries) munmap(entries, batch * sizeof(uint64_t));
    if (fd >= 0) close(fd);
    memset(&b, 0, sizeof(b)); /* no address of the target stays in this library's data */
    return rc;
}
