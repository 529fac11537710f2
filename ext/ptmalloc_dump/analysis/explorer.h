/* The compact arrays the report's heap explorer reads: one entry per chunk and per page, and the Ruby
 * objects that own chunks, renumbered densely. Plain C; runs offline. */
#ifndef PTMD_EXPLORER_H
#define PTMD_EXPLORER_H

#include "analysis/analysis.h"
#include "analysis/attribution.h"

/* Largest chunk size the explorer's 32-bit size field holds exactly (in 16-byte units). */
#define PTMD_EXPLORER_MAX_SIZE16 0xffffffffull

/* The low bits of a page's explorer byte besides PTMD_PAGE_PRESENT and PTMD_PAGE_SWAPPED: what the
 * dump says of its sharing (ptmd_page_shared), or that it cannot say. */
#define PTMD_EXPLORER_PAGE_SHARED 4
#define PTMD_EXPLORER_PAGE_UNKNOWN 8

/* sizes[i] = chunk i's size / 16 (saturated), states[i] = its state | chunk flags << 4 (n_chunks
 * each); pages[p] = page p's PTMD_PAGE_PRESENT and PTMD_PAGE_SWAPPED, PTMD_EXPLORER_PAGE_SHARED or
 * PTMD_EXPLORER_PAGE_UNKNOWN, | page class << 4 (n_pages). */
void ptmd_explorer_chunks(const ptmd_view *v, const ptmd_page_usage *usage, uint32_t *sizes, uint8_t *states,
                          uint8_t *pages);

/* Renumbers the objects that own chunks in order of first use: local[i] = k + 1 for chunk i owned by
 * the object objs[k], 0 for none. remap must hold v->n_ruby_objects zeroed entries, objs as many.
 * Returns the number of owning objects. */
size_t ptmd_explorer_owners(const ptmd_view *v, const ptmd_attribution *a, uint32_t *local, uint32_t *remap,
                            uint32_t *objs);

/* keys[k] = chunk << 32 | k for each TCACHE_ENTRIES record k, sorted (v->n_tcache_entries keys). */
void ptmd_tcache_keys(const ptmd_view *v, uint64_t *keys);
/* The record naming chunk ci (the first, should a damaged file name it twice), found in keys from
 * ptmd_tcache_keys; -1 when no thread's tcache lists it. */
long ptmd_tcache_entry_of(const ptmd_view *v, const uint64_t *keys, uint64_t ci);

/* For each tcache entry k: out[3k] = its chunk, out[3k + 1] = its thread record, out[3k + 2] = its
 * bin | position << 16 (3 * v->n_tcache_entries entries). */
void ptmd_explorer_tcache(const ptmd_view *v, uint32_t *out);

#endif
