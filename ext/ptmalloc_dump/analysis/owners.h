/* Who keeps each allocated chunk alive: a Ruby object, a root outside malloc (anchored), or nothing
 * (leaked), as vmware/chap classifies the chunks of a core, here over a dump's pointer graph and
 * roots. A chunk that no pointer to its start reaches, but a pointer into its middle from a root or a
 * reached chunk does, is held (interior). Without the Ruby pass, what no root reaches may still be a
 * Ruby object's: unknown, not leaked. Plain C; runs offline. */
#ifndef PTMD_OWNERS_H
#define PTMD_OWNERS_H

#include "analysis/attribution.h"

#define PTMD_OWNER_KINDS(X)                                                                                            \
    X(PTMD_OK_NONE, 0, "none")         /* not an allocated chunk */                                                    \
    X(PTMD_OK_RUBY, 1, "ruby")         /* owned by, or reachable from, a Ruby object */                                \
    X(PTMD_OK_ANCHORED, 2, "anchored") /* reachable from a root, through native chunks only */                         \
    X(PTMD_OK_LEAKED, 3, "leaked")     /* reachable from no root and no Ruby object */                                 \
    X(PTMD_OK_UNKNOWN, 4, "unknown")   /* reachable from no root, in a dump without Ruby objects */                    \
    X(PTMD_OK_INTERIOR, 5, "interior") /* reached only through a pointer into a chunk past its start */
enum { PTMD_OWNER_KINDS(PTMD_ENUM_CONSTANT) PTMD_OK_COUNT = 6 };
extern const char *const ptmd_owner_kind_names[PTMD_OK_COUNT];

#define PTMD_NO_ANCHOR 0xffffffffu

typedef struct {
    uint8_t *kind;    /* per chunk: PTMD_OK_* */
    uint32_t *anchor; /* per chunk: the root an anchored (or interior) chunk is reached from, else PTMD_NO_ANCHOR */
    uint8_t *direct;  /* per chunk: 1 when a word of that root holds its address itself */
} ptmd_owners;

/* 1 when the dump recorded what the classification needs (the ROOTS section). */
int ptmd_owners_available(const ptmd_view *v);
/* Arrays must hold v->n_chunks entries each; a is the view's attribution. 0, or -1 when out of memory. */
int ptmd_owners_classify(const ptmd_view *v, const ptmd_attribution *a, ptmd_owners *o);

#endif
