/* libFuzzer harness over the load direction: the dump reader and everything in analysis/ that runs on
 * what it accepts (summary, page accounting, report figures, size classes, attribution and the owner
 * summary, the diff against itself, render planning). Built by `rake fuzz` with the checksum check
 * compiled out (PTMD_FUZZ_NO_CRC), so mutated files reach the structure checks. */
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/diff.h"
#include "analysis/render.h"
#include "format/reader.h"

#define N_TOP 20

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

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
    }
    free(per);
    free(trim);
    free(per_heap);
}

static void owners(const ptmd_view *v)
{
    size_t nc = v->n_chunks ? v->n_chunks : 1, nn = v->n_ruby_names ? v->n_ruby_names : 1;
    ptmd_attribution a;
    ptmd_owner_totals t;
    uint64_t *arrays = calloc(4 * nn, sizeof(uint64_t));
    uint32_t *order = calloc(v->n_ruby_objects ? v->n_ruby_objects : 1, sizeof(uint32_t));
    a.owner = malloc(nc * sizeof(uint32_t));
    a.category = malloc(nc);
    a.direct = malloc(nc);
    if (a.owner && a.category && a.direct && arrays && order && ptmd_attribute(v, &a) == 0) {
        t.class_bytes = arrays;
        t.class_chunks = arrays + nn;
        t.data_type_bytes = arrays + 2 * nn;
        t.data_type_chunks = arrays + 3 * nn;
        ptmd_owner_summary(v, &a, &t);
        ptmd_object_order(v, order);
    }
    free(a.owner);
    free(a.category);
    free(a.direct);
    free(arrays);
    free(order);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    unsigned char *copy = malloc(size + 8);     /* the reader wants 8-byte alignment, as a file load gives */
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
                ptmd_page_usage_fill(&v, usage);
                figures(&v, usage);
                ptmd_first_difference(&v, &v);
                ptmd_diff(&v, usage, &v, usage, &dt, change);
            }
            owners(&v);
            free(usage);
            free(change);
        }
        free(index);
    }
    free(copy);
    return 0;
}
