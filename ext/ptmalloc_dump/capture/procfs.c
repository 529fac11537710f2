/* /proc/self readers built on open/read/pread and raw syscalls only: safe to run during the walk. */
#define _GNU_SOURCE
#include "capture/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- /proc/self/maps ---------------------------------------------------------------------- */

int ptmd_read_file(const char *path, ptmd_buf *out, size_t step, ptmd_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ptmd_fail_sys(err, errno, path, "open");
    out->len = 0;
    for (;;) {
        ssize_t n;
        if (ptmd_buf_reserve(out, step) != 0) {
            int e = errno;
            close(fd);
            return ptmd_fail_sys(err, e, path, "mmap scratch for");
        }
        n = read(fd, out->base + out->len, out->cap - out->len);
        if (n < 0) {
            int e = errno;
            if (e == EINTR) continue;
            close(fd);
            return ptmd_fail_sys(err, e, path, "read");
        }
        if (n == 0) break;
        out->len += (size_t)n;
    }
    close(fd);
    return 0;
}

int ptmd_read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0) return -1;
    n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    return 0;
}

int ptmd_proc_stat(const char *path, char *state, int *ppid)
{
    char buf[1024];
    const char *p;
    if (ptmd_read_small(path, buf, sizeof(buf)) != 0 || !(p = strrchr(buf, ')')) || p[1] != ' ' || !p[2]) return -1;
    if (state) *state = p[2];
    if (ppid) *ppid = p[3] == ' ' ? (int)strtol(p + 4, NULL, 10) : 0;
    return 0;
}

int ptmd_proc_parent(int pid)
{
    char path[64];
    int ppid = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    ptmd_proc_stat(path, NULL, &ppid);
    return ppid;
}

uint64_t ptmd_parse_hex(const char **pp, const char *end)
{
    const char *p = *pp;
    uint64_t v = 0;
    while (p < end) {
        char c = *p;
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else break;
        v = (v << 4) | (uint64_t)d;
        p++;
    }
    *pp = p;
    return v;
}

static uint64_t parse_dec(const char **pp, const char *end)
{
    const char *p = *pp;
    uint64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (uint64_t)(*p++ - '0');
    *pp = p;
    return v;
}

static void skip_spaces(const char **pp, const char *end)
{
    while (*pp < end && **pp == ' ') (*pp)++;
}

static int maps_load_path(ptmd_maps *m, const char *path, ptmd_err *err)
{
    const char *p, *end;
    m->count = 0;
    m->maps.len = 0;
    if (ptmd_read_file(path, &m->text, 64 * 1024, err) != 0) return -1;
    p = (const char *)m->text.base;
    end = p + m->text.len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        ptmd_map *e;
        const char *name;
        if (!eol) eol = end;
        e = ptmd_buf_push(&m->maps, sizeof(ptmd_map));
        if (!e) return ptmd_fail_sys(err, errno, path, "mmap scratch for");
        e->start = ptmd_parse_hex(&p, eol);
        if (p < eol && *p == '-') p++;
        e->end = ptmd_parse_hex(&p, eol);
        skip_spaces(&p, eol);
        if (p + 4 <= eol) {
            if (p[0] == 'r') e->prot |= PTMD_MAP_R;
            if (p[1] == 'w') e->prot |= PTMD_MAP_W;
            if (p[2] == 'x') e->prot |= PTMD_MAP_X;
            if (p[3] == 'p') e->prot |= PTMD_MAP_PRIVATE;
            p += 4;
        }
        skip_spaces(&p, eol);
        e->offset = ptmd_parse_hex(&p, eol);
        skip_spaces(&p, eol);
        while (p < eol && *p != ' ') p++; /* device */
        skip_spaces(&p, eol);
        e->inode = parse_dec(&p, eol);
        skip_spaces(&p, eol);
        name = p;
        if (name == eol || (eol - name >= 6 && memcmp(name, "[anon:", 6) == 0))
            e->kind = e->inode ? PTMD_MAPKIND_FILE : PTMD_MAPKIND_ANON;
        else if (eol - name == 6 && memcmp(name, "[heap]", 6) == 0) e->kind = PTMD_MAPKIND_BRK;
        else if (eol - name >= 6 && memcmp(name, "[stack", 6) == 0) e->kind = PTMD_MAPKIND_STACK;
        else if (*name == '[') e->kind = PTMD_MAPKIND_SPECIAL;
        else e->kind = PTMD_MAPKIND_FILE;
        if (e->end <= e->start) m->maps.len -= sizeof(ptmd_map); /* unparsable line */
        p = eol + 1;
    }
    m->count = PTMD_BUF_COUNT(&m->maps, ptmd_map);
    return 0;
}

int ptmd_maps_load(ptmd_maps *m, ptmd_err *err)
{
    return maps_load_path(m, "/proc/self/maps", err);
}

int ptmd_maps_load_pid(ptmd_maps *m, int pid, ptmd_err *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    if (maps_load_path(m, path, err) != 0) {
        if (err->code == PTMD_E_SYSTEM && err->sys_errno == ENOENT)
            return ptmd_fail(err, PTMD_E_TARGET, "no process %d", pid);
        return -1;
    }
    return 0;
}

void ptmd_maps_release(ptmd_maps *m)
{
    ptmd_buf_release(&m->text);
    ptmd_buf_release(&m->maps);
    m->count = 0;
}

const ptmd_map *ptmd_maps_find(const ptmd_maps *m, uintptr_t addr)
{
    size_t lo = 0, hi = m->count;
    const ptmd_map *v = (const ptmd_map *)(const void *)m->maps.base;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < v[mid].start) hi = mid;
        else if (addr >= v[mid].end) lo = mid + 1;
        else return &v[mid];
    }
    return NULL;
}

int ptmd_maps_readable(const ptmd_maps *m, uintptr_t addr, size_t len)
{
    uintptr_t end = addr + len;
    if (end < addr) return 0;
    while (addr < end) {
        const ptmd_map *e = ptmd_maps_find(m, addr);
        if (!e || !(e->prot & PTMD_MAP_R)) return 0;
        addr = (uintptr_t)e->end;
    }
    return 1;
}

/* ---- fault-free reads --------------------------------------------------------------------- */

int ptmd_memreader_open(ptmd_memreader *r, ptmd_err *err)
{
    char probe = 0, dst = 1;
    struct iovec local = { &dst, 1 }, remote = { &probe, 1 };
    r->mem_fd = -1;
    r->use_vm_readv = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1 && dst == 0;
    if (!r->use_vm_readv) {
        r->mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
        if (r->mem_fd < 0)
            return ptmd_fail_sys(err, errno, "/proc/self/mem",
                                 "neither process_vm_readv nor /proc/self/mem is permitted; open");
    }
    return 0;
}

void ptmd_memreader_close(ptmd_memreader *r)
{
    if (r->mem_fd >= 0) close(r->mem_fd);
    r->mem_fd = -1;
}

int ptmd_safe_read(ptmd_memreader *r, uintptr_t addr, void *dst, size_t len)
{
    if (len == 0) return 0;
    if (addr + len < addr) return -1;
    if (r->use_vm_readv) {
        struct iovec local = { dst, len }, remote = { (void *)addr, len };
        return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
    }
    if (addr > (uintptr_t)INT64_MAX) return -1;
    return pread(r->mem_fd, dst, len, (off_t)addr) == (ssize_t)len ? 0 : -1;
}

#define PTMD_IOV_BATCH 512

void ptmd_safe_read_many(ptmd_memreader *r, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok)
{
    unsigned char *out = dst;
    size_t i = 0;
    if (!r->use_vm_readv) {
        for (i = 0; i < n; i++) ok[i] = ptmd_safe_read(r, addrs[i], out + i * each, each) == 0;
        return;
    }
    while (i < n) {
        struct iovec local[PTMD_IOV_BATCH], remote[PTMD_IOV_BATCH];
        size_t k, batch = n - i < PTMD_IOV_BATCH ? n - i : PTMD_IOV_BATCH;
        ssize_t got;
        for (k = 0; k < batch; k++) {
            local[k].iov_base = out + (i + k) * each;
            local[k].iov_len = each;
            remote[k].iov_base = (void *)addrs[i + k];
            remote[k].iov_len = each;
        }
        got = process_vm_readv(getpid(), local, batch, remote, batch, 0);
        if (got < 0) got = 0;
        /* process_vm_readv stops at the first unreadable element: mark what arrived, retry the rest. */
        for (k = 0; k < batch && (ssize_t)((k + 1) * each) <= got; k++) ok[i + k] = 1;
        i += k;
        if (k < batch) {
            ok[i] = ptmd_safe_read(r, addrs[i], out + i * each, each) == 0;
            i++;
        }
    }
}

/* ---- page residency ----------------------------------------------------------------------- */

#define PTMD_PAGEMAP_BATCH 8192

int ptmd_pagemap_open(ptmd_pagemap *pm, ptmd_err *err)
{
    long ps = sysconf(_SC_PAGESIZE);
    pm->page_size = ps > 0 ? (size_t)ps : 4096;
    pm->cap = PTMD_PAGEMAP_BATCH;
    pm->entries = mmap(NULL, pm->cap * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pm->entries == MAP_FAILED) {
        pm->entries = NULL;
        return ptmd_fail_sys(err, errno, "pagemap", "mmap scratch for");
    }
    ptmd_scratch_note(pm->entries, pm->cap * sizeof(uint64_t));
    /* PTMALLOC_DUMP_RESIDENCY=mincore forces the fallback (diagnostics, and its spec) */
    {
        const char *force = getenv("PTMALLOC_DUMP_RESIDENCY");
        pm->fd = force && strcmp(force, "mincore") == 0 ? -1 : open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    }
    if (pm->fd >= 0) {
        uint64_t probe;
        /* Some sandboxes allow the open but fail every read: fall back then too. */
        uintptr_t here = (uintptr_t)pm->entries / pm->page_size;
        if (pread(pm->fd, &probe, sizeof(probe), (off_t)(here * 8)) != (ssize_t)sizeof(probe)) {
            close(pm->fd);
            pm->fd = -1;
        }
    }
    pm->source = pm->fd >= 0 ? PTMD_RESIDENCY_PAGEMAP : PTMD_RESIDENCY_MINCORE;
    return 0;
}

void ptmd_pagemap_close(ptmd_pagemap *pm)
{
    if (pm->fd >= 0) close(pm->fd);
    pm->fd = -1;
    if (pm->entries) {
        ptmd_scratch_forget(pm->entries);
        munmap(pm->entries, pm->cap * sizeof(uint64_t));
    }
    pm->entries = NULL;
}

uint8_t ptmd_pagemap_flags(uint64_t e)
{
    uint8_t f = 0;
    if (e & (1ull << 63)) f |= PTMD_PAGE_PRESENT;
    if (e & (1ull << 62)) f |= PTMD_PAGE_SWAPPED;
    if (e & (1ull << 61)) f |= PTMD_PAGE_FILE;
    if ((e & (1ull << 56)) && (e & (1ull << 63))) f |= PTMD_PAGE_EXCLUSIVE;
    return f;
}

int ptmd_pagemap_read(ptmd_pagemap *pm, uintptr_t start, size_t npages, uint8_t *out)
{
    size_t done = 0;
    if (pm->fd < 0) {
        /* mincore: one byte per page, bit 0 = resident; cannot see swap or sharing. */
        size_t i;
        if (mincore((void *)start, npages * pm->page_size, out) != 0) {
            memset(out, 0, npages);
            return -1;
        }
        for (i = 0; i < npages; i++) out[i] = (out[i] & 1) ? PTMD_PAGE_PRESENT : 0;
        return 0;
    }
    while (done < npages) {
        size_t n = npages - done < pm->cap ? npages - done : pm->cap, i;
        off_t off = (off_t)(((start / pm->page_size) + done) * 8);
        ssize_t got = pread(pm->fd, pm->entries, n * 8, off);
        if (got < 0) {
            if (errno == EINTR) continue;
            memset(out + done, 0, npages - done);
            return -1;
        }
        if (got == 0) {
            memset(out + done, 0, npages - done);
            return -1;
        }
        n = (size_t)got / 8;
        for (i = 0; i < n; i++) out[done + i] = ptmd_pagemap_flags(pm->entries[i]);
        done += n;
    }
    return 0;
}

/* ---- threads ------------------------------------------------------------------------------ */

struct ptmd_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Calls each(number, ctx) for every entry of a /proc directory whose name is a number (tasks, file
 * descriptors), read with getdents64 into a stack buffer: no allocation. Returns the count, -1 when
 * the directory cannot be opened. The directory's own descriptor is passed as dir_fd. */
static long numbered_entries(const char *path, void (*each)(long number, int dir_fd, void *ctx), void *ctx)
{
    char buf[4096] __attribute__((aligned(8)));
    long count = 0;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof(buf)), off = 0;
        if (n <= 0) break;
        while (off < n) {
            struct ptmd_dirent64 *d = (struct ptmd_dirent64 *)(void *)(buf + off);
            if (d->d_name[0] >= '0' && d->d_name[0] <= '9') {
                long v = 0;
                const char *q = d->d_name;
                while (*q >= '0' && *q <= '9') v = v * 10 + (*q++ - '0');
                each(v, fd, ctx);
                count++;
            }
            off += d->d_reclen;
        }
    }
    close(fd);
    return count;
}

typedef struct {
    int *tids;
    size_t max, n;
} tid_list;

static void add_tid(long tid, int dir_fd, void *ctx)
{
    tid_list *l = ctx;
    PTMD_UNUSED(dir_fd);
    if (l->n < l->max) l->tids[l->n] = (int)tid;
    l->n++;
}

long ptmd_list_tids(int pid, int *tids, size_t max)
{
    char path[64];
    tid_list l = { tids, max, 0 };
    int n =
        pid > 0 ? snprintf(path, sizeof(path), "/proc/%d/task", pid) : snprintf(path, sizeof(path), "/proc/self/task");
    if (n <= 0 || (size_t)n >= sizeof(path)) return -1;
    return numbered_entries(path, add_tid, &l);
}

static void close_socket(long fd, int dir_fd, void *ctx)
{
    struct stat st;
    PTMD_UNUSED(ctx);
    if (fd != dir_fd && fd <= INT32_MAX && fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode)) close((int)fd);
}

void ptmd_close_sockets(void)
{
    numbered_entries("/proc/self/fd", close_socket, NULL);
}
