/* Another process as the walk's source. Its threads are seized and interrupted (source.c), its
 * mappings read, and what the walk reads copied: the pause it sees is the copy, not the walk. An arena
 * whose mutex is held while it is stopped may have half-changed lists (a thread inside malloc): then
 * nothing is copied, the process is let go for a moment and stopped again, a bounded number of times,
 * and the arena is never walked while it is held. Nothing here calls malloc. */
#define _GNU_SOURCE
#include "capture/outside.h"
#include "capture/arch.h"
#include "capture/source_copy.h"
#include "capture/threads.h"
#include "capture/source_ptrace.h"

#include <string.h>
#include <time.h>

#define PTMD_LOCK_ATTEMPTS 50
#define PTMD_LOCK_RETRY_NS (20ull * 1000 * 1000)
#define PTMD_RING_MAX 65536
#define PTMD_DTV_MAX 4096
#define PTMD_STATIC_TLS_MAX (1ull << 20)
#define PTMD_PRE_TCB_MAX 0x2000 /* struct pthread, aarch64: 0x740 bytes in 2.36 */

/* Read from the stopped process in place (before anything is copied: its threads are stopped, so
 * nothing changes until they are let go), or from a core. */
static int read_target(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    return ptmd_source_read_now(s, addr, dst, len);
}

uint64_t ptmd_outside_held_arena(ptmd_source *s, const ptmd_libc *lc)
{
    const ptmd_layout *L = lc->layout;
    uint64_t av = lc->main_arena;
    size_t n = 0;
    do {
        int32_t mutex;
        if (read_target(s, av + L->ms_mutex, &mutex, sizeof(mutex)) != 0) return 0;
        if (mutex) return av;
        if (read_target(s, av + L->ms_next, &av, sizeof(av)) != 0) return 0;
    } while (av != lc->main_arena && ++n < PTMD_RING_MAX);
    return 0;
}

int ptmd_outside_copy(ptmd_walk *w, const ptmd_libc *lc, int pid, ptmd_source_rec *rec, ptmd_err *err)
{
    uint32_t attempt;
    uint64_t held = 0, first = ptmd_now_ns();
    ptmd_copy_spare spare;
    int rc = -1;
    /* the copy's pages faulted in while the target runs, from the mappings read before (w->maps) */
    ptmd_source_prefault(&spare, pid, &w->maps, lc->image_start, lc->image_end);
    for (attempt = 1; attempt <= PTMD_LOCK_ATTEMPTS; attempt++) {
        struct timespec nap = { 0, (long)PTMD_LOCK_RETRY_NS };
        if (ptmd_source_attach(&w->src, pid, err) != 0) goto out;
        ptmd_source_test_kill(&w->src, "seized");
        held = ptmd_outside_held_arena(&w->src, lc);
        if (!held || ptmd_source_gone(&w->src)) {
            rc = ptmd_maps_load_pid(&w->maps, pid, err);
            if (rc == 0) {
                ptmd_source_test_kill(&w->src, "maps");
                rc = ptmd_source_copy(&w->src, &w->maps, lc->image_start, lc->image_end, &spare, err);
            }
            /* a process that exits while it is stopped (SIGKILL ends a stopped thread too) leaves
             * its reads failing or empty (no maps, no pagemap, ESRCH) from whichever step it died
             * at; one that dies after the last read leaves a whole copy */
            if (rc != 0 || !w->maps.count) {
                if (ptmd_source_gone(&w->src))
                    ptmd_fail(err, PTMD_E_TARGET, "process %d exited while it was being read", pid);
                ptmd_source_release(&w->src);
                rc = -1;
                goto out;
            }
            ptmd_source_detach(&w->src);
            rec->pid = (uint64_t)pid;
            rec->pause_ns = w->src.pause_ns;
            rec->copied_bytes = w->src.copied_bytes;
            rec->threads = (uint32_t)w->src.n_tids;
            rec->attempts = attempt;
            rc = 0;
            goto out;
        }
        ptmd_source_release(&w->src);
        if (attempt < PTMD_LOCK_ATTEMPTS) nanosleep(&nap, NULL);
    }
    ptmd_fail(err, PTMD_E_LOCKED,
              "arena %#lx of process %d was locked each of the %d times the process was stopped "
              "(over %lu ms): a thread holds its mutex, inside malloc or free or stuck there. It was "
              "not walked, since its lists may be half changed; try again",
              (unsigned long)held, pid, PTMD_LOCK_ATTEMPTS, (unsigned long)((ptmd_now_ns() - first) / 1000000));
out:
    ptmd_copy_spare_release(&spare);
    return rc;
}

static int on_ring(ptmd_walk *w, const ptmd_libc *lc, uint64_t a)
{
    uint64_t av = lc->main_arena;
    size_t n = 0;
    do {
        if (av == a) return 1;
        av = ptmd_mapped_word(w, av + lc->layout->ms_next);
    } while (av && av != lc->main_arena && ++n < PTMD_RING_MAX);
    return 0;
}

/* aarch64: struct pthread lies just below the thread pointer (TLS_PRE_TCB_SIZE, its size rounded up),
 * which this process's glibc need not share with the target's. Found on a stopped thread by structure:
 * the first 16-byte step down from its thread pointer where a struct pthread holds that thread's tid
 * and the robust-list word every thread sets (capture/arch.h). x86-64 keeps it at the thread pointer. */
static uint64_t tp_from_pthread(ptmd_walk *w, uint64_t tp, int tid)
{
#if PTMD_TLS_VARIANT == 2
    PTMD_UNUSED(w);
    PTMD_UNUSED(tp);
    PTMD_UNUSED(tid);
    return 0;
#else
    uint64_t k, list = w->L->pthread_list;
    for (k = list + 64; k <= PTMD_PRE_TCB_MAX && k < tp; k += 16)
        if (ptmd_is_pthread(w, tp - k) && ptmd_pthread_tid(w, tp - k, list) == tid) return k;
    return UINT64_MAX;
#endif
}

/* Where the target's threads keep struct pthread and libc's static TLS block, from the stopped threads'
 * thread pointers: lc->tp_from_pthread, then lc->tls_offset from their dtv (tcbhead_t.dtv, at
 * PTMD_TCB_DTV from the thread pointer): dtv[-1].counter is its length, dtv[m].pointer.val the TLS
 * block of module m (16-byte entries; TLS_DTV_UNALLOCATED is -1). libc's block is a static one, near
 * the thread pointer: below it on x86-64, above it on aarch64. glibc: sysdeps/{x86_64,aarch64}/nptl/tls.h,
 * elf/dl-tls.c (allocate_dtv). */
int ptmd_outside_tls(ptmd_walk *w, ptmd_libc *lc)
{
    const int *tids;
    const uint64_t *thread_ptr;
    int pass, i, n_tids = ptmd_source_threads(&w->src, &tids, &thread_ptr);
    lc->tp_from_pthread = 0;
    for (i = 0; i < n_tids; i++) {
        uint64_t k = thread_ptr[i] ? tp_from_pthread(w, thread_ptr[i], tids[i]) : UINT64_MAX;
        if (k != UINT64_MAX) {
            lc->tp_from_pthread = k;
            break;
        }
    }
    if (lc->thread_arena_tls < 0 || !lc->tls_size) return 0;
    /* the main thread first: its thread_arena is main_arena once it has allocated */
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < n_tids; i++) {
            uint64_t tp = thread_ptr[i], dtv, n, m;
            if (!tp || (pass == 0) != (tids[i] == w->src.pid)) continue;
            dtv = ptmd_mapped_word(w, tp + PTMD_TCB_DTV);
            if (!dtv || (dtv & 7)) continue;
            n = ptmd_mapped_word(w, dtv - 16);
            if (n > PTMD_DTV_MAX) continue;
            for (m = 1; m <= n; m++) {
                uint64_t val = ptmd_mapped_word(w, dtv + 16 * m), ar;
                if (!val || val == UINT64_MAX) continue;
#if PTMD_TLS_VARIANT == 2
                if (val >= tp || tp - val > PTMD_STATIC_TLS_MAX) continue;
#else
                if (val < tp || val - tp > PTMD_STATIC_TLS_MAX) continue;
#endif
                ar = ptmd_mapped_word(w, val + (uint64_t)lc->thread_arena_tls);
                if (ar && on_ring(w, lc, ar)) {
                    lc->tls_offset = tp - lc->tp_from_pthread - val;
                    return 1;
                }
            }
        }
    return 0;
}
