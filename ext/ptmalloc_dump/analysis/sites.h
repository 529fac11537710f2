/* Allocation sites at load: each traced stack's live objects and what they own (the attribution's
 * chunks, their slots). Plain C; runs offline. */
#ifndef PTMD_SITES_H
#define PTMD_SITES_H

#include "analysis/attribution.h"
#include "analysis/owners.h"

typedef struct {
    uint64_t objects;       /* live traced objects the Ruby pass recorded */
    uint64_t bytes;         /* the malloc chunks they own */
    uint64_t chunks;        /* how many */
    uint64_t slot_bytes;    /* their slots */
    uint64_t garbage;       /* traced objects that are garbage awaiting the lazy sweep (not counted above) */
    uint64_t garbage_bytes; /* the chunks they still own */
} ptmd_stack_totals;

/* out[v->n_ruby_stacks], zeroed here. A traced object the Ruby pass did not record (freed between the
 * trace and the pass's walk) counts nowhere; with `classes` (a flag per RUBY_NAMES entry), only objects
 * whose class entry is flagged count. Returns 0, or -1 when out of memory. */
int ptmd_site_totals(const ptmd_view *v, const ptmd_attribution *a, const uint8_t *classes, ptmd_stack_totals *out);

/* A tracked stack's blocks still allocated at the dump, each sample weighted by the inverse of the
 * chance the byte sampler took it (1 - exp(-size / mean)): estimates of the whole. */
typedef struct {
    uint64_t samples;                 /* sampled blocks found allocated */
    double count, bytes;              /* estimated blocks and chunk bytes */
    double kind_bytes[PTMD_OK_COUNT]; /* bytes by who keeps the chunk: Ruby, a root, nothing (owners) */
} ptmd_native_totals;

/* The weight of a sample of `size` bytes: 1 / (1 - exp(-size / mean)). */
double ptmd_native_weight(uint64_t size, uint64_t mean);
/* out[v->n_native_stacks], zeroed here. A sample whose block is not an allocated chunk starting where
 * malloc's pointer says (freed while the dump ran) counts nowhere; o may be NULL (no ROOTS section):
 * then every byte is kind none. With `classes` (a flag per RUBY_NAMES entry), only blocks the
 * attribution gives to an object of a flagged class count. */
void ptmd_native_site_totals(const ptmd_view *v, const ptmd_attribution *a, const ptmd_owners *o,
                             const uint8_t *classes, ptmd_native_totals *out);

#endif
