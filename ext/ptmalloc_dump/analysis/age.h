/* Live or garbage: malloc memory owned by old objects (survivors of GC marks), by young ones (made
 * since, and possibly garbage awaiting the next GC), and by objects the latest GC found dead whose
 * lazy sweep has not freed them yet. Plain C; runs offline. */
#ifndef PTMD_AGE_H
#define PTMD_AGE_H

#include "analysis/attribution.h"

typedef struct {
    uint64_t old_bytes, old_chunks, young_bytes, young_chunks;
    uint64_t garbage_bytes, garbage_chunks;
    uint64_t old_objects, young_objects, garbage_objects;
} ptmd_age_totals;

/* Allocated chunks by the age of the object that owns them, and the objects by age. */
void ptmd_age_summary(const ptmd_view *v, const ptmd_attribution *a, ptmd_age_totals *out);

#endif
