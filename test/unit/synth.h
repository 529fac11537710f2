/* Synthetic dumps built in memory: a small random heap that follows the walk's rules (arenas, heaps
 * tiled by chunks, pages, threads and their tcaches, Ruby's objects and names, references and roots,
 * mappings), as a view and as the bytes of a file. */
#ifndef PTMD_UNIT_SYNTH_H
#define PTMD_UNIT_SYNTH_H

#include "format/reader.h"

#define SYNTH_MAX_CHUNKS 4096
#define SYNTH_MAX_HEAPS 16
#define SYNTH_MAX_PAGES 1024
#define SYNTH_MAX_OBJECTS 256
#define SYNTH_MAX_REFS 512
#define SYNTH_NAMES_BYTES 4096

typedef struct {
    int ruby;    /* the Ruby sections, references and roots */
    int outside; /* a SOURCE section (a dump of another process) */
    int arenas;  /* 1 or 2 */
    int mmapped; /* mmapped chunks */
    int max_chunks_per_heap;
    uint64_t page_size; /* 0: 4096; 16 KiB and 64 KiB as arm64 kernels use */
} synth_opts;

typedef struct {
    uint64_t ps; /* page size */
    ptmd_meta meta;
    ptmd_mallinfo2_rec mallinfo2;
    ptmd_arena_rec arenas[2];
    ptmd_heap_rec heaps[SYNTH_MAX_HEAPS];
    ptmd_chunk_rec chunks[SYNTH_MAX_CHUNKS];
    uint64_t words[SYNTH_MAX_CHUNKS];
    uint8_t pages[SYNTH_MAX_PAGES];
    ptmd_thread_rec threads[1];
    ptmd_tcache_entry tcache[SYNTH_MAX_CHUNKS];
    ptmd_anomaly_rec anomalies[1];
    ptmd_ruby_meta ruby_meta;
    ptmd_ruby_page ruby_pages[1];
    ptmd_ruby_object objects[SYNTH_MAX_OBJECTS];
    uint64_t ruby_words[SYNTH_MAX_OBJECTS * 2];
    unsigned char names[SYNTH_NAMES_BYTES];
    ptmd_ref refs[SYNTH_MAX_REFS];
    ptmd_ruby_graph_rec graph;
    uint32_t edge_counts[SYNTH_MAX_OBJECTS];
    uint32_t edges[SYNTH_MAX_OBJECTS * 4];
    ptmd_ruby_root ruby_roots[8];
    ptmd_ruby_edge_name edge_names[SYNTH_MAX_OBJECTS];
    ptmd_ref int_refs[4];
    ptmd_root_rec roots[1];
    ptmd_root_ref root_refs[8];
    ptmd_gc_rec gc;
    uint64_t ruby_page_rss[1];
    uint64_t trim[2];
    ptmd_mappings_head mappings_head;
    ptmd_mapping_rec mappings[2];
    char mapping_paths[16];
    ptmd_source_rec source;
    unsigned char strings[64];
    char malloc_info[8];
    uint32_t heap_order[SYNTH_MAX_HEAPS];
    ptmd_view view;
} synth;

uint64_t synth_random(uint64_t *state);
/* Fills s with a heap made from `seed`; s->view holds it all, chunks with their addresses. */
void synth_build(synth *s, uint64_t seed, const synth_opts *o);
/* The file of a view (its sections in type order, the end section and checksum): returns its length,
 * or 0 when it does not fit cap. */
size_t synth_image(const ptmd_view *v, unsigned char *out, size_t cap);
/* Recomputes the checksum of a file image after an edit. */
void synth_reseal(unsigned char *img, size_t len);

#endif
