/* Who keeps Ruby's memory alive: over the object graph a dump recorded (RUBY_EDGES, RUBY_ROOTS), the
 * dominator tree from one super-root above every root, what each object retains (the malloc chunks
 * owned by every object it dominates, their slots and their count), a shortest path from a root to
 * each object, and the holders worth naming. Plain C; runs offline. */
#ifndef PTMD_RETENTION_H
#define PTMD_RETENTION_H

#include "analysis/attribution.h"
#include "analysis/dominators.h"

/* Columns of ptmd_retention.retained and .self. */
enum { PTMD_RET_BYTES, PTMD_RET_SLOT_BYTES, PTMD_RET_OBJECTS, PTMD_RET_COLUMNS };

#define PTMD_RET_NONE UINT32_MAX

typedef struct {
    uint32_t n_objects;   /* node n_objects is the super-root */
    ptmd_dominators dom;  /* over n_objects + 1 nodes */
    uint64_t *self;       /* (n_objects + 1) * PTMD_RET_COLUMNS: each object's own chunks, slot, 1 */
    uint64_t *retained;   /* (n_objects + 1) * PTMD_RET_COLUMNS, 0 for objects no root reaches */
    uint32_t *parent;     /* per object, on a shortest path from a root: the object before it, n_objects
                             for a root, PTMD_RET_NONE when no root reaches it */
    uint32_t *via;        /* the RUBY_EDGES index of the reference from parent; for a root, its RUBY_ROOTS
                             index */
    uint64_t *edge_start; /* n_objects + 1: each object's first RUBY_EDGES index */
} ptmd_retention;

/* Builds r for a dump with a graph (v->ruby_graph) and its attribution: 0, or -1 when memory runs
 * out. */
int ptmd_retention_build(const ptmd_view *v, const ptmd_attribution *a, ptmd_retention *r);
void ptmd_retention_free(ptmd_retention *r);

/* The holders worth naming, largest retained bytes first, at most `limit` (up to 4096) into out
 * (object indices); returns how many. A holder is an object none of whose dominated objects retains
 * more than half of what it retains: of a chain of objects each retaining most of the one before (a
 * module, its constant's Hash), the deepest. */
size_t ptmd_retention_holders(const ptmd_retention *r, size_t limit, uint32_t *out);

/* The name of a reference (a RUBY_EDGES index): its RUBY_EDGE_NAMES entry, or NULL. */
const ptmd_ruby_edge_name *ptmd_retention_edge_name(const ptmd_view *v, uint64_t edge);

#endif
