/* Packing a loaded view for the heap explorer (lib/ptmalloc_dump/output/explorer.rb). */
#include "analysis/explorer.h"

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
    for (i = 0; i < v->n_pages; i++)
        pages[i] = (uint8_t)((v->pages[i] & 0xf) | ptmd_page_classify(&usage[i], v->pages[i], v->meta->page_size) << 4);
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
