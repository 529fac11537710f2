/* Allocation sites at load: each traced stack's live objects and what they own (the attribution's
 * chunks, their slots). Plain C; runs offline. */
#ifndef PTMD_SITES_H
#define PTMD_SITES_H

#include "analysis/attribution.h"

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

#endif
