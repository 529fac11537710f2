/* libFuzzer harness over the load direction: the dump reader and everything in analysis/ that runs on
 * what it accepts (summary, page accounting, report figures, size classes, attribution and the owner
 * summary, the diff against itself, render planning). Built by `rake fuzz` with the checksum check
 * compiled out (PTMD_FUZZ_NO_CRC), so mutated files reach the structure checks.
 *
 * Half of the mutations know the format: one field of one record of a section set to an edge value
 * (0, 1, all ones, one off its value, or one off the same field of the next record), the checksum
 * recomputed; a byte-level mutation rarely lands on one field and keeps the rest of the file valid. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "format/crc32.h"

#include "analysis/age.h"
#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/owners.h"
#include "analysis/retention.h"
#include "analysis/code_owners.h"
#include "analysis/diff.h"
#include "analysis/explorer.h"
#include "analysis/render.h"
#include "analysis/rss.h"
#include "format/reader.h"

#define N_TOP 20

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
size_t LLVMFuzzerMutate(unsigned char *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(unsigned char *data, size_t size, size_t max_size, unsigned int seed);

typedef struct {
    uint16_t off, size;
} field;

#define F(type, name)                                                                                                  \
    {                                                                                                                  \
        offsetof(type, name), sizeof(((type *)0)->name)                                                                \
    }

static const field meta_fields[] = {
    F(ptmd_meta, pid),         F(ptmd_meta, time_sec),      F(ptmd_meta, page_size),     F(ptmd_meta, main_arena),
    F(ptmd_meta, sbrk_base),   F(ptmd_meta, heap_max_size), F(ptmd_meta, n_mmaps),       F(ptmd_meta, mmapped_mem),
    F(ptmd_meta, tcache_bins), F(ptmd_meta, tcache_count),  F(ptmd_meta, symbol_source), F(ptmd_meta, residency_source),
    F(ptmd_meta, glibc_major), F(ptmd_meta, glibc_minor),   F(ptmd_meta, flags),         F(ptmd_meta, thread_count),
};
static const field arenas_fields[] = {
    F(ptmd_arena_rec, address),        F(ptmd_arena_rec, top),        F(ptmd_arena_rec, top_size),
    F(ptmd_arena_rec, last_remainder), F(ptmd_arena_rec, system_mem), F(ptmd_arena_rec, next),
    F(ptmd_arena_rec, flags),          F(ptmd_arena_rec, first_heap), F(ptmd_arena_rec, n_heaps),
};
static const field heaps_fields[] = {
    F(ptmd_heap_rec, start),       F(ptmd_heap_rec, end),       F(ptmd_heap_rec, reserved_end),
    F(ptmd_heap_rec, first_chunk), F(ptmd_heap_rec, n_chunks),  F(ptmd_heap_rec, first_page),
    F(ptmd_heap_rec, n_pages),     F(ptmd_heap_rec, page_base), F(ptmd_heap_rec, arena),
    F(ptmd_heap_rec, kind),        F(ptmd_heap_rec, flags),
};
static const field threads_fields[] = {
    F(ptmd_thread_rec, pthread), F(ptmd_thread_rec, tcache), F(ptmd_thread_rec, tcache_bytes),
    F(ptmd_thread_rec, tid),     F(ptmd_thread_rec, flags),  F(ptmd_thread_rec, tcache_count),
};
static const field anomalies_fields[] = {
    F(ptmd_anomaly_rec, address),
    F(ptmd_anomaly_rec, detail),
    F(ptmd_anomaly_rec, kind),
    F(ptmd_anomaly_rec, arena),
};
static const field ruby_meta_fields[] = {
    F(ptmd_ruby_meta, heap_allocated_pages),
    F(ptmd_ruby_meta, heap_live_slots),
    F(ptmd_ruby_meta, flags),
    F(ptmd_ruby_meta, heap_tomb_pages),
};
static const field ruby_pages_fields[] = {
    F(ptmd_ruby_page, start), F(ptmd_ruby_page, end),  F(ptmd_ruby_page, stride),
    F(ptmd_ruby_page, total), F(ptmd_ruby_page, live), F(ptmd_ruby_page, free),
};
static const field ruby_objects_fields[] = {
    F(ptmd_ruby_object, address), F(ptmd_ruby_object, klass),   F(ptmd_ruby_object, data_type),
    F(ptmd_ruby_object, type),    F(ptmd_ruby_object, subtype), F(ptmd_ruby_object, n_words),
};
static const field refs_fields[] = { F(ptmd_ref, from), F(ptmd_ref, to) };
static const field mappings_fields[] = {
    F(ptmd_mapping_rec, start),         F(ptmd_mapping_rec, end),          F(ptmd_mapping_rec, rss),
    F(ptmd_mapping_rec, private_bytes), F(ptmd_mapping_rec, shared_bytes), F(ptmd_mapping_rec, swap),
    F(ptmd_mapping_rec, path_off),      F(ptmd_mapping_rec, path_len),     F(ptmd_mapping_rec, prot),
    F(ptmd_mapping_rec, kind),
};
static const field mappings_head_fields[] = { F(ptmd_mappings_head, vm_rss), F(ptmd_mappings_head, paths_len) };
static const field gc_fields[] = { F(ptmd_gc_rec, count), F(ptmd_gc_rec, flags) };
static const field source_fields[] = { F(ptmd_source_rec, kind), F(ptmd_source_rec, flags), F(ptmd_source_rec, pid),
                                       F(ptmd_source_rec, attempts), F(ptmd_source_rec, reserved) };
static const field snapshot_fields[] = { F(ptmd_snapshot_rec, before_fork_ns), F(ptmd_snapshot_rec, flags),
                                         F(ptmd_snapshot_rec, reserved) };
static const field roots_fields[] = { F(ptmd_root_rec, start),
                                      F(ptmd_root_rec, end),
                                      F(ptmd_root_rec, kind),
                                      F(ptmd_root_rec, tid),
                                      { offsetof(ptmd_root_rec, name) + PTMD_ROOT_NAME_MAX - 1, 1 } };
static const field root_refs_fields[] = { F(ptmd_root_ref, where), F(ptmd_root_ref, root), F(ptmd_root_ref, chunk) };
static const field inner_refs_fields[] = { F(ptmd_ref, from), F(ptmd_ref, to) };
static const field root_inner_refs_fields[] = { F(ptmd_root_ref, where), F(ptmd_root_ref, root),
                                                F(ptmd_root_ref, chunk) };
static const field scratch_fields[] = { F(ptmd_scratch_rec, start), F(ptmd_scratch_rec, length),
                                        F(ptmd_scratch_rec, resident) };
static const field ruby_code_fields[] = {
    F(ptmd_ruby_code, address), F(ptmd_ruby_code, module), F(ptmd_ruby_code, method),
    F(ptmd_ruby_code, path),    F(ptmd_ruby_code, line),   F(ptmd_ruby_code, kind),
};
static const field tcache_entries_fields[] = {
    F(ptmd_tcache_entry, chunk),
    F(ptmd_tcache_entry, thread),
    F(ptmd_tcache_entry, bin),
    F(ptmd_tcache_entry, position),
};
static const field ruby_graph_fields[] = { F(ptmd_ruby_graph_rec, dropped_edges), F(ptmd_ruby_graph_rec, named_limit),
                                           F(ptmd_ruby_graph_rec, flags), F(ptmd_ruby_graph_rec, reserved) };
static const field ruby_roots_fields[] = { F(ptmd_ruby_root, object), F(ptmd_ruby_root, category),
                                           F(ptmd_ruby_root, name), F(ptmd_ruby_root, flags) };
static const field ruby_edge_names_fields[] = { F(ptmd_ruby_edge_name, edge), F(ptmd_ruby_edge_name, kind),
                                                F(ptmd_ruby_edge_name, detail), F(ptmd_ruby_edge_name, reserved) };
static const field ruby_edge_counts_fields[] = { { 0, 4 } }, ruby_edges_fields[] = { { 0, 4 } };
static const field alloc_trace_fields[] = { F(ptmd_alloc_trace_rec, every),      F(ptmd_alloc_trace_rec, seen),
                                            F(ptmd_alloc_trace_rec, sampled),    F(ptmd_alloc_trace_rec, dropped),
                                            F(ptmd_alloc_trace_rec, max_frames), F(ptmd_alloc_trace_rec, reserved) };
static const field ruby_stacks_fields[] = { F(ptmd_ruby_stack, first), F(ptmd_ruby_stack, n_frames) };
static const field ruby_frames_fields[] = { F(ptmd_ruby_frame, path), F(ptmd_ruby_frame, label),
                                            F(ptmd_ruby_frame, owner), F(ptmd_ruby_frame, line) };
static const field ruby_traced_fields[] = { F(ptmd_ruby_traced, address), F(ptmd_ruby_traced, stack),
                                            F(ptmd_ruby_traced, reserved) };
static const field native_track_fields[] = { F(ptmd_native_track_rec, mean_bytes),
                                             F(ptmd_native_track_rec, sampled),
                                             F(ptmd_native_track_rec, freed),
                                             F(ptmd_native_track_rec, dropped),
                                             F(ptmd_native_track_rec, flags),
                                             F(ptmd_native_track_rec, n_regions),
                                             F(ptmd_native_track_rec, reserved),
                                             { offsetof(ptmd_native_track_rec, regions) + 16, 8 },
                                             { offsetof(ptmd_native_track_rec, regions) + 8, 8 } };
static const field native_samples_fields[] = { F(ptmd_native_sample, address), F(ptmd_native_sample, size),
                                               F(ptmd_native_sample, stack), F(ptmd_native_sample, reserved) };
static const field native_stacks_fields[] = { F(ptmd_native_stack, first_pc), F(ptmd_native_stack, n_pcs),
                                              F(ptmd_native_stack, first_frame), F(ptmd_native_stack, n_frames) };
#define native_frames_fields ruby_frames_fields
#define WORD                                                                                                           \
    {                                                                                                                  \
        {                                                                                                              \
            0, 8                                                                                                       \
        }                                                                                                              \
    }
static const field mallinfo2_fields[] = WORD, chunk_words_fields[] = WORD, ruby_words_fields[] = WORD,
                   trim_released_fields[] = WORD, ruby_page_rss_fields[] = WORD, native_pcs_fields[] = WORD,
                   pages_fields[] = { { 0, 1 } };
#define int_refs_fields refs_fields

typedef struct {
    uint32_t type;
    size_t rec;
    const field *fields;
    size_t n_fields;
    size_t skip; /* bytes before the first record (the MAPPINGS head) */
} record_layout;

/* Every section of fixed records, from PTMD_SECTIONS: its records' fields are <view field>_fields. */
#define N_FIELDS(list) (sizeof(list) / sizeof(list[0]))
#define LAYOUT_ONE(constant, record, f) { constant, sizeof(record), f##_fields, N_FIELDS(f##_fields), 0 },
#define LAYOUT_RECORDS(constant, record, f, n) LAYOUT_ONE(constant, record, f)
#define LAYOUT_PAIRS(...)
#define LAYOUT_TEXT(...)
#define LAYOUT_NAMES(...)
#define LAYOUT_MAPPINGS(constant, record, head, f, n, paths)                                                           \
    { constant, sizeof(*((ptmd_view *)0)->head), head##_fields, N_FIELDS(head##_fields), 0 },                          \
        { constant, sizeof(record), f##_fields, N_FIELDS(f##_fields), sizeof(*((ptmd_view *)0)->head) },
#define LAYOUT(constant, value, name, required, record, rule, shape, ...) LAYOUT_##shape(constant, record, __VA_ARGS__)
static const record_layout layouts[] = { PTMD_SECTIONS(LAYOUT) };

static uint64_t get(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    memcpy(&v, p, n);
    return v;
}

/* One field of one record set to an edge value, the checksum recomputed; 0 when the file's framing
 * is not whole enough to find a record. */
static size_t mutate_field(unsigned char *data, size_t size, unsigned int seed)
{
    size_t off = PTMD_PREAMBLE_SIZE, body, picked = 0, n_candidates = 0;
    const unsigned char *candidates[64];
    const record_layout *cand_layout[64];
    uint64_t cand_count[64];
    if (size < PTMD_PREAMBLE_SIZE + PTMD_END_SIZE || (size & 7)) return 0;
    body = size - PTMD_END_SIZE;
    while (off + sizeof(ptmd_section_hdr) <= body && n_candidates < 64) {
        ptmd_section_hdr h;
        size_t i;
        memcpy(&h, data + off, sizeof(h));
        off += sizeof(h);
        if (h.length > body - off) return 0;
        for (i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
            if (layouts[i].type == h.type && h.count && n_candidates < 64 &&
                h.count * layouts[i].rec + layouts[i].skip <= h.length) {
                candidates[n_candidates] = data + off + layouts[i].skip;
                cand_layout[n_candidates] = &layouts[i];
                cand_count[n_candidates++] = h.count;
            }
        off += (h.length + 7) & ~(size_t)7;
    }
    if (!n_candidates) return 0;
    {
        size_t c = seed % n_candidates, rec = (seed / 64) % (cand_count[c] < 4 ? cand_count[c] : 4);
        const record_layout *lay = cand_layout[c];
        const field *f = &lay->fields[(seed / 256) % lay->n_fields];
        unsigned char *p = (unsigned char *)candidates[c] + rec * lay->rec + f->off;
        uint64_t mask = f->size == 8 ? ~0ull : (1ull << (8 * f->size)) - 1, value = get(p, f->size), v;
        uint64_t next = rec + 1 < cand_count[c] ? get(p + lay->rec, f->size) : value;
        switch ((seed / 4096) % 7) {
        case 0: v = 0; break;
        case 1: v = 1; break;
        case 2: v = mask; break;
        case 3: v = value - 1; break;
        case 4: v = value + 1; break;
        case 5: v = next - 1; break;
        default: v = next + 1; break;
        }
        v &= mask;
        memcpy(p, &v, f->size);
        picked = 1;
    }
    {
        ptmd_footer foot;
        memcpy(&foot, data + body + sizeof(ptmd_section_hdr), sizeof(foot));
        foot.crc32 = ptmd_crc32(0, data, body);
        memcpy(data + body + sizeof(ptmd_section_hdr), &foot, sizeof(foot));
    }
    return picked ? size : 0;
}

size_t LLVMFuzzerCustomMutator(unsigned char *data, size_t size, size_t max_size, unsigned int seed)
{
    size_t n;
    if (seed & 1) {
        n = mutate_field(data, size, seed >> 1);
        if (n) return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}

/* The explorer's per-chunk and per-page arrays (analysis/explorer.c). */
static void explorer_chunks(const ptmd_view *v, const ptmd_page_usage *usage)
{
    uint32_t *sizes = malloc((v->n_chunks ? v->n_chunks : 1) * sizeof(uint32_t));
    uint8_t *states = malloc(v->n_chunks ? v->n_chunks : 1), *pages = malloc(v->n_pages ? v->n_pages : 1);
    if (sizes && states && pages) ptmd_explorer_chunks(v, usage, sizes, states, pages);
    free(sizes);
    free(states);
    free(pages);
}

/* The tcache entries: packed for the explorer, and each chunk's looked up as Dump#bin_of does. */
static void explorer_tcache(const ptmd_view *v)
{
    size_t n = v->n_tcache_entries ? v->n_tcache_entries : 1, i;
    uint32_t *packed = malloc(3 * n * sizeof(uint32_t));
    uint64_t *keys = malloc(n * sizeof(uint64_t));
    if (packed) ptmd_explorer_tcache(v, packed);
    if (keys) {
        ptmd_tcache_keys(v, keys);
        for (i = 0; i < v->n_chunks; i++) {
            long k = ptmd_tcache_entry_of(v, keys, i);
            if (k >= 0 && (v->tcache_entries[k].chunk != i || v->tcache_entries[k].thread >= v->n_threads)) abort();
        }
    }
    free(packed);
    free(keys);
}

static void figures(const ptmd_view *v, const ptmd_page_usage *usage)
{
    ptmd_totals t;
    ptmd_arena_summary *per = calloc(v->n_arenas ? v->n_arenas : 1, sizeof(*per));
    uint64_t *trim = calloc(v->n_arenas ? v->n_arenas : 1, sizeof(uint64_t));
    uint64_t *per_heap = calloc((v->n_heaps ? v->n_heaps : 1) * PTMD_PC_COUNT, sizeof(uint64_t));
    uint64_t counts[PTMD_HIST_BUCKETS], bytes[PTMD_HIST_BUCKETS], pages[PTMD_PC_COUNT], shared[PTMD_PC_COUNT];
    uint64_t pinned_bytes, chunks[8];
    ptmd_free_run runs[N_TOP];
    ptmd_pinned_page pins[N_TOP];
    ptmd_size_classes sc;
    ptmd_render_opts ro;
    size_t i, n;
    if (per && trim && per_heap) {
        ptmd_summarize(v, &t, per);
        ptmd_page_class_counts(v, usage, per_heap, pages, shared);
        ptmd_largest_free_runs(v, runs, N_TOP);
        n = ptmd_pinned_pages(v, usage, pins, N_TOP, &pinned_bytes);
        for (i = 0; i < n && i < N_TOP; i++) ptmd_pinned_page_chunks(v, &pins[i], chunks, 8);
        ptmd_trim_estimate(v, trim);
        ptmd_free_histogram(v, counts, bytes);
        ptmd_size_classes_fill(v, &sc);
        memset(&ro, 0, sizeof(ro));
        ro.progress_fd = -1;
        ptmd_render_count(v, &ro);
        explorer_chunks(v, usage);
        explorer_tcache(v);
    }
    free(per);
    free(trim);
    free(per_heap);
}

/* the whole RSS */
static void rss(const ptmd_view *v)
{
    ptmd_rss r;
    uint64_t *file_bytes = calloc(v->n_mappings ? v->n_mappings : 1, sizeof(uint64_t));
    if (file_bytes) ptmd_rss_account(v, &r, file_bytes);
    free(file_bytes);
}

/* Ruby, anchored or leaked, over what the reader accepted */
static void owner_kinds(const ptmd_view *v, const ptmd_attribution *a)
{
    size_t nc = v->n_chunks ? v->n_chunks : 1;
    ptmd_owners o;
    if (!ptmd_owners_available(v)) return;
    o.kind = malloc(nc);
    o.anchor = malloc(nc * sizeof(uint32_t));
    o.direct = malloc(nc);
    if (o.kind && o.anchor && o.direct) ptmd_owners_classify(v, a, &o);
    free(o.kind);
    free(o.anchor);
    free(o.direct);
}

/* The explorer's packing of the owners (analysis/explorer.c). */
static void explorer_owners(const ptmd_view *v, const ptmd_attribution *a)
{
    size_t no = v->n_ruby_objects ? v->n_ruby_objects : 1;
    uint32_t *local = malloc((v->n_chunks ? v->n_chunks : 1) * sizeof(uint32_t));
    uint32_t *remap = calloc(no, sizeof(uint32_t)), *objs = malloc(no * sizeof(uint32_t));
    if (local && remap && objs) ptmd_explorer_owners(v, a, local, remap, objs);
    free(local);
    free(remap);
    free(objs);
}

static void code_owners(const ptmd_view *v, const ptmd_attribution *a)
{
    uint64_t *arrays = calloc(2 * v->n_ruby_code_names + v->n_ruby_code + 1, sizeof(uint64_t));
    uint32_t *records = malloc((v->n_chunks ? v->n_chunks : 1) * sizeof(uint32_t));
    ptmd_code_totals t;
    size_t i;
    if (arrays && records) {
        t.name_bytes = arrays;
        t.name_chunks = arrays + v->n_ruby_code_names;
        t.record_bytes = arrays + 2 * v->n_ruby_code_names;
        t.chunk_record = records;
        ptmd_code_owners(v, a, &t);
        for (i = 0; i < v->n_ruby_objects; i++) ptmd_code_record(v, v->ruby_objects[i].address);
    }
    free(arrays);
    free(records);
}

/* Who keeps what alive: the dominator tree, the holders, every path and edge name */
static void retention(const ptmd_view *v, const ptmd_attribution *a)
{
    ptmd_retention r;
    uint32_t holders[32];
    size_t i, n;
    if (!v->ruby_graph || ptmd_retention_build(v, a, &r) != 0) return;
    n = ptmd_retention_holders(&r, 32, holders);
    for (i = 0; i < n; i++) {
        uint32_t u = holders[i];
        size_t steps = 0;
        while (u < r.n_objects && r.parent[u] != r.n_objects && steps++ <= r.n_objects) {
            ptmd_retention_edge_name(v, r.via[u]);
            u = r.parent[u];
        }
    }
    ptmd_retention_free(&r);
}

static void owners(const ptmd_view *v)
{
    size_t nc = v->n_chunks ? v->n_chunks : 1, nn = v->n_ruby_names ? v->n_ruby_names : 1;
    ptmd_attribution a;
    ptmd_owner_totals t;
    uint64_t *arrays = calloc(5 * nn, sizeof(uint64_t));
    uint32_t *order = calloc(v->n_ruby_objects ? v->n_ruby_objects : 1, sizeof(uint32_t));
    a.owner = malloc(nc * sizeof(uint32_t));
    a.category = malloc(nc);
    a.direct = malloc(nc);
    if (a.owner && a.category && a.direct && arrays && order && ptmd_attribute(v, &a) == 0) {
        t.class_bytes = arrays;
        t.class_chunks = arrays + nn;
        t.data_type_bytes = arrays + 2 * nn;
        t.data_type_chunks = arrays + 3 * nn;
        t.class_garbage_bytes = arrays + 4 * nn;
        ptmd_owner_summary(v, &a, &t);
        ptmd_object_order(v, order);
        {
            ptmd_age_totals age;
            ptmd_age_summary(v, &a, &age);
        }
        owner_kinds(v, &a);
        explorer_owners(v, &a);
        code_owners(v, &a);
        retention(v, &a);
    }
    free(a.owner);
    free(a.category);
    free(a.direct);
    free(arrays);
    free(order);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    unsigned char *copy = malloc(size + 8); /* the reader wants 8-byte alignment, as a file load gives */
    ptmd_view v;
    ptmd_err err;
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    if (ptmd_read_view(copy, size, "fuzz", &v, &err) == 0) {
        void *index = malloc(ptmd_view_index_size(&v) + 16);
        if (index && ptmd_view_build_index(&v, index, "fuzz", &err) == 0) {
            ptmd_page_usage *usage = calloc(v.n_pages ? v.n_pages : 1, sizeof(*usage));
            uint8_t *change = calloc(v.n_pages ? v.n_pages : 1, 1);
            if (usage && change) {
                ptmd_diff_totals dt;
                size_t p;
                ptmd_page_usage_fill(&v, usage);
                figures(&v, usage);
                ptmd_first_difference(&v, &v);
                ptmd_diff(&v, usage, &v, usage, &dt, change);
                /* every page against its neighbour as the page before: each rule of the page changes */
                for (p = 0; p < v.n_pages; p++)
                    change[p] = ptmd_page_change(p ? &usage[p - 1] : NULL, p ? v.pages[p - 1] : 0, &usage[p],
                                                 v.pages[p], v.meta->page_size);
            }
            owners(&v);
            rss(&v);
            free(usage);
            free(change);
        }
        free(index);
    }
    free(copy);
    return 0;
}
