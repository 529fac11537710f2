/* Load-time attribution of malloc chunks to Ruby objects: a slot word equal to an in-use chunk's user
 * address ties the chunk to the object (first owner wins); with recorded references, chunks reachable
 * from an owned chunk belong to the same owner. Plain C; runs offline. */
#ifndef PTMD_ATTRIBUTION_H
#define PTMD_ATTRIBUTION_H

#include "analysis/summary.h"

/* Owner categories, as the byte map's owner layer colours them. */
enum {
    PTMD_OWN_NONE = 0,        /* not an in-use chunk */
    PTMD_OWN_STRING = 1, PTMD_OWN_ARRAY = 2, PTMD_OWN_HASH = 3, PTMD_OWN_OBJECT = 4, PTMD_OWN_DATA = 5,
    PTMD_OWN_IMEMO = 6, PTMD_OWN_OTHER_RUBY = 7, PTMD_OWN_RUBY_PAGE = 8, PTMD_OWN_NATIVE = 9,
    PTMD_OWN_COUNT = 10
};

typedef struct {
    uint32_t *owner;          /* per chunk: object index + 1, or 0 */
    uint8_t *category;        /* per chunk: PTMD_OWN_* */
    uint8_t *direct;          /* per chunk: 1 when the owning object's slot holds its address */
    uint64_t ambiguous;       /* chunks whose address two different objects hold */
    uint64_t direct_count, via_refs;
} ptmd_attribution;

/* Arrays must hold v->n_chunks entries each. Returns 0, or -1 when out of memory. */
int ptmd_attribute(const ptmd_view *v, ptmd_attribution *a);

/* Category of a Ruby builtin type (ruby_value_type). */
int ptmd_owner_category(int ruby_type);

#endif
