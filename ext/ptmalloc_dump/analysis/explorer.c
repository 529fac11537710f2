/* Packing a loaded view for the heap explorer (lib/ptmalloc_dump/output/explorer.rb). */
#include "analysis/explorer.h"

#include <stdlib.h>

void ptmd_explorer_chunks(const ptmd_view *v, const ptmd_page_usage *usage, uint32_t *sizes, uint8_t *states,
                          uint8_t *pages)
{
    size_t i;
    for (i = 0; i < v->n_chunks; i++) {
        const ptmd_chunk_rec *c = &v->chunks[i];
        uint64_t units = ptmd_rec_size(c) / 16;
        uint64_t flags = (c->word >> PTMD_CF_SHIFT) & 0xf;
        sizes[i] = units > PTMD_EXPLORER_MAX_SIZE16 ? (uint32_t)PTMD_EXPLORER_MAX_SIZE16 : (uint32_t)units;
        states[i] = (uint8_t)(ptmd_rec_state(c) | flags << 4);
    }
    for (i = 0; i < v->n_pages; i++) {
        uint8_t f = v->pages[i], low = f & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED);
        if (ptmd_page_shared(v->meta, f)) low |= PTMD_EXPLORER_PAGE_SHARED;
        else if ((f & PTMD_PAGE_PRESENT) && !ptmd_page_sharing_known(v->meta, f)) low |= PTMD_EXPLORER_PAGE_UNKNOWN;
        pages[i] = (uint8_t)(low | ptmd_page_classify(&usage[i], f, v->meta->page_size) << 4);
    }
}

size_t ptmd_explorer_owners(const ptmd_view *v, const ptmd_attribution *a, uint32_t *local, uint32_t *remap,
                            uint32_t *objs)
{
    size_t i, n = 0;
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t o = a->owner[i];
        local[i] = 0;
        if (!o || o == UINT32_MAX || o > v->n_ruby_objects) continue;
        if (!remap[o - 1]) {
            objs[n] = o - 1;
            remap[o - 1] = (uint32_t)++n;
        }
        local[i] = remap[o - 1];
    }
    return n;
}

static int key_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void ptmd_tcache_keys(const ptmd_view *v, uint64_t *keys)
{
    size_t k;
    for (k = 0; k < v->n_tcache_entries; k++) keys[k] = (uint64_t)v->tcache_entries[k].chunk << 32 | k;
    qsort(keys, v->n_tcache_entries, sizeof(*keys), key_cmp);
}

long ptmd_tcache_entry_of(const ptmd_view *v, const uint64_t *keys, uint64_t ci)
{
    size_t lo = 0, hi = v->n_tcache_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] >> 32 < ci) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n_tcache_entries && keys[lo] >> 32 == ci ? (long)(keys[lo] & 0xffffffffu) : -1;
}

void ptmd_explorer_tcache(const ptmd_view *v, uint32_t *out)
{
    size_t k;
    for (k = 0; k < v->n_tcache_entries; k++) {
        const ptmd_tcache_entry *e = &v->tcache_entries[k];
        out[3 * k] = e->chunk;
        out[3 * k + 1] = e->thread;
        out[3 * k + 2] = (uint32_t)e->bin | (uint32_t)e->position << 16;
    }
}
