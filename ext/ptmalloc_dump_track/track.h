/* The allocation tracker's parts, each using only those listed before it: the state, its lock and
 * mappings (state.c), the byte sampler (sampler.c), the tables (tables.c), the stacks (stacks.c), the
 * malloc family (interpose.c), and the start from the environment and the part in fork (start.c). */
#ifndef PTMD_TRACK_H
#define PTMD_TRACK_H

#include <stddef.h>
#include <stdint.h>
#include "track_abi.h"

#define PTMD_TRACK_TLS __attribute__((tls_model("initial-exec")))

/* state.c */
extern ptmd_track_state ptmalloc_dump_track;
extern PTMD_TRACK_TLS __thread int ptmd_track_busy; /* this thread is inside the tracker */
void ptmd_track_lock(void);
void ptmd_track_unlock(void);
/* A zeroed mapping recorded among the state's regions (the lock held), or NULL. */
void *ptmd_track_map(size_t bytes);
void ptmd_track_unmap(void *p, size_t bytes);
/* One line to stderr, "ptmalloc-dump --track: " first; nothing allocated. */
void ptmd_track_say(const char *a, const char *b);

/* stacks.c: records in flight (a backtrace may hold the loader's lock, which fork does not reset). */
extern volatile int ptmd_track_forking;
extern volatile int ptmd_track_in_flight;

/* sampler.c: each thread counts bytes down to its next sample. */
extern PTMD_TRACK_TLS __thread int64_t ptmd_track_countdown;
int ptmd_track_draw(void); /* after the count crossed zero: 1 to sample this block */
void ptmd_track_sampler_start(uint64_t mean, uint64_t seed);
void ptmd_track_sampler_forked(void); /* in a fork's child: its own random draws */
static inline int ptmd_track_sampled(size_t n)
{
    int64_t left = ptmd_track_countdown - (int64_t)(n > INT64_MAX / 2 ? INT64_MAX / 2 : n);
    ptmd_track_countdown = left;
    return left <= 0 && ptmd_track_draw();
}

/* tables.c */
extern const uint8_t *volatile ptmd_track_filter; /* NULL until tracking starts */
int ptmd_track_tables_start(void);
/* A Ruby frame as the stack walk found it, its names still in Ruby's strings. */
typedef struct {
    uint64_t frame;
    const char *path, *label; /* NULL for none */
    size_t path_len, label_len;
    int32_t line;
} ptmd_track_rframe;
/* Under the lock: the block's stack interned and its slot filled (or counted as dropped). */
void ptmd_track_insert(uint64_t address, uint64_t size, const uint64_t *pcs, int n_pcs, const ptmd_track_rframe *ruby,
                       int n_ruby);
void ptmd_track_remove(uint64_t address);
uint64_t ptmd_track_hash_bytes(const void *p, size_t n, uint64_t h);
static inline size_t ptmd_track_filter_slot(uint64_t address)
{
    return (size_t)((address >> 4) * 0x9e3779b97f4a7c15ull >> 48);
}
/* free and realloc: whether address may be a sampled block (then ptmd_track_remove). */
static inline int ptmd_track_maybe(const void *p)
{
    const uint8_t *f = ptmd_track_filter;
    return f && f[ptmd_track_filter_slot((uint64_t)(uintptr_t)p)] != 0;
}

/* stacks.c */
void ptmd_track_stacks_start(void);
void ptmd_track_record(void *p, size_t n); /* a sampled block: its stack and its slot */

#endif
