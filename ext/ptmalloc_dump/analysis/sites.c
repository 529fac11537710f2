/* Allocation sites at load: the traced objects joined to the Ruby objects the pass recorded, and the
 * chunks the attribution gives those objects. */
#include "analysis/sites.h"
#include "format/glibc.h"

#include "format/reader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The index of the recorded object at address (order: the objects by address), or UINT32_MAX. */
static uint32_t object_at(const ptmd_view *v, const uint32_t *order, uint64_t address)
{
    size_t lo = 0, hi = v->n_ruby_objects;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t a = v->ruby_objects[order[mid]].address;
        if (a == address) return order[mid];
        if (a < address) lo = mid + 1;
        else hi = mid;
    }
    return UINT32_MAX;
}

int ptmd_site_totals(const ptmd_view *v, const ptmd_attribution *a, const uint8_t *classes, ptmd_stack_totals *out)
{
    size_t n = v->n_ruby_objects, i;
    uint64_t *bytes = calloc(n ? n : 1, sizeof(uint64_t)), *chunks = calloc(n ? n : 1, sizeof(uint64_t));
    uint32_t *order = malloc((n ? n : 1) * sizeof(uint32_t));
    memset(out, 0, v->n_ruby_stacks * sizeof(*out));
    if (!bytes || !chunks || !order) {
        free(bytes);
        free(chunks);
        free(order);
        return -1;
    }
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t o = a->owner[i];
        if (!o || o == UINT32_MAX) continue;
        bytes[o - 1] += ptmd_rec_size(&v->chunks[i]);
        chunks[o - 1]++;
    }
    ptmd_object_order(v, order);
    for (i = 0; i < v->n_ruby_traced; i++) {
        const ptmd_ruby_traced *t = &v->ruby_traced[i];
        uint32_t o = object_at(v, order, t->address);
        ptmd_stack_totals *s = &out[t->stack];
        if (o == UINT32_MAX) continue;
        if (classes && (v->ruby_objects[o].klass >= v->n_ruby_names || !classes[v->ruby_objects[o].klass])) continue;
        if (v->ruby_objects[o].flags & PTMD_OF_GARBAGE) {
            s->garbage++;
            s->garbage_bytes += bytes[o];
            continue;
        }
        s->objects++;
        s->bytes += bytes[o];
        s->chunks += chunks[o];
        s->slot_bytes += ptmd_view_slot_size(v, t->address);
    }
    free(bytes);
    free(chunks);
    free(order);
    return 0;
}

double ptmd_native_weight(uint64_t size, uint64_t mean)
{
    double p = -expm1(-(double)(size ? size : 1) / (double)(mean ? mean : 1));
    return p > 0 ? 1.0 / p : 1.0;
}

/* Whether chunk c belongs to an object whose class is flagged. */
static int of_class(const ptmd_view *v, const ptmd_attribution *a, const uint8_t *classes, long c)
{
    uint32_t owner = a ? a->owner[c] : 0;
    if (!owner || owner == UINT32_MAX || owner - 1 >= v->n_ruby_objects) return 0;
    uint32_t klass = v->ruby_objects[owner - 1].klass;
    return klass < v->n_ruby_names && classes[klass];
}

void ptmd_native_site_totals(const ptmd_view *v, const ptmd_attribution *a, const ptmd_owners *o,
                             const uint8_t *classes, ptmd_native_totals *out)
{
    memset(out, 0, v->n_native_stacks * sizeof(*out));
    if (!v->native_track) return;
    for (size_t i = 0; i < v->n_native_samples; i++) {
        const ptmd_native_sample *s = &v->native_samples[i];
        long c = ptmd_view_find_chunk(v, ptmd_mem2chunk(s->address), 0);
        if (c < 0 || !ptmd_rec_is_allocated(&v->chunks[c]) || s->stack >= v->n_native_stacks) continue;
        if (classes && !of_class(v, a, classes, c)) continue;
        double w = ptmd_native_weight(s->size, v->native_track->mean_bytes),
               bytes = w * (double)ptmd_rec_size(&v->chunks[c]);
        ptmd_native_totals *t = &out[s->stack];
        t->samples++;
        t->count += w;
        t->bytes += bytes;
        t->kind_bytes[o && o->kind ? o->kind[c] : PTMD_OK_NONE] += bytes;
    }
}
