/* Thread enumeration without debug info for ld.so: from our own struct pthread (pthread_self ()) along
 * its `list` links to the list head, and from there to the neighbouring list (glibc 2.34+ keeps
 * _dl_stack_used and _dl_stack_user adjacent in _rtld_global). A struct pthread is recognised by its
 * self pointers (x86-64: header.tcb and header.self) or its robust-mutex list (aarch64, whose header
 * is padding: capture/arch.h); live threads have tid > 0. Every read goes through the fault-free
 * reader: stacks of exiting threads may be unmapped at any time. */
#define _GNU_SOURCE
#include "capture/threads.h"
#include "capture/arch.h"

#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PTMD_MAX_THREADS 100000
#define PTMD_MAX_TIDS 4096

/* 1 when a thread's `tcache` value v stands for "no tcache": glibc 2.43's __tcache_dummy (.inactive
 * or .disabled), an all-zero struct in libc's image that no list starts from. */
static int tcache_is_dummy(ptmd_walk *w, uint64_t v)
{
    const ptmd_layout *L = w->L;
    const ptmd_libc *lc = w->lc;
    unsigned char raw[PTMD_TCACHE_STRUCT_MAX];
    size_t i;
    if (!L->tcache_dummy || !v) return 0;
    /* tcache_inactive () and tcache_disabled (): &__tcache_dummy.inactive, &__tcache_dummy.disabled
     * (after a char pad, so 8 bytes on) */
    if (lc->tcache_dummy) return v == lc->tcache_dummy || v == lc->tcache_dummy + 8;
    if (v < lc->image_start || v >= lc->image_end || L->tcache_struct_size > lc->image_end - v ||
        L->tcache_struct_size > sizeof(raw))
        return 0;
    if (ptmd_guarded_copy(w, v, raw, L->tcache_struct_size) != 0) return 0;
    for (i = 0; i < L->tcache_struct_size; i++)
        if (raw[i]) return 0;
    return 1;
}

uint64_t ptmd_thread_tcache(ptmd_walk *w, uint64_t pthread, long tc_off)
{
    uint64_t v = 0;
    if (!pthread || tc_off < 0) return 0;
    if (ptmd_guarded_copy(w, pthread - w->lc->tls_offset + (uint64_t)tc_off, &v, sizeof(v)) != 0) return 0;
    return tcache_is_dummy(w, v) ? 0 : v;
}

static int rd(ptmd_walk *w, uint64_t addr, uint64_t *out)
{
    return ptmd_guarded_copy(w, addr, out, sizeof(*out));
}

int ptmd_is_pthread(ptmd_walk *w, uint64_t base)
{
#if PTMD_TLS_VARIANT == 2
    uint64_t tcb, self;
    return rd(w, base, &tcb) == 0 && rd(w, base + 16, &self) == 0 && tcb == base && self == base;
#else
    uint64_t fo;
    return rd(w, base + w->L->pthread_list + PTMD_PTHREAD_FUTEX_OFFSET_FROM_LIST, &fo) == 0 &&
           fo == PTMD_PTHREAD_FUTEX_OFFSET;
#endif
}

int32_t ptmd_pthread_tid(ptmd_walk *w, uint64_t base, size_t list_off)
{
    int32_t tid;
    if (ptmd_guarded_copy(w, base + list_off + 16, &tid, sizeof(tid)) != 0) return 0;
    return tid;
}

/* Finds list_t's offset in our own struct pthread: the pid_t after it holds our tid and the links agree. */
static size_t find_list_off(ptmd_walk *w, uint64_t self)
{
    int32_t want = (int32_t)syscall(SYS_gettid);
    size_t off, cand[2] = { w->L->pthread_list, 0 };
    int pass;
    for (pass = 0; pass < 2; pass++) {
        for (off = pass ? 24 : cand[0]; pass ? off < 0x1000 : off == cand[0]; off += 8) {
            uint64_t next, prev, back;
            if (ptmd_pthread_tid(w, self, off) != want) continue;
            if (rd(w, self + off, &next) || rd(w, self + off + 8, &prev)) continue;
            if (rd(w, next + 8, &back) || back != self + off) continue;
            if (rd(w, prev, &back) || back != self + off) continue;
            return off;
        }
    }
    return 0;
}

/* A list head: empty (points at itself) or linked both ways to a struct pthread. */
static int is_list_head(ptmd_walk *w, uint64_t head, size_t list_off)
{
    uint64_t next, prev, back;
    if (!head || rd(w, head, &next) || rd(w, head + 8, &prev)) return 0;
    if (next == head && prev == head) return 1;
    if (rd(w, next + 8, &back) || back != head || rd(w, prev, &back) || back != head) return 0;
    return ptmd_is_pthread(w, next - list_off);
}

static int push_thread(ptmd_walk *w, uint64_t base, int32_t tid, uint32_t flags)
{
    const ptmd_libc *lc = w->lc;
    uint64_t block = base - lc->tls_offset, v;
    ptmd_thread_rec *t = ptmd_buf_push(&w->threads, sizeof(*t));
    if (!t) return -1;
    t->pthread = base;
    t->tid = (uint32_t)tid;
    t->flags = flags;
    t->tcache = ptmd_thread_tcache(w, base, lc->tcache_tls);
    if (t->tcache) t->flags |= PTMD_TF_TLS;
    if (lc->thread_arena_tls >= 0 && rd(w, block + (uint64_t)lc->thread_arena_tls, &v) == 0) t->arena = v;
    return 0;
}

/* Walks the circular list through `start` (a node), appending live threads, and the descriptors of
 * those that are not running (tid 0: finished, or left behind by fork) to w->gone; returns the head
 * node (the one member that is no struct pthread), or 0 when the list is not well formed. */
static uint64_t walk_list(ptmd_walk *w, uint64_t start, size_t list_off, uint64_t self)
{
    uint64_t node = start, head = 0;
    size_t steps = 0, mark = w->threads.len, gone_mark = w->gone.len;
    do {
        uint64_t base = node - list_off, next, back, *g;
        if (++steps > PTMD_MAX_THREADS || rd(w, node, &next) || rd(w, next + 8, &back) || back != node) goto bad;
        if (ptmd_is_pthread(w, base)) {
            int32_t tid = ptmd_pthread_tid(w, base, list_off);
            if (tid > 0) {
                if (push_thread(w, base, tid, base == self ? PTMD_TF_CURRENT : 0) != 0) goto bad;
            } else {
                if (!(g = ptmd_buf_push(&w->gone, sizeof(*g)))) goto bad;
                *g = base;
            }
        } else {
            if (head) goto bad; /* two non-thread nodes: a list being changed under us */
            head = node;
        }
        node = next;
    } while (node != start);
    if (head) return head;
bad:
    w->threads.len = mark;
    w->gone.len = gone_mark;
    return 0;
}

/* Before glibc 2.34 the thread lists (stack_used, __stack_user) are libpthread's own data. */
typedef struct {
    uint64_t start[4], end[4];
    int n;
} rw_segments;

static int libpthread_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    rw_segments *seg = data;
    const char *name = info->dlpi_name, *slash;
    int i;
    PTMD_UNUSED(size);
    if (!name || !*name) return 0;
    slash = strrchr(name, '/');
    if (strncmp(slash ? slash + 1 : name, "libpthread.so", 13) != 0) return 0;
    for (i = 0; i < info->dlpi_phnum && seg->n < 4; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
        seg->start[seg->n] = info->dlpi_addr + ph->p_vaddr;
        seg->end[seg->n] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        seg->n++;
    }
    return 1;
}

/* Walks every other non-empty thread list head found in libpthread's writable data. */
static void walk_libpthread_lists(ptmd_walk *w, uint64_t known_head, size_t list_off, uint64_t self)
{
    rw_segments seg;
    int i;
    memset(&seg, 0, sizeof(seg));
    dl_iterate_phdr(libpthread_cb, &seg);
    for (i = 0; i < seg.n; i++) {
        uint64_t a;
        for (a = (seg.start[i] + 7) & ~7ull; a + 16 <= seg.end[i]; a += 8) {
            uint64_t first;
            if (a == known_head || !is_list_head(w, a, list_off)) continue;
            if (rd(w, a, &first) == 0 && first != a) walk_list(w, first, list_off, self);
        }
    }
}

static int thread_listed(ptmd_walk *w, int tid)
{
    size_t i, n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    for (i = 0; i < n; i++)
        if ((int)PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i)->tid == tid) return 1;
    return 0;
}

/* The threads a fork snapshot's parent listed: their TLS is read again here, in the child's copy. */
static int collect_given(ptmd_walk *w, uint64_t self)
{
    size_t i, n = PTMD_BUF_COUNT(w->given_threads, ptmd_thread_rec);
    for (i = 0; i < n; i++) {
        const ptmd_thread_rec *t = PTMD_BUF_AT(w->given_threads, ptmd_thread_rec, i);
        if (t->pthread && push_thread(w, t->pthread, (int32_t)t->tid, t->pthread == self ? PTMD_TF_CURRENT : 0) != 0)
            return -1;
    }
    if (w->given_gone && w->given_gone->len && ptmd_buf_append(&w->gone, w->given_gone->base, w->given_gone->len) != 0)
        return -1;
    w->thread_count = w->given_thread_count;
    w->threads_complete = w->given_threads_complete;
    return 0;
}

/* Another process: its threads as they were stopped, each one's struct pthread at its thread pointer
 * less tp_from_pthread (capture/arch.h), recognised like any other. */
static int collect_target(ptmd_walk *w, int n_tids, const int *tids, const uint64_t *tp)
{
    int i, found = 0;
    for (i = 0; i < n_tids; i++) {
        uint64_t base = tp[i] - w->lc->tp_from_pthread;
        if (!tp[i] || !ptmd_is_pthread(w, base)) continue;
        if (push_thread(w, base, tids[i], 0) != 0) return -1;
        found++;
    }
    w->thread_count = (uint32_t)n_tids;
    w->threads_complete = found == n_tids;
    return 0;
}

static int collect(ptmd_walk *w)
{
    static int tids[PTMD_MAX_TIDS];
    uint64_t self, head, other = 0;
    size_t list_off;
    long ntids, i;
    int found = 0, held;
    const int *held_tids;
    const uint64_t *held_thread_ptr;

    if ((held = ptmd_source_threads(&w->src, &held_tids, &held_thread_ptr)) >= 0)
        return collect_target(w, held, held_tids, held_thread_ptr);

    self = (uint64_t)(uintptr_t)pthread_self();
    if (w->given_threads) return collect_given(w, self);
    ntids = ptmd_list_tids(0, tids, PTMD_MAX_TIDS);
    w->thread_count = ntids > 0 ? (uint32_t)ntids : 0;
    w->threads_complete = 0;

    list_off = ptmd_is_pthread(w, self) ? find_list_off(w, self) : 0;
    head = list_off ? walk_list(w, self + list_off, list_off, self) : 0;
    if (!head) {
        /* not even our own list is readable: record ourselves alone */
        int32_t tid = (int32_t)syscall(SYS_gettid);
        w->threads.len = 0;
        if (push_thread(w, self, tid, PTMD_TF_CURRENT) != 0) return -1;
    } else if (w->L->thread_lists_in_rtld) {
        /* _rtld_global: _dl_stack_used, _dl_stack_user, _dl_stack_cache are adjacent list_t's.
         * The main thread is always on _dl_stack_user; otherwise a valid list 32 bytes on means we
         * stand on _dl_stack_used (its +32 is the cache; _dl_stack_user's +32 holds counters). */
        int on_user = (pid_t)syscall(SYS_gettid) == getpid() || !is_list_head(w, head + 32, list_off);
        uint64_t lists[2], first;
        other = on_user ? head - 16 : head + 16;
        lists[0] = other;
        lists[1] = (on_user ? other : head) + 32; /* the cache: finished threads' stacks */
        for (i = 0; i < 2; i++)
            if (is_list_head(w, lists[i], list_off) && rd(w, lists[i], &first) == 0 && first != lists[i])
                walk_list(w, first, list_off, self);
    } else {
        /* before 2.34 the other lists (the other of stack_used and __stack_user, and stack_cache)
         * are in libpthread's data */
        walk_libpthread_lists(w, head, list_off, self);
    }
    /* threads still not found (a list changing under us) are covered by the structural tcache scan */
    if (ntids > 0 && ntids <= PTMD_MAX_TIDS) {
        for (i = 0; i < ntids; i++) found += thread_listed(w, tids[i]);
        w->threads_complete = found == ntids && (long)PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec) == ntids;
    }
    return 0;
}

int ptmd_walk_threads(ptmd_walk *w, ptmd_err *err)
{
    if (!w->L->tcache_bins) return 0;
    if (collect(w) != 0) return ptmd_fail_sys(err, errno, "thread table", "mmap");
    return 0;
}
