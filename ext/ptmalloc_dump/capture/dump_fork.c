/* The fork snapshot: what the child must be given is listed in the parent before the fork; the child
 * (its Ruby pass on its copy first, if asked) writes every dump asked for of the same frozen heap and
 * exits, and the parent goes on at once. */
#define _GNU_SOURCE
#include "capture/dump_fork.h"
#include "capture/dump.h"
#include "capture/dump_rss.h"
#include "capture/residency.h"
#include "capture/roots.h"
#include "capture/ruby_heap.h"
#include "capture/source_self.h"
#include "capture/threads.h"
#include "capture/walk.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* What the child must not find for itself, listed just before the fork:
 *   - the parent's threads: in the child, glibc's fork has moved every other thread to the stack
 *     cache with its tid cleared (reclaim_stacks), so the child could find their tcaches only by
 *     structure, and a damaged one not at all;
 *   - libc's location, whether malloc is glibc's, and the loaded objects' writable segments (roots):
 *     these call dl_iterate_phdr, dlopen, dlsym and dladdr, which take the loader's locks
 *     (dl_load_write_lock, dl_load_lock). A thread of the parent inside dlopen, dl_iterate_phdr or a
 *     TLS allocation at the fork leaves them held in the child for ever: glibc 2.36's fork resets
 *     dl_load_lock alone (posix/fork.c), and nothing else the lock protects in the child;
 *   - which pages this process maps alone: after the fork the child maps every one of them too, and
 *     pagemap's exclusive bit is clear on all of them, in both.
 * The child then takes no lock another thread could have held. */
static int before_fork(ptmd_dump_state *d, const ptmd_dump_opts *opts, size_t n_opts, ptmd_err *err)
{
    const ptmd_dump_opts *o = &opts[0];
    const ptmd_libc *lc;
    size_t i;
    int ring, references = 0;
    if (ptmd_locate(o->debug_dir, o->symbols, &lc, err) != 0) return -1;
    d->w.lc = lc;
    if (!lc->layout) return 0; /* the child says that the layout is unknown */
    if (ptmd_source_self(&d->w.src, err) != 0) return -1;
    if (ptmd_check_allocator(lc, &d->w.src.mem, err) != 0) return -1;
    if ((ring = ptmd_walk_ring_before_fork(&d->w, lc)) < 0) return ptmd_fail_sys(err, errno, "arena ring", "mmap");
    if (ring > 0) {
        const ptmd_anomaly_rec *a = PTMD_BUF_AT(&d->w.anomalies, ptmd_anomaly_rec, 0);
        size_t n = PTMD_BUF_COUNT(&d->w.ring, uint64_t);
        int cycle = a->kind == PTMD_AN_ARENA_RING;
        return ptmd_fail(err, PTMD_E_HEAP,
                         "the heap is damaged: arena %#lx's next (%#lx) %s; glibc's fork locks every arena "
                         "along the ring and would never return. Dump in process (fork: false): that records "
                         "the damage and walks the %lu arena%s before it",
                         (unsigned long)PTMD_BUF_AT(&d->w.ring, uint64_t, n - 1)[0],
                         (unsigned long)(cycle ? a->detail : a->address),
                         cycle ? "leads back to an arena already on the ring, not to main_arena" : "is not an arena",
                         (unsigned long)n, n == 1 ? "" : "s");
    }
    d->w.anomalies.len = 0;
    if (ptmd_walk_threads(&d->w, err) != 0) return -1;
    for (i = 0; i < n_opts; i++) references |= opts[i].references;
    if (references && ptmd_walk_objects(&d->w) != 0) return ptmd_fail_sys(err, errno, "root table", "mmap");
    /* last, nearest the fork: which pages this process alone maps, which the child cannot tell */
    return ptmd_residency_before_fork(&d->w, err);
}

/* One line on stderr from a snapshot child whose parent does not wait for it: the error as the
 * parent would have raised it. */
static void report_failure(const char *path, const ptmd_err *e)
{
    char line[1024];
    int n;
    if (e->code == PTMD_E_SYSTEM)
        n = snprintf(line, sizeof(line), "ptmalloc_dump: snapshot process %d did not write %s: %s - %s %s\n",
                     (int)getpid(), path, strerror(e->sys_errno), e->msg, e->path);
    else
        n = snprintf(line, sizeof(line), "ptmalloc_dump: snapshot process %d did not write %s: %s\n", (int)getpid(),
                     path, e->msg);
    if (n > 0) {
        ssize_t k = write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        PTMD_UNUSED(k);
    }
}

/* The snapshot child's Ruby pass, on its copy, after its parent's mappings (which should lag the fork
 * as little as they can). A pass that cannot see every object leaves the dump without Ruby data, and
 * says why in the strings where the parent's would say it was recorded. */
static void child_ruby_pass(ptmd_dump_state *d)
{
    d->ruby.page_size = ptmd_ruby_heap_page_size();
    if (ptmd_ruby_pass_in_copy(&d->ruby, d->ruby_problem, sizeof(d->ruby_problem)) != 0) {
        ptmd_ruby_data empty;
        memset(&empty, 0, sizeof(empty));
        empty.page_size = d->ruby.page_size;
        d->ruby = empty; /* what the pass had mapped goes with the child */
        d->snap.flags &= ~(uint32_t)PTMD_SNF_RUBY_IN_CHILD;
    }
}

int ptmd_dump_fork(ptmd_dump_state *d, const ptmd_dump_opts *opts, size_t n_opts, int ruby_in_child, int *pid_out,
                   int *errfd_out, ptmd_err *err)
{
    int fds[2];
    pid_t pid;
    int parent = (int)getpid();
    uint64_t t_fork;
    if (before_fork(d, opts, n_opts, err) != 0) return -1;
    if (pipe2(fds, O_CLOEXEC) != 0) return ptmd_fail_sys(err, errno, "pipe", "cannot create a pipe for the snapshot");
    if (ruby_in_child) d->snap.flags |= PTMD_SNF_RUBY_IN_CHILD;
    t_fork = ptmd_now_ns();
    d->snap.before_fork_ns = t_fork - d->snap_start;
    /* glibc's fork takes every arena lock around the fork: the child's heap is one consistent state */
    pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return ptmd_fail_sys(err, e, "fork", "cannot fork the snapshot process");
    }
    if (pid == 0) {
        size_t i;
        int rc = 0;
        d->snap.fork_ns = ptmd_now_ns() - t_fork;
        ptmd_close_sockets();
        close(fds[0]);
        signal(SIGPIPE, SIG_IGN);
        ptmd_dump_parent_mappings(&d->mappings, parent);
        if (ruby_in_child) child_ruby_pass(d);
        /* several dumps of the same frozen heap, one after the other: nothing runs in between */
        for (i = 0; i < n_opts && rc == 0; i++) {
            ptmd_dump_opts co = opts[i];
            ptmd_dump_state di;
            ptmd_err cerr;
            ptmd_dump_init(&di);
            di.ruby = d->ruby; /* recorded once for every target, shared read-only */
            di.snap = d->snap;
            di.has_snapshot = 1;
            memcpy(di.ruby_problem, d->ruby_problem, sizeof(di.ruby_problem));
            di.parent = &d->w;
            di.parent_mappings = &d->mappings;
            co.fork_child = 1;
            memset(&cerr, 0, sizeof(cerr));
            rc = ptmd_dump_run(&di, &co, &cerr);
            if (rc != 0) {
                ssize_t k = write(fds[1], &cerr, sizeof(cerr));
                PTMD_UNUSED(k);
                if (co.report_stderr) report_failure(co.path, &cerr);
            }
        }
        _exit(rc == 0 ? 0 : 1);
    }
    close(fds[1]);
    *pid_out = (int)pid;
    *errfd_out = fds[0];
    return 0;
}
