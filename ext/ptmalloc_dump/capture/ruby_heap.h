/* The Ruby pass: Ruby's object pages and live objects, before the malloc walk (capture/ruby_heap.c). */
#ifndef PTMD_RUBY_HEAP_H
#define PTMD_RUBY_HEAP_H

#include "capture/ruby_data.h"

/* The one capture file that reads Ruby's heap through Ruby's API: it looks up the internal functions
 * it needs at load (ptmd_ruby_heap_init); the NULL-terminated list of those this Ruby lacks; and the
 * pass itself, which fills rd and raises on failure. */
void ptmd_ruby_heap_init(void);
const char *const *ptmd_ruby_functions_missing(void);
void ptmd_ruby_pass(ptmd_ruby_data *rd);
/* Whether the pass can find the pages by their structure alone (their layout was learned at load, and
 * garbage a pending lazy sweep left can be told from the live), as a snapshot's child must. */
int ptmd_ruby_pass_by_structure_possible(void);
/* The pass in a fork snapshot's child, on the copy of its parent's memory: by structure only, raising
 * nothing; -1 with the reason in why when the pages found do not hold every live object. */
int ptmd_ruby_pass_in_copy(ptmd_ruby_data *rd, char *why, size_t cap);
/* The size (and alignment) of Ruby's object page bodies, 0 when this Ruby does not say. */
uint64_t ptmd_ruby_heap_page_size(void);
/* Marks rd's GC record as taken right after a full GC the dump ran itself (gc: true). */
void ptmd_ruby_pass_after_full_gc(ptmd_ruby_data *rd);

#endif
