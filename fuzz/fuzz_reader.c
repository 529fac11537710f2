/* libFuzzer harness over the dump reader and everything that runs on what it accepts: summary, page
 * accounting, report figures, attribution and render planning. Built by `rake fuzz` with the checksum
 * check compiled out (PTMD_FUZZ_NO_CRC), so mutated files reach the structure checks. */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "attribution.h"
#include "reader.h"
#include "render.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    unsigned char *copy = malloc(size + 8);     /* the reader wants 8-byte alignment, as a file load gives */
    ptmd_view v;
    ptmd_err err;
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    if (ptmd_read_view(copy, size, "fuzz", &v, &err) == 0) {
        ptmd_chunk_rec *recs = malloc((v.n_chunks ? v.n_chunks : 1) * sizeof(*recs));
        if (recs && ptmd_view_build_chunks(&v, recs, "fuzz", &err) == 0) {
            ptmd_totals t;
            ptmd_arena_summary *per = calloc(v.n_arenas ? v.n_arenas : 1, sizeof(*per));
            ptmd_page_usage *usage = calloc(v.n_pages ? v.n_pages : 1, sizeof(*usage));
            uint64_t *trim = calloc(v.n_arenas ? v.n_arenas : 1, sizeof(uint64_t)), counts[PTMD_HIST_BUCKETS],
                     bytes[PTMD_HIST_BUCKETS], pinned_bytes;
            ptmd_free_run runs[20];
            ptmd_pinned_page pins[20];
            ptmd_attribution a;
            ptmd_render_opts ro;
            if (per && usage && trim) {
                ptmd_summarize(&v, &t, per);
                ptmd_page_usage_fill(&v, usage);
                ptmd_largest_free_runs(&v, runs, 20);
                ptmd_pinned_pages(&v, usage, pins, 20, &pinned_bytes);
                ptmd_trim_estimate(&v, trim);
                ptmd_free_histogram(&v, counts, bytes);
                memset(&ro, 0, sizeof(ro));
                ro.progress_fd = -1;
                ptmd_render_count(&v, &ro);
            }
            a.owner = malloc((v.n_chunks ? v.n_chunks : 1) * sizeof(uint32_t));
            a.category = malloc(v.n_chunks ? v.n_chunks : 1);
            a.direct = malloc(v.n_chunks ? v.n_chunks : 1);
            if (a.owner && a.category && a.direct) ptmd_attribute(&v, &a);
            free(a.owner);
            free(a.category);
            free(a.direct);
            free(per);
            free(usage);
            free(trim);
        }
        free(recs);
    }
    free(copy);
    return 0;
}
