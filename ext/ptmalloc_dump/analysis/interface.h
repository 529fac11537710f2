/* The interface between two dumps of one process, as memdump draws it: the objects both dumps hold
 * that reference objects only the later one holds, which is where new memory hangs from the old.
 * Plain C; runs offline. */
#ifndef PTMD_INTERFACE_H
#define PTMD_INTERFACE_H

#include "analysis/retention.h"

typedef struct {
    uint32_t object;      /* index into the later dump's RUBY_OBJECTS */
    uint32_t new_objects; /* new objects it references */
    uint64_t new_bytes;   /* what those retain in the later dump */
} ptmd_interface_rec;

/* An object of `after` is old when `before` holds a live object at its address of the same type and
 * class (the class's address: the same class object). A slot freed by a GC between the dumps and
 * taken again by an object of the same type and class makes a new object look old: the figures are
 * a floor, exact when no GC ran in between. Fills out with the old objects of `after` that
 * reference new ones, most new bytes first, at most `limit`; returns how many, or -1 when memory
 * runs out. `ra` is after's retention. */
long ptmd_interface(const ptmd_view *before, const ptmd_view *after, const ptmd_retention *ra, ptmd_interface_rec *out,
                    size_t limit);

#endif
