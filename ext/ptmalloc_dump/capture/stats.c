/* A cheap reading of malloc's state for PtmallocDump.stats: glibc's counters and the arena ring's
 * system_mem fields, read as the capture reads them (capture/locate.c, capture/layout.h). */
#include "capture/stats.h"
#include "capture/locate.h"
#include "capture/mallinfo.h"
#include "capture/procfs.h"

#include <string.h>
#include <unistd.h>

/* One memreader per process: a forked child opens its own (the parent's /proc/self/mem is not its). */
static ptmd_memreader reader = { .mem_fd = -1 };
static int reader_pid;

static int open_reader(ptmd_err *err)
{
    int pid = (int)getpid();
    if (reader_pid == pid) return 0;
    if (reader.mem_fd >= 0) ptmd_memreader_close(&reader);
    memset(&reader, 0, sizeof(reader));
    reader.mem_fd = -1;
    if (ptmd_memreader_open(&reader, err) != 0) return -1;
    reader_pid = pid;
    return 0;
}

/* A non-main arena's malloc_state follows its heap_info, which starts the heap: an av whose heap_info
 * does not name it back is no arena (the same check as ptmd_arena_ok, without the walk's maps). */
static int arena_ok(const ptmd_libc *lc, uint64_t av)
{
    const ptmd_layout *L = lc->layout;
    uint64_t ar;
    if (av == lc->main_arena) return 1;
    if (!av || (av & 7) || av < L->hi_size_total) return 0;
    if (ptmd_safe_read(&reader, av - L->hi_size_total + L->hi_ar_ptr, &ar, 8) != 0) return 0;
    return ar == av;
}

int ptmd_stats_read(ptmd_stats_reading *out, ptmd_arena_reading *arenas, size_t cap, ptmd_err *err)
{
    const ptmd_libc *lc;
    const ptmd_layout *L;
    uint64_t av, fields[2];
    size_t n = 0, i;
    memset(out, 0, sizeof(*out));
    if (ptmd_locate(NULL, PTMD_SYMBOLS_AUTO, &lc, err) != 0) return -1;
    if (open_reader(err) != 0) return -1;
    L = lc->layout;
    av = lc->main_arena;
    while (n < PTMD_STATS_MAX_ARENAS) {
        uint64_t next;
        if (ptmd_safe_read(&reader, av + L->ms_system_mem, fields, sizeof(fields)) != 0) break;
        if (L->ms_max_system_mem != L->ms_system_mem + 8) fields[1] = 0;
        if (n < cap) {
            arenas[n].av = av;
            arenas[n].system_mem = fields[0];
            arenas[n].max_system_mem = fields[1];
        }
        n++;
        if (ptmd_safe_read(&reader, av + L->ms_next, &next, 8) != 0 || !arena_ok(lc, next)) break;
        if (next == lc->main_arena) {
            out->ring_ok = 1;
            break;
        }
        for (i = 0; i < n && i < cap; i++)
            if (arenas[i].av == next) break;
        if (i < n && i < cap) break;
        av = next;
    }
    out->n_arenas = n;
    /* mallinfo2 goes round the ring until main_arena without a check (see ptmd_arena_ring) */
    if (out->ring_ok) {
        ptmd_mallinfo(&out->mallinfo);
        out->have_mallinfo = 1;
    }
    return 0;
}
