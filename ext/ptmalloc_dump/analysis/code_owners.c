/* Code owners: every allocated chunk whose owner object has a code record goes to that record's module. */
#include "analysis/code_owners.h"

#include <string.h>

long ptmd_code_record(const ptmd_view *v, uint64_t address)
{
    size_t lo = 0, hi = v->n_ruby_code;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->ruby_code[mid].address < address) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n_ruby_code && v->ruby_code[lo].address == address ? (long)lo : -1;
}

void ptmd_code_owners(const ptmd_view *v, const ptmd_attribution *a, ptmd_code_totals *out)
{
    size_t i;
    uint32_t last_owner = 0;
    long rec = -1;
    memset(out->name_bytes, 0, v->n_ruby_code_names * sizeof(uint64_t));
    memset(out->name_chunks, 0, v->n_ruby_code_names * sizeof(uint64_t));
    memset(out->record_bytes, 0, v->n_ruby_code * sizeof(uint64_t));
    out->bytes = out->chunks = 0;
    if (!v->ruby_code) return;
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t o = a->owner[i];
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        uint32_t module;
        if (!o || o == UINT32_MAX || o > v->n_ruby_objects || !ptmd_rec_is_allocated(&v->chunks[i])) continue;
        if (o != last_owner) {
            last_owner = o;
            rec = ptmd_code_record(v, v->ruby_objects[o - 1].address);
        }
        if (rec < 0 || (module = v->ruby_code[rec].module) == PTMD_NO_NAME) continue;
        out->name_bytes[module] += size;
        out->name_chunks[module]++;
        out->record_bytes[rec] += size;
        out->bytes += size;
        out->chunks++;
    }
}
