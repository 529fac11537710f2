/* Old objects that hold new ones, between two dumps of one process. */
#include "analysis/interface.h"
#include "format/index.h"

#include <stdlib.h>
#include <string.h>

/* The key (the class's address) of each RUBY_NAMES entry, by index. */
static uint64_t *name_keys(const ptmd_view *v)
{
    uint64_t *keys = calloc(v->n_ruby_names ? v->n_ruby_names : 1, sizeof(uint64_t));
    size_t off = 0, i = 0;
    ptmd_view_name n;
    if (!keys) return NULL;
    while (i < v->n_ruby_names && ptmd_view_next_name(v->ruby_names, v->ruby_names_len, &off, &n)) keys[i++] = n.key;
    return keys;
}

static uint64_t class_key(const ptmd_view *v, const uint64_t *keys, uint32_t klass)
{
    return klass < v->n_ruby_names ? keys[klass] : 0;
}

/* Whether each object of `after` is new: no object of `before` at its address with its type and
 * class. */
static uint8_t *new_objects(const ptmd_view *before, const ptmd_view *after)
{
    size_t nb = before->n_ruby_objects, na = after->n_ruby_objects, i;
    uint32_t *order = malloc((nb ? nb : 1) * sizeof(uint32_t));
    uint64_t *kb = name_keys(before), *ka = name_keys(after);
    uint8_t *fresh = malloc(na ? na : 1);
    if (order && kb && ka && fresh) {
        ptmd_object_order(before, order);
        for (i = 0; i < na; i++) {
            const ptmd_ruby_object *o = &after->ruby_objects[i];
            size_t lo = 0, hi = nb;
            fresh[i] = 1;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const ptmd_ruby_object *b = &before->ruby_objects[order[mid]];
                if (b->address < o->address) lo = mid + 1;
                else if (b->address > o->address) hi = mid;
                else {
                    fresh[i] = (b->flags & PTMD_OF_GARBAGE) || b->type != o->type ||
                               class_key(before, kb, b->klass) != class_key(after, ka, o->klass);
                    break;
                }
            }
        }
    } else {
        free(fresh);
        fresh = NULL;
    }
    free(order);
    free(kb);
    free(ka);
    return fresh;
}

static int by_new_bytes(const void *a, const void *b, void *ctx)
{
    const ptmd_interface_rec *x = a, *y = b;
    (void)ctx;
    if (x->new_bytes != y->new_bytes) return x->new_bytes > y->new_bytes ? -1 : 1;
    return x->object < y->object ? -1 : x->object > y->object;
}

long ptmd_interface(const ptmd_view *before, const ptmd_view *after, const ptmd_retention *ra, ptmd_interface_rec *out,
                    size_t limit)
{
    uint8_t *fresh = new_objects(before, after);
    ptmd_interface_rec *all;
    size_t n = after->n_ruby_objects, count = 0, i;
    if (!fresh) return -1;
    all = malloc((n ? n : 1) * sizeof(*all));
    if (!all) {
        free(fresh);
        return -1;
    }
    for (i = 0; i < n; i++) {
        uint64_t k;
        ptmd_interface_rec rec = { (uint32_t)i, 0, 0 };
        if (fresh[i]) continue;
        for (k = ra->edge_start[i]; k < ra->edge_start[i + 1]; k++) {
            uint32_t d = after->ruby_edges[k];
            if (!fresh[d]) continue;
            rec.new_objects++;
            rec.new_bytes += ra->retained[(size_t)d * PTMD_RET_COLUMNS + PTMD_RET_BYTES];
        }
        if (rec.new_objects) all[count++] = rec;
    }
    ptmd_sort(all, count, sizeof(*all), by_new_bytes, NULL);
    if (count > limit) count = limit;
    memcpy(out, all, count * sizeof(*all));
    free(all);
    free(fresh);
    return (long)count;
}
