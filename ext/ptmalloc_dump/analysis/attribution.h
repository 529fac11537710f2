/* Load-time attribution of malloc chunks to Ruby objects: a slot word equal to an in-use chunk's user
 * address ties the chunk to the object (first owner wins); with recorded references, chunks reachable
 * from an owned chunk belong to the same owner. Plain C; runs offline. */
#ifndef PTMD_ATTRIBUTION_H
#define PTMD_ATTRIBUTION_H

#include "analysis/summary.h"

/* Owner categories, as the byte map's owner layer colours them (a list as in format.h). */
#define PTMD_OWNER_CATEGORIES(X)                                                                                       \
    X(PTMD_OWN_NONE, 0, "none") /* not an allocated chunk */                                                           \
    X(PTMD_OWN_STRING, 1, "string")                                                                                    \
    X(PTMD_OWN_ARRAY, 2, "array")                                                                                      \
    X(PTMD_OWN_HASH, 3, "hash")                                                                                        \
    X(PTMD_OWN_OBJECT, 4, "object")                                                                                    \
    X(PTMD_OWN_DATA, 5, "data")                                                                                        \
    X(PTMD_OWN_IMEMO, 6, "imemo")                                                                                      \
    X(PTMD_OWN_OTHER_RUBY, 7, "other_ruby")                                                                            \
    X(PTMD_OWN_RUBY_PAGE, 8, "ruby_page") /* Ruby's own object page (Ruby 2.x and 3.0) */                              \
    X(PTMD_OWN_NATIVE, 9, "native")       /* allocated, no Ruby owner */
enum { PTMD_OWNER_CATEGORIES(PTMD_ENUM_CONSTANT) PTMD_OWN_COUNT = 10 };
extern const char *const ptmd_owner_category_names[PTMD_OWN_COUNT];

typedef struct {
    uint32_t *owner;    /* per chunk: object index + 1, or 0 */
    uint8_t *category;  /* per chunk: PTMD_OWN_* */
    uint8_t *direct;    /* per chunk: 1 when the owning object's slot holds its address */
    uint64_t ambiguous; /* chunks whose address two different objects hold */
    uint64_t direct_count, via_refs;
} ptmd_attribution;

/* Arrays must hold v->n_chunks entries each. Returns 0, or -1 when out of memory. */
int ptmd_attribute(const ptmd_view *v, ptmd_attribution *a);

/* Category of a Ruby builtin type (ruby_value_type). */
int ptmd_owner_category(int ruby_type);

/* order[0 .. v->n_ruby_objects) = the object indices by address. */
void ptmd_object_order(const ptmd_view *v, uint32_t *order);

/* Allocated bytes and chunks by owner: per category, per builtin type of the owning object, and per
 * entry of the RUBY_NAMES section (class of the owner, and typed-data type), indexed like the names. */
#define PTMD_RUBY_TYPES 32
typedef struct {
    uint64_t category_bytes[PTMD_OWN_COUNT], category_chunks[PTMD_OWN_COUNT];
    uint64_t type_bytes[PTMD_RUBY_TYPES], type_chunks[PTMD_RUBY_TYPES];
    uint64_t *class_bytes, *class_chunks; /* v->n_ruby_names entries each */
    uint64_t *class_garbage_bytes;        /* of class_bytes, owned by objects marked garbage */
    uint64_t *data_type_bytes, *data_type_chunks;
    uint64_t ruby_page_bytes; /* all of Ruby's object pages, in malloc or not */
} ptmd_owner_totals;
/* The five arrays must hold v->n_ruby_names entries each (zeroed here). */
void ptmd_owner_summary(const ptmd_view *v, const ptmd_attribution *a, ptmd_owner_totals *out);

#endif
