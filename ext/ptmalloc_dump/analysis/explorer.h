/* The compact arrays the report's heap explorer reads: one entry per chunk and per page, and the Ruby
 * objects that own chunks, renumbered densely. Plain C; runs offline. */
#ifndef PTMD_EXPLORER_H
#define PTMD_EXPLORER_H

#include "analysis/analysis.h"
#include "analysis/attribution.h"

/* Largest chunk size the explorer's 32-bit size field holds exactly (in 16-byte units). */
#define PTMD_EXPLORER_MAX_SIZE16 0xffffffffull

/* sizes[i] = chunk i's size / 16 (saturated), states[i] = its state | chunk flags << 4 (n_chunks
 * each); pages[p] = page p's PTMD_PAGE_* flags | page class << 4 (n_pages). */
void ptmd_explorer_chunks(const ptmd_view *v, const ptmd_page_usage *usage, uint32_t *sizes, uint8_t *states,
                          uint8_t *pages);

/* Renumbers the objects that own chunks in order of first use: local[i] = k + 1 for chunk i owned by
 * the object objs[k], 0 for none. remap must hold v->n_ruby_objects zeroed entries, objs as many.
 * Returns the number of owning objects. */
size_t ptmd_explorer_owners(const ptmd_view *v, const ptmd_attribution *a, uint32_t *local, uint32_t *remap,
                            uint32_t *objs);

#endif
