/* Another process as a source. Its threads are stopped one by one with PTRACE_SEIZE and
 * PTRACE_INTERRUPT (no signal is sent to it, so its own signal handling is undisturbed), read in
 * place with process_vm_readv while it is located and checked, then copied (source_copy.c) and let go
 * at once, on every path out: the walk reads the copy. */
#define _GNU_SOURCE
#include "capture/source_ptrace.h"
#include "capture/arch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PTMD_ATTACH_ROUNDS 64
#define PTMD_STOP_WAIT_NS (2ull * 1000 * 1000 * 1000)

static const ptmd_source_ops ptrace_ops;

/* Why ptrace was refused, in words the user can act on. */
int ptmd_source_permission_error(int pid, int e, ptmd_err *err)
{
    char scope[16] = "", status[4096] = "", path[64];
    const char *uid_line, *tracer;
    unsigned long ruid = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    ptmd_read_small("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope));
    if (ptmd_read_small(path, status, sizeof(status)) != 0 || strstr(status, "\nState:\tZ") ||
        strstr(status, "\nState:\tX"))
        return ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being stopped", pid);
    if ((tracer = strstr(status, "\nTracerPid:")) != NULL && strtoul(tracer + 11, NULL, 10) != 0)
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "process %d is already traced by process %lu (a debugger or a tracer), and a process has "
                         "one tracer at a time: detach it first",
                         pid, strtoul(tracer + 11, NULL, 10));
    if ((uid_line = strstr(status, "\nUid:")) != NULL) ruid = strtoul(uid_line + 5, NULL, 10);
    if (geteuid() != 0 && ruid != geteuid())
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "process %d belongs to uid %lu, not to this user (uid %lu): run ptmalloc-dump as that "
                         "user or as root",
                         pid, ruid, (unsigned long)geteuid());
    if (scope[0] >= '1' && scope[0] <= '3' && geteuid() != 0)
        return ptmd_fail(err, PTMD_E_PTRACE,
                         "Yama's ptrace_scope is %c: only a parent may trace its child. Run as root (with "
                         "CAP_SYS_PTRACE), or set it to 0: sysctl kernel.yama.ptrace_scope=0",
                         scope[0]);
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

/* The state letter of thread tid of pid, or 0. */
static char task_state(int pid, int tid)
{
    char path[64], state;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
    return ptmd_proc_stat(path, &state, NULL) == 0 ? state : 0;
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

/* A stopped thread's thread pointer: fs_base of its registers (x86-64), its NT_ARM_TLS register set
 * (aarch64: tpidr_el0); 0 when it cannot be read. */
static uint64_t thread_pointer_of(int tid)
{
#if defined(__x86_64__)
    struct user_regs_struct regs;
    return ptrace(PTRACE_GETREGS, tid, NULL, &regs) == 0 ? regs.fs_base : 0;
#else
    uint64_t tp[2] = { 0, 0 }; /* tpidr_el0, and tpidr2_el0 where the kernel has SME */
    struct iovec iov = { tp, sizeof(tp) };
    return ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)0x401 /* NT_ARM_TLS */, &iov) == 0 ? tp[0] : 0;
#endif
}

int ptmd_source_attach(ptmd_source *s, int pid, ptmd_err *err)
{
    int round, tids[PTMD_SOURCE_MAX_TASKS];
    ptmd_source_init(s, &ptrace_ops, pid);
    if (ptmd_source_thread_table(s) != 0) return ptmd_fail_sys(err, errno, "thread table", "mmap");
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
                if (e == ESRCH) continue; /* the thread ended meanwhile */
                if (e == EPERM) ptmd_source_permission_error(pid, e, err);
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
                ptmd_fail(err, PTMD_E_STOP,
                          "thread %d of process %d did not stop within %llu s (it sleeps "
                          "uninterruptibly, on a disk or a network file system perhaps); nothing was read and "
                          "every thread runs again",
                          s->tids[i], pid, PTMD_STOP_WAIT_NS / 1000000000ull);
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
            for (i = 0; i < s->n_tids; i++) s->thread_ptr[i] = thread_pointer_of(s->tids[i]);
            return 0;
        }
    }
    ptmd_fail(err, PTMD_E_TARGET, "process %d kept creating threads while it was being stopped", pid);
fail:
    ptmd_source_release(s);
    return -1;
}

int ptmd_source_gone(const ptmd_source *s)
{
    char path[64], status[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", s->pid);
    if (ptmd_read_small(path, status, sizeof(status)) != 0) return 1;
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
    int i, pass, own_child = ptmd_proc_parent(s->pid) == (int)getpid();
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < s->n_seized; i++) {
            int tid = s->tids[i], st;
            if (!dead[i] || (pass == 0) != (tid != s->pid) || (tid == s->pid && own_child)) continue;
            for (;;) {
                pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
                if (r == tid && (WIFEXITED(st) || WIFSIGNALED(st))) break;
                if (r < 0 && errno != EINTR) break; /* ECHILD: reaped already, by another waiter */
                if (ptmd_now_ns() >= deadline) return;
                if (r == 0) nanosleep(&nap, NULL);
            }
        }
}

void ptmd_source_detach(ptmd_source *s)
{
    static unsigned char dead[PTMD_SOURCE_MAX_TASKS]; /* one detach at a time (dump_busy) */
    int i, any = 0;
    if (!s->n_seized) return;
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
    if (s->ops != &ptrace_ops || !want || strcmp(want, step) != 0) return;
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

void ptmd_source_live(ptmd_source *s, int pid)
{
    ptmd_source_init(s, &ptrace_ops, pid);
}

int ptmd_source_live_region(ptmd_source *s, uint64_t start, uint64_t end)
{
    ptmd_region *r;
    if (s->n_regions || end <= start || end - start > (64u << 20)) return -1;
    if (!(r = ptmd_buf_push(&s->regions, sizeof(*r)))) return -1;
    s->n_regions = 1;
    r->start = start;
    r->end = end;
    if (!(r->local = ptmd_source_zeroed(end - start))) return -1;
    return ptmd_source_read_live(s, start, r->local, end - start);
}

/* The copy where it holds addr; a process not stopped yet (still being located) is read in place past it. */
static int ptrace_read(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    if (ptmd_source_copy_read(s, addr, dst, len) == 0) return 0;
    return !s->n_seized && !s->stopped_ns ? ptmd_source_read_live(s, addr, dst, len) : -1;
}

static int ptrace_read_now(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    return ptmd_source_read_live(s, addr, dst, len);
}

static const ptmd_source_ops ptrace_ops = {
    .kind = PTMD_SOURCE_KIND_PID,
    .in_place = 0,
    .read = ptrace_read,
    .read_many = ptmd_source_read_each,
    .read_now = ptrace_read_now,
    .pages = ptmd_source_copy_pages,
    .threads = ptmd_source_held_threads,
    .hold_range = ptmd_source_live_region,
    .let_go = ptmd_source_detach,
};
