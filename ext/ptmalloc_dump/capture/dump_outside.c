/* Dumps from outside: another process (stopped, copied, let go: outside.c) or a core file, walked on
 * that copy and written as a dump of this process would be, without its Ruby pass, references or
 * glibc's counters. */
#define _GNU_SOURCE
#include "capture/dump_outside.h"
#include "capture/arena.h"
#include "capture/dump.h"
#include "capture/dump_write.h"
#include "capture/native_track.h"
#include "capture/outside.h"
#include "capture/residency.h"
#include "capture/source_core.h"
#include "capture/source_ptrace.h"
#include "capture/walk.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The rest of a dump from outside (another process, a core), once its memory is in d->w.src and its
 * mappings in d->w.maps, libc located and the writer open: the walk on that memory and the file. A
 * live process's smaps (mappings_pid) are read after the walk, the process running again. */
static int outside_walk_write(ptmd_dump_state *d, const ptmd_dump_opts *o, ptmd_libc *lc, uint64_t ppid,
                              int mappings_pid, ptmd_err *err)
{
    struct timespec now;
    ptmd_err ignored;
    uint64_t t0, t1;
    if (ptmd_walk_prepare(&d->w, lc, err) != 0) return -1;
    if (!ptmd_outside_tls(&d->w, lc)) {
        lc->tcache_tls = lc->thread_arena_tls = -1;
        d->source.flags |= PTMD_SRCF_NO_TLS;
    }
    if (ptmd_walk_validate(&d->w, err) != 0) return -1;
    if (ptmd_dump_strings(d, lc, o) != 0) return ptmd_fail_sys(err, errno, "strings", "mmap");
    clock_gettime(CLOCK_REALTIME, &now);
    t0 = ptmd_now_ns();
    if (ptmd_walk_run(&d->w, err) != 0) return -1;
    t1 = ptmd_now_ns();
    /* the allocation tracker's tables, when it runs there (read as they are now: the heap was copied
     * while the process was stopped, so a sample whose block it freed since counts nowhere) */
    if (ptmd_native_track_capture(&d->w.src, ptmd_native_track_find(&d->w.maps), NULL, &d->native) != 0)
        return ptmd_fail_sys(err, errno, "allocation tracker", "mmap");
    if (ptmd_walk_residency(&d->w, err) != 0) return -1;
    ptmd_dump_meta(d, lc, &now);
    d->meta.pid = (uint64_t)d->w.src.pid;
    d->meta.ppid = ppid;
    d->meta.flags |= PTMD_MF_NO_ORACLES;
    d->meta.walk_ns = t1 - t0;
    d->meta.residency_ns = ptmd_now_ns() - t1;
    if (mappings_pid && ptmd_mappings_read(&d->mappings, mappings_pid, &ignored) != 0) d->mappings.present = 0;
    d->has_source = 1;
    return ptmd_dump_write(d, err);
}

/* main_arena holds no heap: its top is 0 while malloc_init_state has not run, initial_top (its own
 * unsorted bin) once it has and nothing was allocated. glibc 2.36 runs it on the first malloc, 2.43 at
 * start-up, whatever the process's malloc is. */
static int never_used(ptmd_walk *w, const ptmd_libc *lc)
{
    uint64_t top;
    if (ptmd_guarded_copy(w, lc->main_arena + lc->layout->ms_top, &top, sizeof(top)) != 0) return 0;
    return top == 0 || top == ptmd_initial_top(lc->main_arena + lc->layout->ms_bins);
}

static ptmd_libc *outside_libc(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_libc *lc = mmap(NULL, sizeof(*lc), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (lc == MAP_FAILED) {
        ptmd_fail_sys(err, errno, "libc of the target", "mmap");
        return NULL;
    }
    d->target_lc = lc;
    return lc;
}

int ptmd_dump_process(ptmd_dump_state *d, const ptmd_dump_opts *o, int pid, ptmd_err *err)
{
    ptmd_libc *lc;
    int rc = -1;

    if (pid <= 0) return ptmd_fail(err, PTMD_E_ARGUMENT, "not a process id: %d", pid);
    if (pid == (int)getpid())
        return ptmd_fail(err, PTMD_E_ARGUMENT, "process %d is this process: dump it with PtmallocDump.dump", pid);
    if (ptmd_dump_begin(err) != 0) return -1;
    if (!(lc = outside_libc(d, err))) goto out;
    /* everything that can fail without stopping the target, first */
    if (ptmd_maps_load_pid(&d->w.maps, pid, err) != 0) {
        /* another user's process (or one that is not dumpable): its /proc files are closed to us */
        if (err->code == PTMD_E_SYSTEM && err->sys_errno == EACCES) ptmd_source_permission_error(pid, EACCES, err);
        goto out;
    }
    if (!d->w.maps.count) {
        ptmd_fail(err, PTMD_E_TARGET,
                  "process %d has no memory to read: it has exited (a zombie its parent has not "
                  "reaped yet) or is a kernel thread",
                  pid);
        goto out;
    }
    if (ptmd_locate_process(pid, &d->w.maps, o->debug_dir, o->symbols, lc, err) != 0) goto out;
    d->source.flags = PTMD_SRCF_NO_RUBY | PTMD_SRCF_NO_REFERENCES | PTMD_SRCF_NO_ORACLES;
    if (ptmd_writer_open(&d->writer, o->path, err) != 0) goto out;
    if (ptmd_outside_copy(&d->w, lc, pid, &d->source, err) != 0) goto out;
    d->source.kind = d->w.src.ops->kind;
    /* the target runs again: the walk reads the copy */
    if (never_used(&d->w, lc)) {
        ptmd_fail(err, PTMD_E_ALLOCATOR,
                  "glibc's malloc was never used in process %d (main_arena holds no "
                  "heap): it allocates with another allocator (jemalloc, tcmalloc, ...) or not at all, "
                  "and ptmalloc-dump reads glibc's malloc only",
                  pid);
        goto out;
    }
    rc = outside_walk_write(d, o, lc, (uint64_t)ptmd_proc_parent(pid), pid, err);
out:
    return ptmd_dump_end(d, rc);
}

int ptmd_dump_core(ptmd_dump_state *d, const ptmd_dump_opts *o, const char *core, ptmd_err *err)
{
    ptmd_libc *lc;
    uint64_t held;
    int rc = -1;

    if (ptmd_dump_begin(err) != 0) return -1;
    if (!(lc = outside_libc(d, err))) goto out;
    if (ptmd_source_open_core(&d->w.src, core, &d->w.maps, err) != 0) goto out;
    if (ptmd_locate_core(&d->w.src, &d->w.maps, core, o->debug_dir, o->symbols, lc, err) != 0) goto out;
    if (never_used(&d->w, lc)) {
        ptmd_fail(err, PTMD_E_ALLOCATOR,
                  "glibc's malloc was never used in the process of core file %s (main_arena "
                  "holds no heap): it allocated with another allocator or not at all",
                  core);
        goto out;
    }
    /* a core cannot be let go for a moment: a lock held in it is a heap caught mid-change */
    if ((held = ptmd_outside_held_arena(&d->w.src, lc)) != 0) {
        ptmd_fail(err, PTMD_E_LOCKED,
                  "arena %#lx is locked in core file %s (a thread was inside malloc or free "
                  "when it was written): its lists may be half changed, so it is not walked",
                  (unsigned long)held, core);
        goto out;
    }
    d->source.kind = d->w.src.ops->kind;
    d->source.flags = PTMD_SRCF_NO_RUBY | PTMD_SRCF_NO_REFERENCES | PTMD_SRCF_NO_ORACLES | PTMD_SRCF_NO_RESIDENCY;
    d->source.pid = (uint64_t)d->w.src.pid;
    d->source.copied_bytes = d->w.src.copied_bytes;
    d->source.threads = (uint32_t)d->w.src.n_tids;
    if (ptmd_writer_open(&d->writer, o->path, err) != 0) goto out;
    rc = outside_walk_write(d, o, lc, (uint64_t)d->w.src.ppid, 0, err);
out:
    return ptmd_dump_end(d, rc);
}
