/* The allocation tracker's memory as a dump reads it: the state at the tracker library's exported
 * symbol ptmalloc_dump_track and the tables it maps. The library writes it (ext/ptmalloc_dump_track);
 * the capture reads it in this process, in a fork snapshot and in another process or a core, so every
 * field is a fixed-width integer and every table is named by its address. */
#ifndef PTMD_TRACK_ABI_H
#define PTMD_TRACK_ABI_H

#include <stdint.h>

#define PTMD_TRACK_SYMBOL "ptmalloc_dump_track"
#define PTMD_TRACK_MAGIC 0x316b637274646d70ull /* "pmdtrck1" */
#define PTMD_TRACK_ABI 1

#define PTMD_TRACK_MAX_NATIVE 48 /* the innermost native frames kept */
#define PTMD_TRACK_MAX_RUBY 64   /* the innermost Ruby frames kept */
#define PTMD_TRACK_NO_NAME UINT32_MAX

/* A sampled block still allocated: one slot of an open-addressing table keyed by address. */
typedef struct {
    uint64_t address; /* what malloc returned; 0: an empty slot */
    uint64_t size;    /* the bytes asked for */
    uint32_t stack;   /* index into stacks */
    uint32_t state;   /* PTMD_TRACK_SLOT_* */
} ptmd_track_sample;
enum { PTMD_TRACK_SLOT_EMPTY = 0, PTMD_TRACK_SLOT_USED = 1, PTMD_TRACK_SLOT_DELETED = 2 };

/* A distinct stack: its native program counters in pcs, innermost first, and its Ruby frames, as
 * indices into ruby_frames in ruby_refs, innermost first. */
typedef struct {
    uint64_t hash;
    uint32_t first_pc, first_ruby;
    uint16_t n_pcs, n_ruby;
    uint32_t reserved;
} ptmd_track_stack;

/* A distinct Ruby frame as rb_profile_frames gave it, its names copied into names when it was first
 * seen (the frame's iseq can be freed later; the copy stays). */
typedef struct {
    uint64_t frame; /* the frame's VALUE (an iseq or a method entry) */
    uint32_t path;  /* offset of a NUL-terminated name in names, PTMD_TRACK_NO_NAME for a C method */
    uint32_t label; /* the method or block ("block in work") */
    int32_t line;   /* the line running, 0 for a C method */
    uint32_t reserved;
} ptmd_track_ruby_frame;

#define PTMD_TRACK_F_RUBY (1u << 0) /* Ruby's profiling functions were found: Ruby frames are kept */
#define PTMD_TRACK_F_FULL (1u << 1) /* a table reached its cap: later samples were dropped */

/* A mapping of the tracker's own (tables and their indexes). */
typedef struct {
    uint64_t start, length;
} ptmd_track_region;
#define PTMD_TRACK_MAX_REGIONS 16

/* The state. lock is 0 when free; the writer holds it while it changes a table, and so does a reader
 * in the same process. A table's address and capacity change together under the lock (a table grows
 * into a new mapping). */
typedef struct {
    uint64_t magic;
    uint32_t abi;
    volatile uint32_t lock;
    uint64_t mean_bytes; /* the mean of the byte sampler's exponential draws */
    uint64_t started_ns; /* CLOCK_REALTIME when tracking started */
    uint32_t flags;      /* PTMD_TRACK_F_* */
    uint32_t pid;        /* the process that started tracking */
    uint64_t samples, sample_slots, n_samples, n_deleted;
    uint64_t stacks, stack_cap, n_stacks;
    uint64_t pcs, pc_cap, n_pcs;
    uint64_t ruby_frames, ruby_frame_cap, n_ruby_frames;
    uint64_t ruby_refs, ruby_ref_cap, n_ruby_refs;
    uint64_t names, names_cap, names_len;
    uint64_t sampled;      /* samples taken */
    uint64_t freed;        /* sampled blocks freed or reallocated since */
    uint64_t dropped;      /* samples not kept: a table was full */
    uint64_t mapped_bytes; /* the regions' length */
    uint32_t n_regions, reserved;
    ptmd_track_region regions[PTMD_TRACK_MAX_REGIONS]; /* its share of RSS is "allocation tracking" */
} ptmd_track_state;

#endif
