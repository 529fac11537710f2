/* The memory sources of a walk. This process is read directly (fault-free where memory may vanish).
 * Another process is stopped thread by thread with PTRACE_SEIZE and PTRACE_INTERRUPT (no signal is
 * sent to it, so its own signal handling is undisturbed), the mappings the walk reads are copied with
 * process_vm_readv into mmapped regions, and it is detached at once, on every path out: the walk then
 * reads the copy. A core file's segments are such regions in place, mapped from the file; its notes
 * give the threads, the pid and the mapped files. Every offset and length read from a core is checked
 * against the file before it is used. */
#define _GNU_SOURCE
#include "capture/source.h"

#include <errno.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/mman.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PTMD_ATTACH_ROUNDS 64
#define PTMD_STOP_WAIT_NS (2ull * 1000 * 1000 * 1000)

static void source_init(ptmd_source *s, ptmd_source_kind kind, int pid)
{
    long ps = sysconf(_SC_PAGESIZE);
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->pid = pid;
    s->mem.mem_fd = -1;
    s->page_size = ps > 0 ? (size_t)ps : 4096;
}

int ptmd_source_self(ptmd_source *s, ptmd_err *err)
{
    source_init(s, PTMD_SOURCE_SELF, (int)getpid());
    return ptmd_memreader_open(&s->mem, err);
}

static void *map_zeroed(size_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int read_small(const char *path, char *buf, size_t cap)
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

/* Why ptrace was refused, in words the user can act on. */
static int permission_error(int pid, int e, ptmd_err *err)
{
    char scope[16] = "", status[4096] = "", path[64];
    const char *uid_line, *tracer;
    unsigned long ruid = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    read_small("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope));
    if (read_small(path, status, sizeof(status)) != 0 || strstr(status, "\nState:\tZ") || strstr(status, "\nState:\tX"))
        return ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being stopped", pid);
    if ((tracer = strstr(status, "\nTracerPid:")) != NULL && strtoul(tracer + 11, NULL, 10) != 0)
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "process %d is already traced by process %lu (a debugger or a tracer), and a process has "
                         "one tracer at a time: detach it first", pid, strtoul(tracer + 11, NULL, 10));
    if ((uid_line = strstr(status, "\nUid:")) != NULL) ruid = strtoul(uid_line + 5, NULL, 10);
    if (geteuid() != 0 && ruid != geteuid())
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "process %d belongs to uid %lu, not to this user (uid %lu): run ptmalloc-dump as that "
                         "user or as root", pid, ruid, (unsigned long)geteuid());
    if (scope[0] >= '1' && scope[0] <= '3' && geteuid() != 0)
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "Yama's ptrace_scope is %c: only a parent may trace its child. Run as root (with "
                         "CAP_SYS_PTRACE), or set it to 0: sysctl kernel.yama.ptrace_scope=0", scope[0]);
    if (scope[0] == '3')
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "Yama's ptrace_scope is 3: no process may be traced until the next reboot");
    return ptmd_fail(err, PTMD_E_PTRACE,
                     "ptrace of process %d was refused (%s): in a container, add the capability "
                     "(docker run --cap-add=SYS_PTRACE) or run in the target's container as its user",
                     pid, strerror(e));
}

static int seized(const ptmd_source *s, int tid)
{
    int i;
    for (i = 0; i < s->n_tids; i++)
        if (s->tids[i] == tid) return 1;
    return 0;
}

/* The state letter of thread tid of pid (/proc/PID/task/TID/stat, after the command's last ')'), or 0. */
static char task_state(int pid, int tid)
{
    char path[64], buf[512];
    const char *p;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
    if (read_small(path, buf, sizeof(buf)) != 0 || !(p = strrchr(buf, ')')) || p[1] != ' ') return 0;
    return p[2];
}

/* Waits for the interrupt's stop of tid; other stops seen first (a signal delivery) are let through
 * with their signal. Polled, so that a stop that never comes costs a bounded wait, not a hang.
 * Another thread of this process that waits for the target (a Ruby thread waiting for its child, as
 * Process.detach and Open3 do) may take the stop's notification instead of us (waitpid(2): any
 * thread of the tracer's group may): a thread the kernel shows in a tracing stop ('t') is stopped.
 * 0 when stopped, -1 when the thread is gone, -2 when it did not stop in time. */
static int wait_stopped(int pid, int tid)
{
    uint64_t deadline = ptmd_now_ns() + PTMD_STOP_WAIT_NS;
    struct timespec nap = { 0, 50 * 1000 };
    unsigned polls = 0;
    while (ptmd_now_ns() < deadline) {
        int st;
        pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            if (++polls % 20 == 0 && task_state(pid, tid) == 't') return 0;
            nanosleep(&nap, NULL);
            continue;
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) return -1;
        if (!WIFSTOPPED(st)) continue;
        if ((st >> 16) == PTRACE_EVENT_STOP) return 0;
        /* a signal-delivery stop: deliver it, the interrupt is still pending */
        if (ptrace(PTRACE_CONT, tid, NULL, (void *)(uintptr_t)WSTOPSIG(st)) != 0) return -1;
    }
    return -2;
}

int ptmd_source_attach(ptmd_source *s, int pid, ptmd_err *err)
{
    int round, tids[PTMD_SOURCE_MAX_TASKS];
    source_init(s, PTMD_SOURCE_PID, pid);
    s->tids = map_zeroed(PTMD_SOURCE_MAX_TASKS * (sizeof(int) + sizeof(uint64_t)));
    if (!s->tids) return ptmd_fail_sys(err, errno, "thread table", "mmap");
    s->fs_base = (uint64_t *)(void *)(s->tids + PTMD_SOURCE_MAX_TASKS);
    if (pid <= 0) return ptmd_fail(err, PTMD_E_ARGUMENT, "not a process id: %d", pid);
    if (pid == (int)getpid())
        return ptmd_fail(err, PTMD_E_ARGUMENT, "process %d is this process: dump it in process instead", pid);
    /* threads may be created while the others are being stopped: list again until a round finds
     * no new one (all already seized threads are stopped, so only the unstopped can add more) */
    for (round = 0; round < PTMD_ATTACH_ROUNDS; round++) {
        long i, kept, first, n = ptmd_list_tids(pid, tids, PTMD_SOURCE_MAX_TASKS);
        int added = 0;
        if (n < 0) {
            if (s->n_tids) ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being stopped", pid);
            else ptmd_fail(err, PTMD_E_TARGET, "no process %d", pid);
            goto fail;
        }
        if (n > PTMD_SOURCE_MAX_TASKS) {
            ptmd_fail(err, PTMD_E_TARGET, "process %d has %ld threads, more than the %d this tool stops", pid, n,
                      PTMD_SOURCE_MAX_TASKS);
            goto fail;
        }
        first = s->n_tids;
        /* interrupt all the new threads first, then wait for them: their stops overlap */
        for (i = 0; i < n; i++) {
            if (seized(s, tids[i])) continue;
            if (ptrace(PTRACE_SEIZE, tids[i], NULL, NULL) != 0) {
                int e = errno;
                if (e == ESRCH) continue;       /* the thread ended meanwhile */
                if (e == EPERM) permission_error(pid, e, err);
                else ptmd_fail_sys(err, e, "ptrace", "PTRACE_SEIZE of a thread of the target");
                goto fail;
            }
            s->tids[s->n_tids++] = tids[i];
            s->n_seized = s->n_tids;
            added = 1;
            if (!s->stopped_ns) s->stopped_ns = ptmd_now_ns();
            ptrace(PTRACE_INTERRUPT, tids[i], NULL, NULL);
        }
        for (i = kept = first; i < s->n_tids; i++) {
            int w = wait_stopped(pid, s->tids[i]);
            if (w == -2) {
                /* in an uninterruptible sleep (a disk, a network file system): the others would stay
                 * stopped for as long as it lasts. A tracee that is not stopped cannot be detached
                 * (ptrace(2), PTRACE_DETACH): this one stays traced by this process, which lets it go
                 * when it exits (ptmalloc-dump at once), and would stop when it wakes before that. */
                ptmd_fail(err, PTMD_E_STOP, "thread %d of process %d did not stop within %llu s (it sleeps "
                          "uninterruptibly, on a disk or a network file system perhaps); nothing was read and "
                          "every thread runs again", s->tids[i], pid, PTMD_STOP_WAIT_NS / 1000000000ull);
                goto fail;
            }
            if (w != 0) {
                /* gone between the seize and the stop: it is no thread to read any more */
                ptrace(PTRACE_DETACH, s->tids[i], NULL, NULL);
                continue;
            }
            s->tids[kept++] = s->tids[i];
        }
        s->n_tids = s->n_seized = (int)kept;
        if (!added) {
            if (!s->n_tids) {
                ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being stopped", pid);
                goto fail;
            }
            /* each thread's thread pointer: its struct pthread, TLS and tcache */
            for (i = 0; i < s->n_tids; i++) {
                struct user_regs_struct regs;
                s->fs_base[i] = ptrace(PTRACE_GETREGS, s->tids[i], NULL, &regs) == 0 ? regs.fs_base : 0;
            }
            return 0;
        }
    }
    ptmd_fail(err, PTMD_E_TARGET, "process %d kept creating threads while it was being stopped", pid);
fail:
    ptmd_source_release(s);
    return -1;
}

/* The parent of process pid (/proc/PID/stat's ppid, after the command's last ')'), 0 when unknown. */
static int parent_of(int pid)
{
    char path[64], buf[512];
    const char *p;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (read_small(path, buf, sizeof(buf)) != 0 || !(p = strrchr(buf, ')')) || p[1] != ' ' || !p[2] || p[3] != ' ')
        return 0;
    return (int)strtol(p + 4, NULL, 10);
}

int ptmd_source_gone(const ptmd_source *s)
{
    char path[64], status[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", s->pid);
    if (read_small(path, status, sizeof(status)) != 0) return 1;
    /* a process whose memory is gone (exit_mm done) has no Vm lines, though it may not be a zombie yet */
    return strstr(status, "\nState:\tZ") || strstr(status, "\nState:\tX") || !strstr(status, "\nVmSize:");
}

/* Threads of a target that exited while they were seized cannot be detached (ptrace(2): a tracee that
 * is not stopped): each stays a zombie of this process, its tracer, until reaped here, and the thread
 * group's leader cannot be reaped by its parent before them (kernel/exit.c, delay_group_leader). The
 * leader is reaped here too unless this process is its parent: then the parent's own wait takes it
 * (as the tracer's would: wait_task_zombie), and its status is left to that wait. Bounded. */
static void reap_exited(ptmd_source *s, const unsigned char *dead)
{
    uint64_t deadline = ptmd_now_ns() + PTMD_STOP_WAIT_NS;
    struct timespec nap = { 0, 1000 * 1000 };
    int i, pass, own_child = parent_of(s->pid) == (int)getpid();
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < s->n_seized; i++) {
            int tid = s->tids[i], st;
            if (!dead[i] || (pass == 0) != (tid != s->pid) || (tid == s->pid && own_child)) continue;
            for (;;) {
                pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
                if (r == tid && (WIFEXITED(st) || WIFSIGNALED(st))) break;
                if (r < 0 && errno != EINTR) break;     /* ECHILD: reaped already, by another waiter */
                if (ptmd_now_ns() >= deadline) return;
                if (r == 0) nanosleep(&nap, NULL);
            }
        }
}

void ptmd_source_detach(ptmd_source *s)
{
    static unsigned char dead[PTMD_SOURCE_MAX_TASKS];     /* one detach at a time (dump_busy) */
    int i, any = 0;
    if (s->kind != PTMD_SOURCE_PID || !s->n_seized) return;
    for (i = 0; i < s->n_seized; i++) {
        dead[i] = ptrace(PTRACE_DETACH, s->tids[i], NULL, NULL) != 0 && errno == ESRCH;
        any |= dead[i];
    }
    if (s->stopped_ns) s->pause_ns = ptmd_now_ns() - s->stopped_ns;
    if (any && ptmd_source_gone(s)) reap_exited(s, dead);
    s->n_seized = 0;
}

void ptmd_source_test_kill(const ptmd_source *s, const char *step)
{
    const char *want = getenv("PTMALLOC_DUMP_TEST_KILL_TARGET");
    uint64_t deadline = ptmd_now_ns() + PTMD_STOP_WAIT_NS;
    struct timespec nap = { 0, 1000 * 1000 };
    if (s->kind != PTMD_SOURCE_PID || !want || strcmp(want, step) != 0) return;
    kill(s->pid, SIGKILL);
    while (!ptmd_source_gone(s) && ptmd_now_ns() < deadline) nanosleep(&nap, NULL);
}

int ptmd_source_read_live(const ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    struct iovec local = { dst, len }, remote = { (void *)(uintptr_t)addr, len };
    if (len == 0) return 0;
    if (addr + len < addr) return -1;
    return process_vm_readv(s->pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* ---- the copy ----------------------------------------------------------------------------- */

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
#define MADV_POPULATE_WRITE 23          /* Linux 5.14 */
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
    if (!(entries = map_zeroed(batch * sizeof(uint64_t)))) {
        close(fd);
        return;
    }
    for (k = 0; k < sp->n; k++) {
        ptmd_region *r = PTMD_BUF_AT(&sp->regions, ptmd_region, k);
        r->local = map_zeroed(r->end - r->start);
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
                if (run) populate(r->local + (m->start - r->start) + (done + j - run) * page_size, run * page_size, page_size);
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
        p = r->end - r->start == end - start ? r->local : mremap(r->local, r->end - r->start, end - start, MREMAP_MAYMOVE);
        if (p == MAP_FAILED) break;
        r->local = NULL;
        return p;
    }
    return map_zeroed(end - start);
}

int ptmd_source_copy(ptmd_source *s, ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi, ptmd_copy_spare *spare,
                     ptmd_err *err)
{
    static copy_batch b;            /* one copy at a time (dump_busy); 20 KiB, kept off the stack */
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
    entries = map_zeroed(batch * sizeof(uint64_t));
    if (!entries) { ptmd_fail_sys(err, errno, "copy of the target", "mmap"); goto out; }
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
        r->pages = map_zeroed(np);
        if (!r->local || !r->pages) { ptmd_fail_sys(err, errno, "copy of the target", "mmap"); goto out; }
        while (done < np) {
            size_t n = np - done < batch ? np - done : batch, j;
            ssize_t got = pread(fd, entries, n * 8, (off_t)((r->start / s->page_size + done) * 8));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) { ptmd_fail_sys(err, got < 0 ? errno : EIO, path, "read"); goto out; }
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
            for (q = p + s->page_size; q < m->end && (r->pages[(q - r->start) / s->page_size] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED));)
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
    return rc;
}

void ptmd_source_release(ptmd_source *s)
{
    size_t k;
    ptmd_source_detach(s);
    for (k = 0; k < s->n_regions; k++) {
        ptmd_region *r = PTMD_BUF_AT(&s->regions, ptmd_region, k);
        if (r->local && !s->core) munmap(r->local, r->end - r->start);
        if (r->pages) munmap(r->pages, (r->end - r->start) / s->page_size ? (r->end - r->start) / s->page_size : 1);
    }
    ptmd_buf_release(&s->regions);
    if (s->core) munmap((void *)s->core, s->core_size);
    s->core = NULL;
    s->nt_file = NULL;
    if (s->tids) munmap(s->tids, PTMD_SOURCE_MAX_TASKS * (sizeof(int) + sizeof(uint64_t)));
    s->tids = NULL;
    s->fs_base = NULL;
    s->n_tids = 0;
    s->n_regions = 0;
    s->last = 0;
    ptmd_memreader_close(&s->mem);
}

/* ---- a core file --------------------------------------------------------------------------- */

#define PTMD_NT_FILE 0x46494c45     /* "FILE": the mapped files (linux/elf.h) */

/* The notes of a PT_NOTE segment: threads and fs_base (NT_PRSTATUS, main thread's first when the
 * kernel wrote it; gcore puts the current thread first), pid (NT_PRPSINFO), files (NT_FILE). */
static int core_notes(ptmd_source *s, const unsigned char *p, size_t len, const char *path, ptmd_err *err)
{
    const size_t fs_index = offsetof(struct user_regs_struct, fs_base) / sizeof(unsigned long long);
    const size_t sp_index = offsetof(struct user_regs_struct, rsp) / sizeof(unsigned long long);
    size_t off = 0;
    while (len - off >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr nh;
        size_t name_off, desc_off, namesz, descsz;
        memcpy(&nh, p + off, sizeof(nh));
        namesz = ((size_t)nh.n_namesz + 3) & ~(size_t)3;
        descsz = ((size_t)nh.n_descsz + 3) & ~(size_t)3;
        name_off = off + sizeof(nh);
        if (namesz > len - name_off || nh.n_descsz > len - name_off - namesz)
            return ptmd_fail(err, PTMD_E_CORE, "core file %s: a note runs past its segment", path);
        desc_off = name_off + namesz;
        if (nh.n_type == NT_PRSTATUS && nh.n_descsz >= sizeof(struct elf_prstatus)) {
            struct elf_prstatus st;
            memcpy(&st, p + desc_off, sizeof(st));
            if (s->n_tids < PTMD_SOURCE_MAX_TASKS) {
                s->tids[s->n_tids] = st.pr_pid;
                s->fs_base[s->n_tids] = st.pr_reg[fs_index];
                s->n_tids++;
                if (st.pr_pid == s->pid || !s->main_sp) s->main_sp = st.pr_reg[sp_index];
            }
        } else if (nh.n_type == NT_PRPSINFO && nh.n_descsz >= sizeof(struct elf_prpsinfo)) {
            struct elf_prpsinfo ps;
            memcpy(&ps, p + desc_off, sizeof(ps));
            s->pid = ps.pr_pid;
            s->ppid = ps.pr_ppid;
        } else if (nh.n_type == PTMD_NT_FILE && nh.n_descsz >= 16) {
            s->nt_file = p + desc_off;
            s->nt_file_len = nh.n_descsz;
        }
        if (descsz > len - desc_off) break;
        off = desc_off + descsz;
    }
    return 0;
}

int ptmd_source_core_file(const ptmd_source *s, size_t i, uint64_t *start, uint64_t *end, uint64_t *offset,
                          const char **path)
{
    uint64_t count, page, e[3];
    const char *name, *stop;
    size_t k;
    if (!s->nt_file) return -1;
    memcpy(&count, s->nt_file, 8);
    memcpy(&page, s->nt_file + 8, 8);
    if (i >= count || count > (s->nt_file_len - 16) / 24) return -1;
    memcpy(e, s->nt_file + 16 + i * 24, sizeof(e));
    name = (const char *)s->nt_file + 16 + count * 24;
    stop = (const char *)s->nt_file + s->nt_file_len;
    for (k = 0; k < i && name < stop; k++) {
        const char *z = memchr(name, 0, (size_t)(stop - name));
        if (!z) return -1;
        name = z + 1;
    }
    if (name >= stop || !memchr(name, 0, (size_t)(stop - name))) return -1;
    *start = e[0];
    *end = e[1];
    *offset = e[2] * page;
    *path = name;
    return 0;
}

static int core_file_backed(const ptmd_source *s, uint64_t lo, uint64_t hi)
{
    uint64_t start, end, offset;
    const char *path;
    size_t i;
    for (i = 0; ptmd_source_core_file(s, i, &start, &end, &offset, &path) == 0; i++)
        if (start < hi && end > lo) return 1;
    return 0;
}

int ptmd_source_open_core(ptmd_source *s, const char *path, ptmd_maps *maps, ptmd_err *err)
{
    const Elf64_Ehdr *eh;
    struct stat st;
    size_t i;
    int fd;
    source_init(s, PTMD_SOURCE_CORE, 0);
    s->tids = map_zeroed(PTMD_SOURCE_MAX_TASKS * (sizeof(int) + sizeof(uint64_t)));
    if (!s->tids) return ptmd_fail_sys(err, errno, "thread table", "mmap");
    s->fs_base = (uint64_t *)(void *)(s->tids + PTMD_SOURCE_MAX_TASKS);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return ptmd_fail_sys(err, errno, path, "open");
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return ptmd_fail(err, PTMD_E_CORE, "%s is no core file: too short for an ELF header", path);
    }
    s->core = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (s->core == MAP_FAILED) {
        s->core = NULL;
        return ptmd_fail_sys(err, errno, path, "mmap");
    }
    s->core_size = (size_t)st.st_size;
    eh = (const Elf64_Ehdr *)(const void *)s->core;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_type != ET_CORE)
        return ptmd_fail(err, PTMD_E_CORE, "%s is no core file (not an ELF core)", path);
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_machine != EM_X86_64)
        return ptmd_fail(err, PTMD_E_CORE, "%s is a core of another architecture (ELF machine %u, class %u): "
                         "ptmalloc_dump reads x86-64 cores", path, (unsigned)eh->e_machine, (unsigned)eh->e_ident[EI_CLASS]);
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > s->core_size ||
        (s->core_size - eh->e_phoff) / sizeof(Elf64_Phdr) < eh->e_phnum)
        return ptmd_fail(err, PTMD_E_CORE, "core file %s is truncated: its program headers are cut off", path);
    /* the notes first: the pid, and the files, which say which segments are file-backed */
    for (i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, s->core + eh->e_phoff + i * sizeof(ph), sizeof(ph));
        if (ph.p_type != PT_NOTE) continue;
        if (ph.p_offset > s->core_size || ph.p_filesz > s->core_size - ph.p_offset)
            return ptmd_fail(err, PTMD_E_CORE, "core file %s is truncated: its notes are cut off", path);
        if (core_notes(s, s->core + ph.p_offset, ph.p_filesz, path, err) != 0) return -1;
    }
    if (!s->n_tids || !s->pid)
        return ptmd_fail(err, PTMD_E_CORE, "core file %s has no thread or process notes (NT_PRSTATUS, NT_PRPSINFO)", path);
    if (!s->nt_file)
        return ptmd_fail(err, PTMD_E_CORE, "core file %s has no NT_FILE note: which files it mapped is unknown", path);
    maps->count = 0;
    maps->maps.len = 0;
    for (i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        ptmd_map *m;
        ptmd_region *r;
        uint64_t have;
        memcpy(&ph, s->core + eh->e_phoff + i * sizeof(ph), sizeof(ph));
        if (ph.p_type != PT_LOAD || !ph.p_memsz || ph.p_vaddr + ph.p_memsz < ph.p_vaddr) continue;
        if (maps->count && ph.p_vaddr < PTMD_BUF_AT(&maps->maps, ptmd_map, maps->count - 1)->end)
            return ptmd_fail(err, PTMD_E_CORE, "core file %s: its segments are not in address order", path);
        if (ph.p_filesz && (ph.p_offset > s->core_size || ph.p_filesz > s->core_size - ph.p_offset))
            return ptmd_fail(err, PTMD_E_CORE, "core file %s is truncated: the segment at %#lx needs %lu bytes "
                             "from offset %lu, the file has %lu", path, (unsigned long)ph.p_vaddr,
                             (unsigned long)ph.p_filesz, (unsigned long)ph.p_offset, (unsigned long)s->core_size);
        if (!(m = ptmd_buf_push(&maps->maps, sizeof(*m)))) return ptmd_fail_sys(err, errno, "core mappings", "mmap");
        maps->count++;
        m->start = ph.p_vaddr;
        m->end = ph.p_vaddr + ph.p_memsz;
        m->prot = PTMD_MAP_PRIVATE | (ph.p_flags & PF_W ? PTMD_MAP_W : 0) | (ph.p_flags & PF_X ? PTMD_MAP_X : 0);
        m->kind = core_file_backed(s, m->start, m->end) ? PTMD_MAPKIND_FILE
                  : s->main_sp >= m->start && s->main_sp < m->end ? PTMD_MAPKIND_STACK : PTMD_MAPKIND_ANON;
        have = ph.p_filesz < ph.p_memsz ? ph.p_filesz & ~(uint64_t)(s->page_size - 1) : ph.p_memsz;
        if (!(ph.p_flags & PF_R) || !have) continue;
        /* what the core left out (read-only file pages past the ELF headers) cannot be read: such a
         * mapping is no readable mapping, though its first pages are a region (libc's notes) */
        if (have == ph.p_memsz) m->prot |= PTMD_MAP_R;
        r = s->n_regions ? PTMD_BUF_AT(&s->regions, ptmd_region, s->n_regions - 1) : NULL;
        if (have == ph.p_memsz && r && r->end == m->start && r->local + (r->end - r->start) == s->core + ph.p_offset) {
            r->end = m->end;
            s->copied_bytes += have;
            continue;
        }
        if (!(r = ptmd_buf_push(&s->regions, sizeof(*r)))) return ptmd_fail_sys(err, errno, "core regions", "mmap");
        s->n_regions++;
        r->start = m->start;
        r->end = m->start + have;
        r->local = (unsigned char *)(uintptr_t)(s->core + ph.p_offset);
        s->copied_bytes += have;
    }
    for (i = 0; i < s->n_regions; i++) {
        ptmd_region *r = PTMD_BUF_AT(&s->regions, ptmd_region, i);
        size_t np = (size_t)((r->end - r->start) / s->page_size);
        if (!(r->pages = map_zeroed(np))) return ptmd_fail_sys(err, errno, "core regions", "mmap");
        memset(r->pages, PTMD_PAGE_PRESENT, np);
    }
    return 0;
}

/* ---- reads -------------------------------------------------------------------------------- */

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

int ptmd_source_read(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    const unsigned char *p;
    if (s->kind == PTMD_SOURCE_SELF) return ptmd_safe_read(&s->mem, (uintptr_t)addr, dst, len);
    if (len == 0) return 0;
    if ((p = ptmd_source_at(s, addr, len)) != NULL) {
        memcpy(dst, p, len);
        return 0;
    }
    /* a process not stopped (still being located): past its regions, read in place */
    return s->kind == PTMD_SOURCE_PID && !s->n_seized && !s->stopped_ns ? ptmd_source_read_live(s, addr, dst, len) : -1;
}

void ptmd_source_live(ptmd_source *s, int pid)
{
    source_init(s, PTMD_SOURCE_PID, pid);
}

int ptmd_source_live_region(ptmd_source *s, uint64_t start, uint64_t end)
{
    ptmd_region *r;
    if (s->n_regions || end <= start || end - start > (64u << 20)) return -1;
    if (!(r = ptmd_buf_push(&s->regions, sizeof(*r)))) return -1;
    s->n_regions = 1;
    r->start = start;
    r->end = end;
    if (!(r->local = map_zeroed(end - start))) return -1;
    return ptmd_source_read_live(s, start, r->local, end - start);
}

void ptmd_source_read_many(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok)
{
    size_t i;
    if (s->kind == PTMD_SOURCE_SELF) {
        ptmd_safe_read_many(&s->mem, addrs, n, each, dst, ok);
        return;
    }
    for (i = 0; i < n; i++) ok[i] = ptmd_source_read(s, addrs[i], (unsigned char *)dst + i * each, each) == 0;
}

uint64_t ptmd_source_rd64_slow(ptmd_source *s, uint64_t addr)
{
    const unsigned char *p = ptmd_source_at(s, addr, 8);
    uint64_t v = 0;
    if (p) memcpy(&v, p, 8);
    return v;
}

int ptmd_source_pages(const ptmd_source *s, uint64_t start, size_t npages, uint8_t *out)
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
                else { r = &v[mid]; lo = mid; break; }
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
