/* Owned malloc bytes by the owner's GC age (ptmd_ruby_object.flags): old, young, or garbage the
 * pending lazy sweep has not freed yet (whatever its age). */
#include "analysis/age.h"

#include <string.h>

void ptmd_age_summary(const ptmd_view *v, const ptmd_attribution *a, ptmd_age_totals *out)
{
    size_t i;
    memset(out, 0, sizeof(*out));
    for (i = 0; i < v->n_ruby_objects; i++) {
        uint32_t f = v->ruby_objects[i].flags;
        if (f & PTMD_OF_GARBAGE) out->garbage_objects++;
        else if (f & PTMD_OF_OLD) out->old_objects++;
        else out->young_objects++;
    }
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t o = a->owner[i], f;
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        if (!o || o == UINT32_MAX || o > v->n_ruby_objects) continue;
        f = v->ruby_objects[o - 1].flags;
        if (f & PTMD_OF_GARBAGE) {
            out->garbage_bytes += size;
            out->garbage_chunks++;
        } else if (f & PTMD_OF_OLD) {
            out->old_bytes += size;
            out->old_chunks++;
        } else {
            out->young_bytes += size;
            out->young_chunks++;
        }
    }
}
