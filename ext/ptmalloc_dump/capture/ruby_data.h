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
    /* allocation sites (capture/ruby_sites.c), while tracing */
    int sites_present;
    ptmd_alloc_trace_rec alloc_trace;
    ptmd_buf stacks;     /* ptmd_ruby_stack */
    ptmd_buf frames;     /* ptmd_ruby_frame */
    ptmd_buf traced;     /* ptmd_ruby_traced, by address */
    ptmd_buf site_names; /* serialized RUBY_SITE_NAMES entries */
    uint64_t n_site_names;
} ptmd_ruby_data;

/* The names a pass asks for, each (key, kind) given the next RUBY_NAMES index the first time: an
 * open-addressing table in mmap'd buffers (no malloc in a capture), and the names in index order. */
typedef struct {
    uint64_t key;
    uint32_t index;
    uint32_t kind; /* a PTMD_NAME_ kind; 0 marks an empty slot */
} ptmd_name_slot;

typedef struct {
    ptmd_buf table; /* ptmd_name_slot, cap of them */
    size_t cap, used;
    ptmd_buf order; /* ptmd_name_slot in index order: what to name at the pass's end */
    uint32_t first; /* the index of the first name asked for (the names before it are another pass's) */
    int oom;        /* an mmap failed: an index may be missing */
} ptmd_name_table;

static inline size_t ptmd_name_hash(uint64_t key, uint32_t kind, size_t mask)
{
    return (size_t)(((key >> 3) ^ kind) * 0x9E3779B97F4A7C15ull >> 17) & mask;
}

/* Asks for the table's line where (key, kind) is looked up first: for loops that look ahead. */
static inline void ptmd_name_table_prefetch(const ptmd_name_table *t, uint64_t key, uint32_t kind)
{
    if (t->cap) __builtin_prefetch(t->table.base + ptmd_name_hash(key, kind, t->cap - 1) * sizeof(ptmd_name_slot));
}

/* The index the name (key, kind) has, or gets: PTMD_NO_NAME (and t->oom set) when mmap fails. */
uint32_t ptmd_name_table_index(ptmd_name_table *t, uint64_t key, uint32_t kind);
/* Releases the table and the order; t is empty again, its first index kept. */
void ptmd_name_table_release(ptmd_name_table *t);

/* Appends a names entry (RUBY_NAMES, RUBY_CODE_NAMES: key, kind, length, the first 4096 bytes padded
 * to 8) to b and counts it: 0, or -1 when mmap fails. */
int ptmd_ruby_append_name(ptmd_buf *b, uint64_t *count, uint64_t key, uint32_t kind, const char *name, size_t len);
/* Appends a RUBY_NAMES entry (its index is rd->n_names before the call): 0, or -1 when mmap fails. */
int ptmd_ruby_add_name(ptmd_ruby_data *rd, uint64_t key, uint32_t kind, const char *name, size_t len);
/* True when v is a slot of one of rd's recorded pages (so it may be read as an object). */
int ptmd_ruby_in_pages(const ptmd_ruby_data *rd, uint64_t v);
/* The size of the slot v starts (its page's stride), 0 when v starts none. */
size_t ptmd_ruby_slot_size(const ptmd_ruby_data *rd, uint64_t v);

#endif
