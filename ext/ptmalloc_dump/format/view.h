/* A dump as arrays: what the reader makes of a file and the capture of its own buffers, what the
 * writer writes, and what everything that reads a dump works on. */
#ifndef PTMD_VIEW_H
#define PTMD_VIEW_H

#include "format/format.h"
#include <stddef.h>

typedef struct {
    uint64_t sections; /* PTMD_SECTION_BIT of each section the dump holds */
    const ptmd_meta *meta;
    const ptmd_mallinfo2_rec *mallinfo2;
    const char *malloc_info;
    size_t malloc_info_len;
    const unsigned char *strings;
    size_t strings_len;
    const ptmd_arena_rec *arenas;
    size_t n_arenas;
    const ptmd_heap_rec *heaps;
    size_t n_heaps;
    const ptmd_chunk_rec *chunks; /* with addresses (built by ptmd_view_build_index for a file) */
    const uint32_t *heap_order;   /* heap indices by start (format/index.h) */
    size_t n_chunks;
    const uint64_t *chunk_words; /* the file's address-less records */
    const uint8_t *pages;
    size_t n_pages;
    const ptmd_thread_rec *threads;
    size_t n_threads;
    const ptmd_anomaly_rec *anomalies;
    size_t n_anomalies;
    const ptmd_tcache_entry *tcache_entries; /* NULL when the dump has no TCACHE_ENTRIES section */
    size_t n_tcache_entries;
    /* Ruby's heap (absent when the dump has none) */
    const ptmd_ruby_meta *ruby_meta;
    const ptmd_ruby_page *ruby_pages;
    size_t n_ruby_pages;
    const ptmd_ruby_object *ruby_objects;
    size_t n_ruby_objects;
    const uint64_t *ruby_words;
    size_t n_ruby_words;
    const unsigned char *ruby_names;
    size_t ruby_names_len, n_ruby_names;
    const ptmd_ref *refs;
    size_t n_refs;
    const ptmd_ref *int_refs; /* chunk -> chunk through a Fixnum of the user address */
    size_t n_int_refs;
    const ptmd_root_rec *roots; /* NULL when the dump has no ROOTS section */
    size_t n_roots;
    const ptmd_root_ref *root_refs;
    size_t n_root_refs;
    const ptmd_ref *inner_refs; /* chunk -> chunk through a pointer into the target past its start */
    size_t n_inner_refs;
    const ptmd_root_ref *root_inner_refs; /* root -> chunk likewise */
    size_t n_root_inner_refs;
    const ptmd_scratch_rec *scratch; /* the dump's own mappings, or NULL */
    size_t n_scratch;
    const uint64_t *trim_released; /* trim_check: bytes malloc_trim(0) released per arena, or NULL */
    size_t n_trim_released;
    /* GC counts and the whole RSS (absent in older dumps) */
    const ptmd_gc_rec *gc;
    const ptmd_source_rec *source;     /* NULL: the process dumped itself */
    const ptmd_snapshot_rec *snapshot; /* a fork snapshot's parent; NULL for other dumps */
    const uint64_t *ruby_page_rss;     /* per Ruby page, or NULL */
    size_t n_ruby_page_rss;
    const ptmd_mappings_head *mappings_head;
    const ptmd_mapping_rec *mappings;
    size_t n_mappings;
    const char *mapping_paths;       /* mappings_head->paths_len bytes */
    const ptmd_ruby_code *ruby_code; /* RUBY_CODE, by address, or NULL */
    size_t n_ruby_code;
    const unsigned char *ruby_code_names; /* RUBY_CODE_NAMES */
    size_t ruby_code_names_len, n_ruby_code_names;
    /* the object graph (graph: true), NULL when the dump has none */
    const ptmd_ruby_graph_rec *ruby_graph;
    const uint32_t *ruby_edge_counts; /* n_ruby_objects of them */
    size_t n_ruby_edge_counts;
    const uint32_t *ruby_edges;
    size_t n_ruby_edges;
    const ptmd_ruby_root *ruby_roots;
    size_t n_ruby_roots;
    const ptmd_ruby_edge_name *ruby_edge_names; /* by src */
    size_t n_ruby_edge_names;
    /* allocation sites (PtmallocDump.trace_allocations), NULL when the dump has none */
    const ptmd_alloc_trace_rec *alloc_trace;
    const ptmd_ruby_stack *ruby_stacks;
    size_t n_ruby_stacks;
    const ptmd_ruby_frame *ruby_frames;
    size_t n_ruby_frames;
    const ptmd_ruby_traced *ruby_traced; /* by address */
    size_t n_ruby_traced;
    const unsigned char *ruby_site_names;
    size_t ruby_site_names_len, n_ruby_site_names;
    /* the allocation tracker (ptmalloc-dump --track), NULL when the dump has none */
    const ptmd_native_track_rec *native_track;
    const ptmd_native_sample *native_samples; /* by address */
    size_t n_native_samples;
    const ptmd_native_stack *native_stacks;
    size_t n_native_stacks;
    const uint64_t *native_pcs;
    size_t n_native_pcs;
    const ptmd_ruby_frame *native_frames;
    size_t n_native_frames;
    const unsigned char *native_names;
    size_t native_names_len, n_native_names;
} ptmd_view;

#define PTMD_SECTION_BIT(type) (1ull << (type))
static inline int ptmd_view_has(const ptmd_view *v, uint32_t type)
{
    return type < 64 && (v->sections & PTMD_SECTION_BIT(type)) != 0;
}

/* A section's payload as the file holds it: its count and the bytes, in up to three parts. */
typedef struct {
    uint64_t count, length;
    size_t n_parts;
    struct {
        const void *data;
        uint64_t len;
    } part[3];
} ptmd_section_payload;

/* The payload of section `type` from the view's fields (PTMD_SECTIONS' shapes), for a section the view
 * holds; -1 for a type the list does not hold. A capture's view has its chunks with their addresses and
 * no chunk_words: CHUNKS is then the writer's to make. */
int ptmd_view_section(const ptmd_view *v, uint32_t type, ptmd_section_payload *p);

/* One entry of a names section: its key and kind (PTMD_NAME_), its bytes (not NUL-terminated). */
typedef struct {
    uint64_t key;
    uint32_t kind, len;
    const char *name;
} ptmd_view_name;

/* The entry of a names section (RUBY_NAMES, RUBY_CODE_NAMES, RUBY_SITE_NAMES: `len` bytes at names) at
 * *off, *off moved past it: 1, or 0 after the last (the reader has checked the section's entries). */
int ptmd_view_next_name(const unsigned char *names, size_t len, size_t *off, ptmd_view_name *out);

/* The index of the record whose first field, a u64 address, is key, among n records of `stride` bytes
 * sorted by it (the tracked blocks, the traced objects); n when none is. */
size_t ptmd_view_find_address(const void *records, size_t n, size_t stride, uint64_t key);

/* The slot size of the Ruby page holding address (RUBY_PAGES, by address), 0 when none does. */
uint32_t ptmd_view_slot_size(const ptmd_view *v, uint64_t address);

#endif
