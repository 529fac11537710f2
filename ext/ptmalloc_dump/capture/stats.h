/* A cheap reading of malloc's state: glibc's counters and each arena's system memory, no chunk walk. */
#ifndef PTMD_STATS_H
#define PTMD_STATS_H

#include "format/ptmd.h"
#include "format/format.h"

typedef struct {
    uint64_t av;             /* the malloc_state */
    uint64_t system_mem;     /* malloc_state.system_mem: bytes the arena has from the system */
    uint64_t max_system_mem; /* malloc_state.max_system_mem: its highest value */
} ptmd_arena_reading;

typedef struct {
    ptmd_mallinfo2_rec mallinfo;
    int have_mallinfo; /* 0 when the ring did not lead back to main_arena (mallinfo2 not called) */
    int ring_ok;
    size_t n_arenas; /* arenas on the ring; may exceed the capacity passed in */
} ptmd_stats_reading;

/* Follows the arena ring from main_arena (fault-free reads, at most PTMD_STATS_MAX_ARENAS steps),
 * filling arenas[0..cap), then calls mallinfo2() when the ring led back to main_arena. Calls no
 * malloc once the libc has been located (the gem locates it when it loads). */
#define PTMD_STATS_MAX_ARENAS 4096
int ptmd_stats_read(ptmd_stats_reading *out, ptmd_arena_reading *arenas, size_t cap, ptmd_err *err);

#endif
