/* Reading a dump: every length, count, index and address checked before use. Plain C. */
#ifndef PTMD_READER_H
#define PTMD_READER_H

#include "format/ptmd.h"
#include "format/view.h"
#include "format/index.h"

/* Parses and validates data[0..len) (8-byte aligned) into v, whose arrays point into data.
 * On failure err says what is wrong (PTMD_E_FORMAT); `name` is used in messages. */
int ptmd_read_view(const unsigned char *data, size_t len, const char *name, ptmd_view *v, ptmd_err *err);

/* The bytes ptmd_view_build_index fills: a chunk record with its address per chunk, and the heap order. */
size_t ptmd_view_index_size(const ptmd_view *v);
/* Fills mem (ptmd_view_index_size bytes, 8-aligned) with the chunk records, each heap's chunks laid end
 * to end from its start (checking that they tile the heap exactly), and the heaps in address order;
 * points v->chunks and v->heap_order into it. */
int ptmd_view_build_index(ptmd_view *v, void *mem, const char *name, ptmd_err *err);

/* Index of the chunk record that starts at addr, or that contains addr when `containing`; -1 if none. */
long ptmd_view_find_chunk(const ptmd_view *v, uint64_t addr, int containing);
/* The heap record a chunk index belongs to. */
long ptmd_view_heap_of_chunk(const ptmd_view *v, uint64_t chunk_index);

#endif
