/* What the Ruby pass collects (capture/ruby_heap.c), which the code pass, the dump and its view share. */
#ifndef PTMD_RUBY_DATA_H
#define PTMD_RUBY_DATA_H

#include "format/format.h"
#include "capture/scratch.h"

/* What the Ruby pass collected (before the malloc walk; mmap-backed). */
typedef struct {
    int present;
    ptmd_ruby_meta meta;
    ptmd_buf pages;   /* ptmd_ruby_page */
    ptmd_buf objects; /* ptmd_ruby_object */
    ptmd_buf words;   /* uint64 */
    ptmd_buf names;   /* serialized RUBY_NAMES entries */
    uint64_t n_names;
    ptmd_gc_rec gc;      /* GC.stat's counts, taken with the pass */
    ptmd_buf code;       /* ptmd_ruby_code, by address (capture/ruby_code.c); empty when skipped */
    ptmd_buf code_names; /* serialized RUBY_CODE_NAMES entries */
    uint64_t n_code_names;
    int code_present;
    uint64_t page_size; /* ptmd_ruby_heap_page_size (): pages recognised by their structure */
    /* the object graph (capture/ruby_graph.c), asked for with graph: true */
    int graph_wanted, graph_present;
    char graph_problem[256]; /* why a graph asked for was not recorded ("" when it was) */
    ptmd_ruby_graph_rec graph;
    ptmd_buf graph_counts;     /* uint32 per object */
    ptmd_buf graph_edges;      /* uint32 object index */
    ptmd_buf graph_roots;      /* ptmd_ruby_root */
    ptmd_buf graph_edge_names; /* ptmd_ruby_edge_name */
} ptmd_ruby_data;

/* Appends a RUBY_NAMES entry (its index is rd->n_names before the call): 0, or -1 when mmap fails. */
int ptmd_ruby_add_name(ptmd_ruby_data *rd, uint64_t key, uint32_t kind, const char *name, size_t len);
/* True when v is a slot of one of rd's recorded pages (so it may be read as an object). */
int ptmd_ruby_in_pages(const ptmd_ruby_data *rd, uint64_t v);
/* The size of the slot v starts (its page's stride), 0 when v starts none. */
size_t ptmd_ruby_slot_size(const ptmd_ruby_data *rd, uint64_t v);

#endif
