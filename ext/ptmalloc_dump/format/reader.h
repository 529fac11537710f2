/* Reading a dump: every length, count, index and address checked before use. Plain C. */
#ifndef PTMD_READER_H
#define PTMD_READER_H

#include "format/ptmd.h"
#include "analysis/summary.h"

/* Parses and validates data[0..len) (8-byte aligned) into v, whose arrays point into data.
 * On failure err says what is wrong (PTMD_E_FORMAT); `name` is used in messages. */
int ptmd_read_view(const unsigned char *data, size_t len, const char *name, ptmd_view *v, ptmd_err *err);

/* Fills recs[0 .. v->n_chunks) from the file's words, each heap's chunks laid end to end from its
 * start, and checks that they tile the heap exactly; points v->chunks at recs. */
int ptmd_view_build_chunks(ptmd_view *v, ptmd_chunk_rec *recs, const char *name, ptmd_err *err);

/* Index of the chunk record that starts at addr (exact), or that contains addr when `containing`. */
long ptmd_view_find_chunk(const ptmd_view *v, uint64_t addr, int containing);
/* The heap record a chunk index belongs to. */
long ptmd_view_heap_of_chunk(const ptmd_view *v, uint64_t chunk_index);

#endif
