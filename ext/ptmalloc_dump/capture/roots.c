/* Roots: the memory outside malloc from which a program reaches its chunks, scanned conservatively
 * (aligned words equal to an allocated chunk's user address) as chap does for cores, but in the live
 * process:
 *   - every loaded object's writable PT_LOAD segments (.data, .bss, .got), from dl_iterate_phdr (a
 *     fork snapshot's parent lists them before the fork: the child must not take the loader's lock);
 *   - every thread's stack. Other threads' registers cannot be read from inside the process and
 *     their stack pointers are unknown, so their whole stack mapping is scanned (below their static
 *     TLS); the main thread's is the [stack] mapping. The dumping thread's stack is scanned from the
 *     dump's outermost frame up, so that nothing the dump itself left on the stack counts, and its
 *     callee-saved registers as they were at the dump's entry;
 *   - every thread's static TLS and struct pthread (a window around its thread pointer), and those of
 *     threads on glibc's lists that are not running: finished ones whose stacks glibc caches for
 *     reuse, with their DTVs, and in a fork child the parent's other threads (not their stacks).
 * Ruby's object pages are not roots (they are anonymous mappings of no object), nor are the dump's
 * own scratch buffers. Free chunks are never targets, so libc's arena bins, top and tcache lists
 * (which point at free chunks only) anchor nothing. Every read is fault-free; untouched pages
 * (pagemap: neither present nor swapped) hold zeros and are skipped. */
#define _GNU_SOURCE
#include "capture/roots.h"
#include "capture/refs.h"
#include "capture/arch.h"

#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define PTMD_ROOTS_BLOCK 8192         /* words per read */
#define PTMD_ROOTS_MAX 65536          /* ranges */
#define PTMD_TLS_BELOW_MAX (1u << 20) /* static TLS from struct pthread, at most */
#if PTMD_TLS_VARIANT == 2
#define PTMD_TLS_BELOW_DEFAULT (4u << 10) /* when no module's TLS block says */
#else
#define PTMD_TLS_BELOW_DEFAULT 0 /* aarch64: nothing of the TLS lies below struct pthread, the stack does */
#endif
#define PTMD_TLS_ABOVE (4u << 10) /* struct pthread (2,304 bytes in 2.36 on x86-64) and its TCB */

typedef struct {
    ptmd_buf *out;
    uint64_t pthread;   /* the dumping thread's struct pthread, 0 when unknown */
    uint64_t tls_below; /* how far below it the static TLS blocks reach (x86-64) */
    uint64_t tls_above; /* how far above it they reach (aarch64) */
    int oom;
} phdr_ctx;

static char exe_path[PTMD_ROOT_NAME_MAX * 4];

/* The tail of a long path, so that the object's file name survives. */
static void set_name(ptmd_root_rec *r, const char *name)
{
    size_t n = strlen(name);
    if (n >= PTMD_ROOT_NAME_MAX) name += n - (PTMD_ROOT_NAME_MAX - 1);
    strncpy(r->name, name, PTMD_ROOT_NAME_MAX - 1);
    r->name[PTMD_ROOT_NAME_MAX - 1] = 0;
}

/* "<what> of thread <tid>", without snprintf */
static void set_thread_name(ptmd_root_rec *r, const char *what, uint32_t tid)
{
    char digits[12];
    size_t n = 0, at;
    do digits[n++] = (char)('0' + tid % 10);
    while ((tid /= 10) && n < sizeof(digits));
    at = strlen(what);
    memcpy(r->name, what, at);
    memcpy(r->name + at, " of thread ", 11);
    at += 11;
    while (n) r->name[at++] = digits[--n];
    r->name[at] = 0;
}

static ptmd_root_rec *push_root(ptmd_buf *b, uint64_t start, uint64_t end, uint32_t kind, uint32_t tid)
{
    ptmd_root_rec *r;
    if (end <= start || PTMD_BUF_COUNT(b, ptmd_root_rec) >= PTMD_ROOTS_MAX) return NULL;
    r = ptmd_buf_push(b, sizeof(*r));
    if (!r) return NULL;
    r->start = start & ~7ull;
    r->end = end;
    r->kind = kind;
    r->tid = tid;
    return r;
}

static ptmd_root_rec *add_root(ptmd_walk *w, uint64_t start, uint64_t end, uint32_t kind, uint32_t tid)
{
    return push_root(&w->roots, start, end, kind, tid);
}

static int each_object(struct dl_phdr_info *info, size_t size, void *data)
{
    phdr_ctx *c = data;
    const char *name = info->dlpi_name;
    int i;
    PTMD_UNUSED(size);
    /* every thread's static TLS blocks lie at the same offsets from its struct pthread (below it on
     * x86-64, above it on aarch64: capture/arch.h); the dumping thread's own blocks (dlpi_tls_data)
     * tell how far they reach */
    if (c->pthread && info->dlpi_tls_data) {
        uint64_t d = (uint64_t)(uintptr_t)info->dlpi_tls_data, e = d;
        for (i = 0; i < info->dlpi_phnum; i++)
            if (info->dlpi_phdr[i].p_type == PT_TLS) e = d + info->dlpi_phdr[i].p_memsz;
        if (d < c->pthread && c->pthread - d <= PTMD_TLS_BELOW_MAX && c->pthread - d > c->tls_below)
            c->tls_below = c->pthread - d;
        if (e > c->pthread && e - c->pthread <= PTMD_TLS_BELOW_MAX && e - c->pthread > c->tls_above)
            c->tls_above = e - c->pthread;
    }
    if (!name || !name[0]) {
        if (!exe_path[0]) {
            ssize_t n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
            if (n > 0) exe_path[n] = 0;
            else memcpy(exe_path, "[executable]", 13);
        }
        name = exe_path;
    }
    for (i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        ptmd_root_rec *r;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || !ph->p_memsz) continue;
        r = push_root(c->out, info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz,
                      PTMD_ROOT_DATA, 0);
        if (!r) {
            c->oom = PTMD_BUF_COUNT(c->out, ptmd_root_rec) < PTMD_ROOTS_MAX;
            return c->oom;
        }
        set_name(r, name);
    }
    return 0;
}

static const ptmd_map *stack_mapping(const ptmd_walk *w)
{
    const ptmd_map *m = (const ptmd_map *)(const void *)w->maps.maps.base;
    size_t i;
    for (i = 0; i < w->maps.count; i++)
        if (m[i].kind == PTMD_MAPKIND_STACK) return &m[i];
    return NULL;
}

/* The window around a struct pthread that holds it, its TCB and its static TLS, inside its stack
 * block `m`. */
static void tls_window(const ptmd_map *m, uint64_t pthread, uint64_t tls_below, uint64_t tls_above, uint64_t *lo,
                       uint64_t *hi)
{
    uint64_t above = tls_above > PTMD_TLS_ABOVE ? tls_above : PTMD_TLS_ABOVE;
    *lo = pthread - m->start > tls_below ? pthread - tls_below : m->start;
    *hi = m->end - pthread > above ? pthread + above : m->end;
}

/* A thread's DTV (tcbhead_t.dtv, at PTMD_TCB_DTV from its thread pointer) points one dtv_t (16 bytes)
 * into the block glibc calloc'd for it (elf/dl-tls.c, allocate_dtv and _dl_resize_dtv): that word
 * holds the block, as the TLS window `root` holds the word. */
static int dtv_ref(ptmd_walk *w, uint32_t root, uint64_t pthread)
{
    uint64_t dtv, where = pthread + w->lc->tp_from_pthread + PTMD_TCB_DTV;
    long ci;
    ptmd_root_ref *rr;
    if (ptmd_guarded_copy(w, where, &dtv, sizeof(dtv)) != 0 || dtv < 16 ||
        (ci = ptmd_refs_chunk_of_mem(w, dtv - 16)) < 0)
        return 0;
    if (!(rr = ptmd_buf_push(&w->root_refs, sizeof(*rr)))) return -1;
    rr->where = where;
    rr->root = root;
    rr->chunk = (uint32_t)ci;
    return 0;
}

/* The static TLS and struct pthread of each thread glibc keeps that is not running. */
static int gone_thread_roots(ptmd_walk *w, uint64_t tls_below, uint64_t tls_above)
{
    size_t i, n = PTMD_BUF_COUNT(&w->gone, uint64_t);
    for (i = 0; i < n; i++) {
        uint64_t pthread = *PTMD_BUF_AT(&w->gone, uint64_t, i), lo, hi;
        const ptmd_map *m = ptmd_maps_find(&w->maps, pthread);
        ptmd_root_rec *r;
        if (!m || m->kind == PTMD_MAPKIND_BRK) continue;
        tls_window(m, pthread, tls_below, tls_above, &lo, &hi);
        if (!(r = add_root(w, lo, hi, PTMD_ROOT_TLS, 0))) return -1;
        set_name(r, "TLS of threads not running (glibc's stack cache)");
        if (dtv_ref(w, (uint32_t)PTMD_BUF_COUNT(&w->roots, ptmd_root_rec) - 1, pthread) != 0) return -1;
    }
    return 0;
}

static int thread_roots(ptmd_walk *w, uint64_t tls_below, uint64_t tls_above)
{
    size_t i, n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    /* the process dumped: a snapshot child describes its parent */
    uint32_t pid = (uint32_t)(w->given_threads ? getppid() : getpid());
    const ptmd_map *main_stack = stack_mapping(w);
    for (i = 0; i < n; i++) {
        const ptmd_thread_rec t = *PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
        const ptmd_map *m = t.pthread ? ptmd_maps_find(&w->maps, t.pthread) : NULL;
        int current = (t.flags & PTMD_TF_CURRENT) != 0;
        uint64_t tls_lo, lo, hi;
        ptmd_root_rec *r;
        /* a thread pointer in malloc's own [heap] would make chunks roots */
        if (!m || m->kind == PTMD_MAPKIND_BRK) continue;
        tls_window(m, t.pthread, tls_below, tls_above, &tls_lo, &hi);
        if (!(r = add_root(w, tls_lo, hi, PTMD_ROOT_TLS, t.tid))) return -1;
        set_thread_name(r, "TLS", t.tid);
        if (dtv_ref(w, (uint32_t)PTMD_BUF_COUNT(&w->roots, ptmd_root_rec) - 1, t.pthread) != 0) return -1;
        if (t.tid == pid) {
            /* the main thread's stack is [stack]; its TLS was allocated by ld.so elsewhere */
            if (!main_stack) continue;
            lo = main_stack->start;
            hi = main_stack->end;
        } else {
            /* a thread's stack block holds its stack, then its static TLS and struct pthread on top */
            lo = m->start;
            hi = tls_lo;
        }
        if (current && w->caller_frame >= lo && w->caller_frame < hi) lo = w->caller_frame;
        if (!(r = add_root(w, lo, hi, PTMD_ROOT_STACK, t.tid))) continue;
        set_thread_name(r, "stack", t.tid);
        if (current) {
            uint64_t regs = (uint64_t)(uintptr_t)w->caller_regs;
            if (!(r = add_root(w, regs, regs + sizeof(w->caller_regs), PTMD_ROOT_REGISTERS, t.tid))) return -1;
            set_thread_name(r, "registers", t.tid);
        }
    }
    return gone_thread_roots(w, tls_below, tls_above);
}

/* 1 when the latest interior reference recorded is the same root's into the same chunk: one is
 * enough to hold it, and a stack frame walking a buffer holds many. */
static int inner_seen(const ptmd_walk *w, uint32_t root, uint32_t chunk)
{
    size_t n = PTMD_BUF_COUNT(&w->root_inner_refs, ptmd_root_ref);
    const ptmd_root_ref *last;
    if (!n) return 0;
    last = PTMD_BUF_AT(&w->root_inner_refs, ptmd_root_ref, n - 1);
    return last->root == root && last->chunk == chunk;
}

static int scan_words(ptmd_walk *w, uint32_t root, uint64_t at, const uint64_t *buf, uint64_t n)
{
    uint64_t k;
    for (k = 0; k < n; k++) {
        uint64_t v = buf[k];
        long ci;
        ptmd_root_ref *rr;
        if (v - w->cmap_lo >= w->cmap_span) continue;
        if ((ci = ptmd_refs_chunk_of_mem(w, v)) < 0) {
            if ((ci = ptmd_refs_chunk_inside(w, v)) < 0 || inner_seen(w, root, (uint32_t)ci)) continue;
            if (!(rr = ptmd_buf_push(&w->root_inner_refs, sizeof(*rr)))) return -1;
            rr->where = at + k * 8;
            rr->root = root;
            rr->chunk = (uint32_t)ci;
            continue;
        }
        if (!(rr = ptmd_buf_push(&w->root_refs, sizeof(*rr)))) return -1;
        rr->where = at + k * 8;
        rr->root = root;
        rr->chunk = (uint32_t)ci;
    }
    return 0;
}

/* One root, block by block: pages never touched are skipped, a block that cannot be read whole is
 * read page by page (a thread may exit and unmap its stack meanwhile). */
static int scan_root(ptmd_walk *w, uint32_t root)
{
    uint64_t buf[PTMD_ROOTS_BLOCK]; /* on the stack below the dump's outermost frame: not scanned */
    uint8_t flags[PTMD_ROOTS_BLOCK * 8 / 4096 + 2];
    const ptmd_root_rec r = *PTMD_BUF_AT(&w->roots, ptmd_root_rec, root);
    uint64_t ps = w->page_size, p = r.start;
    while (p < r.end) {
        uint64_t n = (r.end - p) / 8, first = p & ~(ps - 1), np, k, any = 0;
        if (n > PTMD_ROOTS_BLOCK) n = PTMD_ROOTS_BLOCK;
        if (!n) break;
        np = (p + n * 8 - 1 - first) / ps + 1;
        if (np > sizeof(flags)) np = sizeof(flags);
        if (r.kind == PTMD_ROOT_REGISTERS || ptmd_source_pages(&w->src, first, np, flags) != 0) any = 1;
        else
            for (k = 0; k < np; k++) any |= flags[k] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED);
        if (any) {
            if (ptmd_guarded_copy(w, p, buf, n * 8) == 0) {
                if (scan_words(w, root, p, buf, n) != 0) return -1;
            } else {
                uint64_t q = p, end = p + n * 8;
                while (q < end) {
                    uint64_t m = ((q & ~(ps - 1)) + ps < end ? (q & ~(ps - 1)) + ps : end) - q;
                    if (ptmd_guarded_copy(w, q, buf, m) == 0 && scan_words(w, root, q, buf, m / 8) != 0) return -1;
                    q += m;
                }
            }
        }
        p += n * 8;
    }
    return 0;
}

int ptmd_walk_objects(ptmd_walk *w)
{
    phdr_ctx c = { &w->objects, (uint64_t)(uintptr_t)pthread_self(), 0, 0, 0 };
    w->objects.len = 0;
    dl_iterate_phdr(each_object, &c);
    w->tls_below = c.tls_below ? c.tls_below : PTMD_TLS_BELOW_DEFAULT;
    w->tls_above = c.tls_above;
    return c.oom ? -1 : 0;
}

int ptmd_walk_roots(ptmd_walk *w, ptmd_err *err)
{
    const ptmd_buf *objects = w->given_objects;
    uint64_t tls_below = w->given_tls_below, tls_above = w->given_tls_above;
    uint32_t i, n;
    uint64_t t0 = ptmd_now_ns();
    if (!w->references) return 0;
    if (!objects) {
        if (ptmd_walk_objects(w) != 0) return ptmd_fail_sys(err, errno, "root table", "mmap");
        objects = &w->objects;
        tls_below = w->tls_below;
        tls_above = w->tls_above;
    }
    n = (uint32_t)PTMD_BUF_COUNT(objects, ptmd_root_rec);
    if (n > PTMD_ROOTS_MAX) n = PTMD_ROOTS_MAX;
    if (n && ptmd_buf_append(&w->roots, objects->base, n * sizeof(ptmd_root_rec)) != 0)
        return ptmd_fail_sys(err, errno, "root table", "mmap");
    if (!tls_below) tls_below = PTMD_TLS_BELOW_DEFAULT;
    if (thread_roots(w, (tls_below + 63) & ~63ull, (tls_above + 63) & ~63ull) != 0)
        return ptmd_fail_sys(err, errno, "root table", "mmap");
    n = (uint32_t)PTMD_BUF_COUNT(&w->roots, ptmd_root_rec);
    for (i = 0; i < n; i++)
        if (scan_root(w, i) != 0) return ptmd_fail_sys(err, errno, "root references", "mmap");
    w->roots_ns = ptmd_now_ns() - t0;
    return 0;
}
