/* A dump's options and its state from start to finish, which the dump's files share. */
#ifndef PTMD_DUMP_STATE_H
#define PTMD_DUMP_STATE_H

#include "format/view.h"
#include "capture/mappings.h"
#include "capture/native_track.h"
#include "capture/ruby_data.h"
#include "capture/walk_ctx.h"
#include "capture/writer.h"

/* glibc's malloc_info() and mallinfo2() after the walk: never, always, or (auto) when the arenas'
 * bins and fastbins hold at most PTMD_ORACLES_AUTO_MAX_ENTRIES chunks, and always in a fork
 * snapshot's child, whose time is no pause of the process dumped. Each call follows every one of those
 * chunks again, one wait on memory a step (about 0.15 us each on this machine): the limit keeps the two
 * calls near 30 ms. */
enum { PTMD_ORACLES_OFF = 0, PTMD_ORACLES_AUTO = 1, PTMD_ORACLES_ON = 2 };
#define PTMD_ORACLES_AUTO_MAX_ENTRIES 100000

typedef struct {
    const char *path;
    const char *debug_dir;      /* NULL: PTMALLOC_DUMP_DEBUG_DIR or /usr/lib/debug */
    int symbols;                /* PTMD_SYMBOLS_* */
    const char *const *strings; /* extra key, value, key, value, ..., NULL for the strings section */
    int references;             /* scan in-use chunks for pointers to other chunks */
    int oracles;                /* PTMD_ORACLES_*: whether malloc_info() and mallinfo2() follow the walk */
    int fork_child;             /* this is the child of a fork snapshot */
    int report_stderr;          /* fork: nobody waits for the child, which says on stderr why it failed */
    int trim_check;             /* after the walk: malloc_trim(0), and measure what it released */
} ptmd_dump_opts;

typedef struct {
    ptmd_walk w;
    ptmd_meta meta;
    ptmd_mallinfo2_rec mallinfo2;
    int mallinfo_exact;      /* 0: glibc < 2.33, mallinfo()'s low 32 bits only */
    const char *malloc_info; /* the process-wide capture buffer */
    size_t malloc_info_len;
    ptmd_buf strings;
    ptmd_writer writer;
    ptmd_ruby_data ruby;                  /* filled by the caller before ptmd_dump_run, if wanted */
    ptmd_native_data native;              /* the allocation tracker's tables, when it is preloaded */
    uint64_t native_state;                /* where the tracker's state is in the target, 0: none */
    ptmd_buf trim;                        /* uint64 per arena: resident bytes malloc_trim(0) released */
    int snapshot;                         /* written by a fork snapshot child */
    const ptmd_walk *parent;              /* a snapshot child's: the parent's walk, with its thread list */
    ptmd_mappings mappings;               /* smaps and VmRSS at the capture (a snapshot's: its parent's) */
    const ptmd_mappings *parent_mappings; /* a snapshot child's: read by the parent before the fork */
    ptmd_buf ruby_rss;                    /* uint64 per Ruby page: resident bytes of its body */
    ptmd_buf scratch;                     /* ptmd_scratch_rec: the dump's own mappings at the mappings' reading */
    ptmd_libc *target_lc;                 /* another process's libc (mmapped), NULL for this process */
    ptmd_source_rec source;               /* where another process's dump came from (the SOURCE section) */
    int has_source;
    ptmd_snapshot_rec snap; /* a fork snapshot: what its parent paused for (the SNAPSHOT section) */
    uint64_t snap_start;    /* ptmd_now_ns() when the parent's dump call began */
    int has_snapshot;
    char ruby_problem[320]; /* a snapshot child's: why its Ruby pass recorded nothing ("" if it did) */
} ptmd_dump_state;

#endif
