/* The memory sources of a walk. Another process is stopped thread by thread with PTRACE_SEIZE and
 * PTRACE_INTERRUPT (no signal is sent to it, so its own signal handling is undisturbed), read with
 * process_vm_readv, and detached on every path out. */
#define _GNU_SOURCE
#include "capture/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PTMD_ATTACH_ROUNDS 64
#define PTMD_STOP_WAIT_NS (2ull * 1000 * 1000 * 1000)

struct ptmd_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

void ptmd_source_self(ptmd_source *s)
{
    memset(s, 0, sizeof(*s));
    s->kind = PTMD_SOURCE_SELF;
    s->pid = (int)getpid();
}

/* The thread ids of pid from /proc/PID/task into tids[0..max); the count, -1 when pid is gone. */
static long list_tasks(int pid, int *tids, size_t max)
{
    char path[64], buf[4096] __attribute__((aligned(8)));
    long count = 0;
    int fd, n;
    n = snprintf(path, sizeof(path), "/proc/%d/task", pid);
    if (n <= 0 || (size_t)n >= sizeof(path)) return -1;
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    for (;;) {
        long got = syscall(SYS_getdents64, fd, buf, sizeof(buf)), off = 0;
        if (got <= 0) break;
        while (off < got) {
            struct ptmd_dirent64 *d = (struct ptmd_dirent64 *)(void *)(buf + off);
            if (d->d_name[0] >= '0' && d->d_name[0] <= '9') {
                long v = 0;
                const char *q = d->d_name;
                while (*q >= '0' && *q <= '9') v = v * 10 + (*q++ - '0');
                if ((size_t)count < max) tids[count] = (int)v;
                count++;
            }
            off += d->d_reclen;
        }
    }
    close(fd);
    return count;
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
    const char *uid_line;
    unsigned long ruid = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    read_small("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope));
    if (read_small(path, status, sizeof(status)) != 0 || strstr(status, "\nState:\tZ") || strstr(status, "\nState:\tX"))
        return ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being stopped", pid);
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

/* Waits for the interrupt's stop of tid; other stops seen first (a signal delivery) are let through
 * with their signal. Polled, so that a stop that never comes costs a bounded wait, not a hang.
 * 0 when stopped, -1 when the thread is gone or did not stop in time. */
static int wait_stopped(int tid)
{
    uint64_t deadline = ptmd_now_ns() + PTMD_STOP_WAIT_NS;
    struct timespec nap = { 0, 50 * 1000 };
    while (ptmd_now_ns() < deadline) {
        int st;
        pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            nanosleep(&nap, NULL);
            continue;
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) return -1;
        if (!WIFSTOPPED(st)) continue;
        if ((st >> 16) == PTRACE_EVENT_STOP) return 0;
        /* a signal-delivery stop: deliver it, the interrupt is still pending */
        if (ptrace(PTRACE_CONT, tid, NULL, (void *)(uintptr_t)WSTOPSIG(st)) != 0) return -1;
    }
    return -1;
}

int ptmd_source_attach(ptmd_source *s, int pid, ptmd_err *err)
{
    int round, tids[PTMD_SOURCE_MAX_TASKS];
    memset(s, 0, sizeof(*s));
    s->kind = PTMD_SOURCE_PID;
    s->pid = pid;
    if (pid <= 0) return ptmd_fail(err, PTMD_E_ARGUMENT, "not a process id: %d", pid);
    if (pid == (int)getpid())
        return ptmd_fail(err, PTMD_E_ARGUMENT, "process %d is this process: dump it in process instead", pid);
    /* threads may be created while the others are being stopped: list again until a round finds
     * no new one (all already seized threads are stopped, so only the unstopped can add more) */
    for (round = 0; round < PTMD_ATTACH_ROUNDS; round++) {
        long i, kept, first, n = list_tasks(pid, tids, PTMD_SOURCE_MAX_TASKS);
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
            added = 1;
            if (!s->stopped_ns) s->stopped_ns = ptmd_now_ns();
            ptrace(PTRACE_INTERRUPT, tids[i], NULL, NULL);
        }
        for (i = kept = first; i < s->n_tids; i++) {
            if (wait_stopped(s->tids[i]) != 0) {
                /* gone between the seize and the stop: it is no thread to read any more */
                ptrace(PTRACE_DETACH, s->tids[i], NULL, NULL);
                continue;
            }
            s->tids[kept++] = s->tids[i];
        }
        s->n_tids = (int)kept;
        if (!added) {
            if (!s->n_tids) {
                ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being stopped", pid);
                goto fail;
            }
            return 0;
        }
    }
    ptmd_fail(err, PTMD_E_TARGET, "process %d kept creating threads while it was being stopped", pid);
fail:
    ptmd_source_detach(s);
    return -1;
}

void ptmd_source_detach(ptmd_source *s)
{
    int i;
    if (s->kind != PTMD_SOURCE_PID) return;
    for (i = 0; i < s->n_tids; i++) ptrace(PTRACE_DETACH, s->tids[i], NULL, NULL);
    if (s->n_tids && s->stopped_ns) s->pause_ns = ptmd_now_ns() - s->stopped_ns;
    s->n_tids = 0;
}

int ptmd_source_read(const ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    struct iovec local = { dst, len }, remote = { (void *)(uintptr_t)addr, len };
    if (len == 0) return 0;
    if (addr + len < addr) return -1;
    return process_vm_readv(s->pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}
