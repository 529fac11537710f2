/* What a dump writes: its strings and META record, the sections in file order, and the same records
 * as a view for a dump that is read in place. */
#define _GNU_SOURCE
#include "capture/dump_write.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int add_string(ptmd_buf *b, const char *k, const char *v)
{
    uint16_t kl = (uint16_t)strnlen(k, 1024);
    uint32_t vl = (uint32_t)strnlen(v, 1u << 20);
    return ptmd_buf_append(b, &kl, 2) || ptmd_buf_append(b, k, kl) || ptmd_buf_append(b, &vl, 4) ||
                   ptmd_buf_append(b, v, vl)
               ? -1
               : 0;
}

/* The strings that say whether the Ruby pass ran, which a snapshot child whose pass failed replaces. */
static int ruby_layer_string(const char *key)
{
    return strcmp(key, "ruby_layer") == 0 || strcmp(key, "ruby_layer_reason") == 0 ||
           strcmp(key, "ruby_code_reason") == 0;
}

int ptmd_dump_strings(ptmd_dump_state *d, const ptmd_libc *lc, const ptmd_dump_opts *o)
{
    char host[256] = "", hex[2 * sizeof(lc->build_id) + 1];
    const char *const *s;
    int replaced = d->ruby_problem[0] != '\0';
    gethostname(host, sizeof(host) - 1);
    ptmd_hex(lc->build_id, lc->build_id_len, hex);
    if (add_string(&d->strings, "glibc_version", lc->glibc_version) ||
        add_string(&d->strings, "libc_path", lc->libc_path) || add_string(&d->strings, "libc_build_id", hex) ||
        add_string(&d->strings, "symbol_file", lc->symbol_file) ||
        add_string(&d->strings, "symbol_source", PTMD_NAME_OF(ptmd_symbol_source_names, lc->symbol_source)) ||
        add_string(&d->strings, "hostname", host))
        return -1;
    for (s = o->strings; s && s[0] && s[1]; s += 2)
        if (!(replaced && ruby_layer_string(s[0])) && add_string(&d->strings, s[0], s[1])) return -1;
    if (replaced && (add_string(&d->strings, "ruby_layer", "skipped") ||
                     add_string(&d->strings, "ruby_layer_reason", d->ruby_problem)))
        return -1;
    /* the graph: recorded, or why not where it was asked for */
    if (d->ruby.graph_wanted && (add_string(&d->strings, "graph", d->ruby.graph_present ? "recorded" : "skipped") ||
                                 add_string(&d->strings, "graph_reason",
                                            d->ruby.graph_present ? ""
                                            : d->ruby.present     ? d->ruby.graph_problem
                                                                  : "the Ruby pass did not run")))
        return -1;
    return 0;
}

void ptmd_dump_meta(ptmd_dump_state *d, const ptmd_libc *lc, const struct timespec *now)
{
    ptmd_meta *m = &d->meta;
    ptmd_walk *w = &d->w;
    const ptmd_layout *L = lc->layout;
    /* a snapshot child describes its parent's heap: the process dumped is the parent */
    m->pid = (uint64_t)(d->snapshot ? getppid() : getpid());
    m->ppid = d->snapshot ? 0 : (uint64_t)getppid();
    m->time_sec = now->tv_sec;
    m->time_nsec = (uint64_t)now->tv_nsec;
    m->page_size = w->page_size;
    m->main_arena = lc->main_arena;
    m->mp_addr = lc->mp;
    m->libc_base = lc->libc_base;
    m->sbrk_base = w->sbrk_base;
    m->heap_max_size = w->heap_max;
    if (w->have_mp) {
        m->mmap_threshold = ptmd_mapped_word(w, lc->mp + L->mp_mmap_threshold);
        m->trim_threshold = ptmd_mapped_word(w, lc->mp + L->mp_trim_threshold);
        m->top_pad = ptmd_mapped_word(w, lc->mp + L->mp_top_pad);
        m->arena_max = ptmd_mapped_word(w, lc->mp + L->mp_arena_max);
        m->arena_test = ptmd_mapped_word(w, lc->mp + L->mp_arena_test);
        m->max_mmapped_mem = ptmd_mapped_word(w, lc->mp + L->mp_max_mmapped_mem);
        if (L->mp_tcache_max_bytes != PTMD_NONE)
            m->tcache_max_bytes = ptmd_mapped_word(w, lc->mp + L->mp_tcache_max_bytes);
    }
    m->n_mmaps = w->n_mmaps;
    m->mmapped_mem = w->mmapped_mem;
    m->tcache_bins = w->tcache_bins;
    m->tcache_count = w->tcache_count_max;
    m->lock_wait_ns = w->lock_wait_ns;
    m->symbol_source = (uint32_t)lc->symbol_source;
    m->residency_source = w->src.pagemap.source;
    m->glibc_major = (uint32_t)lc->major;
    m->glibc_minor = (uint32_t)lc->minor;
    m->flags = (L->safe_linking ? PTMD_MF_SAFE_LINKING : 0) | (L->tcache_bins ? PTMD_MF_TCACHE : 0) |
               (w->have_tcache_key ? PTMD_MF_TCACHE_KEY : 0) | (w->have_mp ? PTMD_MF_MP : 0) |
               (w->threads_complete ? PTMD_MF_THREADS_COMPLETE : 0) |
               (L->mremap_overcounts ? PTMD_MF_MREMAP_OVERCOUNT : 0);
    m->thread_count = w->thread_count;
}

/* The chunk table goes out without addresses (each heap's chunks tile it), staged through a fixed
 * stack buffer. */
static void write_chunk_words(ptmd_writer *wr, const ptmd_walk *w)
{
    uint64_t words[4096];
    size_t n = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec), i = 0;
    const ptmd_chunk_rec *r = (const ptmd_chunk_rec *)(const void *)w->chunks.base;
    ptmd_writer_begin(wr, PTMD_SEC_CHUNKS, n, (uint64_t)n * 8);
    while (i < n) {
        size_t k, m = n - i < 4096 ? n - i : 4096;
        for (k = 0; k < m; k++) words[k] = r[i + k].word;
        ptmd_writer_put(wr, words, m * 8);
        i += m;
    }
    ptmd_writer_end(wr, (uint64_t)n * 8);
}

/* The sections the dump's view holds, in the order a file holds them. */
static void write_sections(ptmd_dump_state *d)
{
    static const uint32_t file_order[] = {
        PTMD_SEC_META,
        PTMD_SEC_STRINGS,
        PTMD_SEC_MALLINFO2,
        PTMD_SEC_MALLOC_INFO,
        PTMD_SEC_ARENAS,
        PTMD_SEC_HEAPS,
        PTMD_SEC_CHUNKS,
        PTMD_SEC_PAGES,
        PTMD_SEC_THREADS,
        PTMD_SEC_ANOMALIES,
        PTMD_SEC_TCACHE_ENTRIES,
        PTMD_SEC_RUBY_META,
        PTMD_SEC_RUBY_PAGES,
        PTMD_SEC_RUBY_OBJECTS,
        PTMD_SEC_RUBY_WORDS,
        PTMD_SEC_RUBY_NAMES,
        PTMD_SEC_RUBY_CODE,
        PTMD_SEC_RUBY_CODE_NAMES,
        PTMD_SEC_RUBY_GRAPH,
        PTMD_SEC_RUBY_EDGE_COUNTS,
        PTMD_SEC_RUBY_EDGES,
        PTMD_SEC_RUBY_ROOTS,
        PTMD_SEC_RUBY_EDGE_NAMES,
        PTMD_SEC_ALLOC_TRACE,
        PTMD_SEC_RUBY_STACKS,
        PTMD_SEC_RUBY_FRAMES,
        PTMD_SEC_RUBY_TRACED,
        PTMD_SEC_RUBY_SITE_NAMES,
        PTMD_SEC_REFS,
        PTMD_SEC_INT_REFS,
        PTMD_SEC_ROOTS,
        PTMD_SEC_ROOT_REFS,
        PTMD_SEC_INNER_REFS,
        PTMD_SEC_ROOT_INNER_REFS,
        PTMD_SEC_SCRATCH,
        PTMD_SEC_SOURCE,
        PTMD_SEC_SNAPSHOT,
        PTMD_SEC_TRIM_CHECK,
        PTMD_SEC_GC,
        PTMD_SEC_NATIVE_TRACK,
        PTMD_SEC_NATIVE_SAMPLES,
        PTMD_SEC_NATIVE_STACKS,
        PTMD_SEC_NATIVE_PCS,
        PTMD_SEC_NATIVE_FRAMES,
        PTMD_SEC_NATIVE_NAMES,
        PTMD_SEC_RUBY_PAGE_RSS,
        PTMD_SEC_MAPPINGS,
    };
    _Static_assert(sizeof(file_order) / sizeof(file_order[0]) == PTMD_SEC_COUNT, "every section has its place");
    ptmd_writer *wr = &d->writer;
    ptmd_view v;
    size_t i, k;
    ptmd_dump_view(d, &v);
    for (i = 0; i < PTMD_SEC_COUNT; i++) {
        ptmd_section_payload p;
        if (!ptmd_view_has(&v, file_order[i])) continue;
        if (file_order[i] == PTMD_SEC_CHUNKS) {
            write_chunk_words(wr, &d->w);
            continue;
        }
        ptmd_view_section(&v, file_order[i], &p);
        ptmd_writer_begin(wr, file_order[i], p.count, p.length);
        for (k = 0; k < p.n_parts; k++) ptmd_writer_put(wr, p.part[k].data, (size_t)p.part[k].len);
        ptmd_writer_end(wr, p.length);
    }
}

int ptmd_dump_write(ptmd_dump_state *d, ptmd_err *err)
{
    struct sigaction ign, old_xfsz;
    int rc;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ign, &old_xfsz);
    write_sections(d);
    rc = ptmd_writer_finish(&d->writer, PTMD_BUF_COUNT(&d->w.chunks, ptmd_chunk_rec), err);
    sigaction(SIGXFSZ, &old_xfsz, NULL);
    return rc;
}

static void view_rss(const ptmd_dump_state *d, ptmd_view *v)
{
    if (d->ruby.present) {
        v->gc = &d->ruby.gc;
        v->ruby_page_rss = (const uint64_t *)(const void *)d->ruby_rss.base;
        v->n_ruby_page_rss = PTMD_BUF_COUNT(&d->ruby_rss, uint64_t);
        v->sections |=
            PTMD_SECTION_BIT(PTMD_SEC_GC) | (d->ruby_rss.base ? PTMD_SECTION_BIT(PTMD_SEC_RUBY_PAGE_RSS) : 0);
    }
    if (d->mappings.present) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_MAPPINGS);
        v->mappings_head = &d->mappings.head;
        v->mappings = (const ptmd_mapping_rec *)(const void *)d->mappings.recs.base;
        v->n_mappings = PTMD_BUF_COUNT(&d->mappings.recs, ptmd_mapping_rec);
        v->mapping_paths = (const char *)d->mappings.paths.base;
    }
}

void ptmd_dump_view(const ptmd_dump_state *d, ptmd_view *v)
{
    const ptmd_walk *w = &d->w;
    memset(v, 0, sizeof(*v));
    v->sections = PTMD_SECTION_BIT(PTMD_SEC_META) | PTMD_SECTION_BIT(PTMD_SEC_STRINGS) |
                  PTMD_SECTION_BIT(PTMD_SEC_MALLINFO2) | PTMD_SECTION_BIT(PTMD_SEC_MALLOC_INFO) |
                  PTMD_SECTION_BIT(PTMD_SEC_ARENAS) | PTMD_SECTION_BIT(PTMD_SEC_HEAPS) |
                  PTMD_SECTION_BIT(PTMD_SEC_CHUNKS) | PTMD_SECTION_BIT(PTMD_SEC_PAGES) |
                  PTMD_SECTION_BIT(PTMD_SEC_THREADS) | PTMD_SECTION_BIT(PTMD_SEC_ANOMALIES);
    v->meta = &d->meta;
    v->mallinfo2 = &d->mallinfo2;
    v->malloc_info = d->malloc_info;
    v->malloc_info_len = d->malloc_info_len;
    v->strings = d->strings.base;
    v->strings_len = d->strings.len;
    v->arenas = (const ptmd_arena_rec *)(const void *)w->arenas.base;
    v->n_arenas = PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec);
    v->heaps = (const ptmd_heap_rec *)(const void *)w->heaps.base;
    v->n_heaps = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    if (PTMD_BUF_COUNT(&w->heap_order, uint32_t) == v->n_heaps) /* sorted once the heaps were final */
        v->heap_order = (const uint32_t *)(const void *)w->heap_order.base;
    v->chunks = (const ptmd_chunk_rec *)(const void *)w->chunks.base;
    v->n_chunks = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec);
    v->pages = w->pages.base;
    v->n_pages = w->pages.len;
    v->threads = (const ptmd_thread_rec *)(const void *)w->threads.base;
    v->n_threads = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    v->anomalies = (const ptmd_anomaly_rec *)(const void *)w->anomalies.base;
    v->n_anomalies = PTMD_BUF_COUNT(&w->anomalies, ptmd_anomaly_rec);
    if (w->L && w->L->tcache_bins) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_TCACHE_ENTRIES);
        v->tcache_entries = (const ptmd_tcache_entry *)(const void *)w->tcache_entries.base;
        v->n_tcache_entries = PTMD_BUF_COUNT(&w->tcache_entries, ptmd_tcache_entry);
    }
    if (d->ruby.present) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_RUBY_META) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_PAGES) |
                       PTMD_SECTION_BIT(PTMD_SEC_RUBY_OBJECTS) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_WORDS) |
                       PTMD_SECTION_BIT(PTMD_SEC_RUBY_NAMES);
        v->ruby_meta = &d->ruby.meta;
        v->ruby_pages = (const ptmd_ruby_page *)(const void *)d->ruby.pages.base;
        v->n_ruby_pages = PTMD_BUF_COUNT(&d->ruby.pages, ptmd_ruby_page);
        v->ruby_objects = (const ptmd_ruby_object *)(const void *)d->ruby.objects.base;
        v->n_ruby_objects = PTMD_BUF_COUNT(&d->ruby.objects, ptmd_ruby_object);
        v->ruby_words = (const uint64_t *)(const void *)d->ruby.words.base;
        v->n_ruby_words = PTMD_BUF_COUNT(&d->ruby.words, uint64_t);
        v->ruby_names = d->ruby.names.base;
        v->ruby_names_len = d->ruby.names.len;
        v->n_ruby_names = d->ruby.n_names;
        if (d->ruby.code_present) {
            v->sections |= PTMD_SECTION_BIT(PTMD_SEC_RUBY_CODE) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_CODE_NAMES);
            v->ruby_code = (const ptmd_ruby_code *)(const void *)d->ruby.code.base;
            v->n_ruby_code = PTMD_BUF_COUNT(&d->ruby.code, ptmd_ruby_code);
            v->ruby_code_names = d->ruby.code_names.base;
            v->ruby_code_names_len = d->ruby.code_names.len;
            v->n_ruby_code_names = d->ruby.n_code_names;
        }
        if (d->ruby.graph_present) {
            v->sections |= PTMD_SECTION_BIT(PTMD_SEC_RUBY_GRAPH) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_EDGE_COUNTS) |
                           PTMD_SECTION_BIT(PTMD_SEC_RUBY_EDGES) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_ROOTS) |
                           PTMD_SECTION_BIT(PTMD_SEC_RUBY_EDGE_NAMES);
            v->ruby_graph = &d->ruby.graph;
            v->ruby_edge_counts = (const uint32_t *)(const void *)d->ruby.graph_counts.base;
            v->n_ruby_edge_counts = PTMD_BUF_COUNT(&d->ruby.graph_counts, uint32_t);
            v->ruby_edges = (const uint32_t *)(const void *)d->ruby.graph_edges.base;
            v->n_ruby_edges = PTMD_BUF_COUNT(&d->ruby.graph_edges, uint32_t);
            v->ruby_roots = (const ptmd_ruby_root *)(const void *)d->ruby.graph_roots.base;
            v->n_ruby_roots = PTMD_BUF_COUNT(&d->ruby.graph_roots, ptmd_ruby_root);
            v->ruby_edge_names = (const ptmd_ruby_edge_name *)(const void *)d->ruby.graph_edge_names.base;
            v->n_ruby_edge_names = PTMD_BUF_COUNT(&d->ruby.graph_edge_names, ptmd_ruby_edge_name);
        }
        if (d->ruby.sites_present) {
            v->sections |= PTMD_SECTION_BIT(PTMD_SEC_ALLOC_TRACE) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_STACKS) |
                           PTMD_SECTION_BIT(PTMD_SEC_RUBY_FRAMES) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_TRACED) |
                           PTMD_SECTION_BIT(PTMD_SEC_RUBY_SITE_NAMES);
            v->alloc_trace = &d->ruby.alloc_trace;
            v->ruby_stacks = (const ptmd_ruby_stack *)(const void *)d->ruby.stacks.base;
            v->n_ruby_stacks = PTMD_BUF_COUNT(&d->ruby.stacks, ptmd_ruby_stack);
            v->ruby_frames = (const ptmd_ruby_frame *)(const void *)d->ruby.frames.base;
            v->n_ruby_frames = PTMD_BUF_COUNT(&d->ruby.frames, ptmd_ruby_frame);
            v->ruby_traced = (const ptmd_ruby_traced *)(const void *)d->ruby.traced.base;
            v->n_ruby_traced = PTMD_BUF_COUNT(&d->ruby.traced, ptmd_ruby_traced);
            v->ruby_site_names = d->ruby.site_names.base;
            v->ruby_site_names_len = d->ruby.site_names.len;
            v->n_ruby_site_names = d->ruby.n_site_names;
        }
    }
    if (d->native.present) {
        const ptmd_native_data *n = &d->native;
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_NATIVE_TRACK) | PTMD_SECTION_BIT(PTMD_SEC_NATIVE_SAMPLES) |
                       PTMD_SECTION_BIT(PTMD_SEC_NATIVE_STACKS) | PTMD_SECTION_BIT(PTMD_SEC_NATIVE_PCS) |
                       PTMD_SECTION_BIT(PTMD_SEC_NATIVE_FRAMES) | PTMD_SECTION_BIT(PTMD_SEC_NATIVE_NAMES);
        v->native_track = &n->rec;
        v->native_samples = (const ptmd_native_sample *)(const void *)n->samples.base;
        v->n_native_samples = PTMD_BUF_COUNT(&n->samples, ptmd_native_sample);
        v->native_stacks = (const ptmd_native_stack *)(const void *)n->stacks.base;
        v->n_native_stacks = PTMD_BUF_COUNT(&n->stacks, ptmd_native_stack);
        v->native_pcs = (const uint64_t *)(const void *)n->pcs.base;
        v->n_native_pcs = PTMD_BUF_COUNT(&n->pcs, uint64_t);
        v->native_frames = (const ptmd_ruby_frame *)(const void *)n->frames.base;
        v->n_native_frames = PTMD_BUF_COUNT(&n->frames, ptmd_ruby_frame);
        v->native_names = n->names.base;
        v->native_names_len = n->names.len;
        v->n_native_names = n->n_names;
    }
    if (w->references) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_REFS) | PTMD_SECTION_BIT(PTMD_SEC_INT_REFS) |
                       PTMD_SECTION_BIT(PTMD_SEC_ROOTS) | PTMD_SECTION_BIT(PTMD_SEC_ROOT_REFS) |
                       PTMD_SECTION_BIT(PTMD_SEC_INNER_REFS) | PTMD_SECTION_BIT(PTMD_SEC_ROOT_INNER_REFS);
        v->refs = (const ptmd_ref *)(const void *)w->refs.base;
        v->n_refs = PTMD_BUF_COUNT(&w->refs, ptmd_ref);
        v->int_refs = (const ptmd_ref *)(const void *)w->int_refs.base;
        v->n_int_refs = PTMD_BUF_COUNT(&w->int_refs, ptmd_ref);
        v->roots = (const ptmd_root_rec *)(const void *)w->roots.base;
        v->n_roots = PTMD_BUF_COUNT(&w->roots, ptmd_root_rec);
        v->root_refs = (const ptmd_root_ref *)(const void *)w->root_refs.base;
        v->n_root_refs = PTMD_BUF_COUNT(&w->root_refs, ptmd_root_ref);
        v->inner_refs = (const ptmd_ref *)(const void *)w->inner_refs.base;
        v->n_inner_refs = PTMD_BUF_COUNT(&w->inner_refs, ptmd_ref);
        v->root_inner_refs = (const ptmd_root_ref *)(const void *)w->root_inner_refs.base;
        v->n_root_inner_refs = PTMD_BUF_COUNT(&w->root_inner_refs, ptmd_root_ref);
    }
    if (d->scratch.len) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_SCRATCH);
        v->scratch = (const ptmd_scratch_rec *)(const void *)d->scratch.base;
        v->n_scratch = PTMD_BUF_COUNT(&d->scratch, ptmd_scratch_rec);
    }
    if (d->trim.base) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_TRIM_CHECK);
        v->trim_released = (const uint64_t *)(const void *)d->trim.base;
        v->n_trim_released = PTMD_BUF_COUNT(&d->trim, uint64_t);
    }
    if (d->has_source) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_SOURCE);
        v->source = &d->source;
    }
    if (d->has_snapshot) {
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_SNAPSHOT);
        v->snapshot = &d->snap;
    }
    view_rss(d, v);
}
