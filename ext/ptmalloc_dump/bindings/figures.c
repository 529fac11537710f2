/* A view as Ruby values: its header and records (meta, mallinfo2, arenas, heaps, threads, anomalies),
 * its summary (ptmd_summarize) and its page-level analysis. */
#include "bindings/bindings.h"

#include <string.h>

#define PTMD_TOP_RUNS 20
#define PTMD_TOP_PINNED 50
#define PTMD_PINNING_CHUNKS 8

static void totals_into(VALUE h, const ptmd_totals *t)
{
    VALUE states = rb_hash_new();
    int s;
    PTMD_SET(h, "arena", PTMD_U64(t->arena));
    PTMD_SET(h, "ordblks", PTMD_U64(t->ordblks));
    PTMD_SET(h, "smblks", PTMD_U64(t->smblks));
    PTMD_SET(h, "hblks", PTMD_U64(t->hblks));
    PTMD_SET(h, "hblkhd", PTMD_U64(t->hblkhd));
    PTMD_SET(h, "usmblks", PTMD_U64(t->usmblks));
    PTMD_SET(h, "fsmblks", PTMD_U64(t->fsmblks));
    PTMD_SET(h, "uordblks", PTMD_U64(t->uordblks));
    PTMD_SET(h, "fordblks", PTMD_U64(t->fordblks));
    PTMD_SET(h, "keepcost", PTMD_U64(t->keepcost));
    PTMD_SET(h, "in_use_count", PTMD_U64(t->count[PTMD_ST_IN_USE]));
    PTMD_SET(h, "in_use_bytes", PTMD_U64(t->bytes[PTMD_ST_IN_USE]));
    PTMD_SET(h, "tcache_count", PTMD_U64(t->count[PTMD_ST_TCACHE]));
    PTMD_SET(h, "tcache_bytes", PTMD_U64(t->bytes[PTMD_ST_TCACHE]));
    PTMD_SET(h, "fastbin_count", PTMD_U64(t->count[PTMD_ST_FASTBIN]));
    PTMD_SET(h, "fastbin_bytes", PTMD_U64(t->bytes[PTMD_ST_FASTBIN]));
    PTMD_SET(h, "top_bytes", PTMD_U64(t->bytes[PTMD_ST_TOP]));
    PTMD_SET(h, "meta_bytes", PTMD_U64(t->bytes[PTMD_ST_META]));
    PTMD_SET(h, "mmapped_count", PTMD_U64(t->count[PTMD_ST_MMAPPED]));
    PTMD_SET(h, "mmapped_bytes", PTMD_U64(t->bytes[PTMD_ST_MMAPPED]));
    PTMD_SET(h, "free_bytes", PTMD_U64(t->bytes[PTMD_ST_TCACHE] + t->fordblks));
    PTMD_SET(h, "resident_bytes", PTMD_U64(t->resident_bytes));
    PTMD_SET(h, "swapped_bytes", PTMD_U64(t->swapped_bytes));
    PTMD_SET(h, "absent_bytes", PTMD_U64(t->absent_bytes));
    PTMD_SET(h, "shared_bytes", PTMD_U64(t->shared_bytes));
    PTMD_SET(h, "sharing_unknown_bytes", PTMD_U64(t->sharing_unknown_bytes));
    PTMD_SET(h, "free_resident_bytes", PTMD_U64(t->free_resident_bytes));
    PTMD_SET(h, "free_swapped_bytes", PTMD_U64(t->free_swapped_bytes));
    PTMD_SET(h, "free_released_bytes", PTMD_U64(t->free_released_bytes));
    PTMD_SET(h, "largest_free", PTMD_U64(t->largest_free));
    PTMD_SET(h, "heap_count", PTMD_U64(t->heap_count));
    PTMD_SET(h, "chunk_count", PTMD_U64(t->chunk_count));
    PTMD_SET(h, "malloc_info_rest_size", PTMD_U64(t->malloc_info_rest_size));
    for (s = 0; s < PTMD_ST_COUNT; s++) {
        VALUE e = rb_hash_new();
        PTMD_SET(e, "count", PTMD_U64(t->count[s]));
        PTMD_SET(e, "bytes", PTMD_U64(t->bytes[s]));
        rb_hash_aset(states, ID2SYM(rb_intern(ptmd_state_names[s])), e);
    }
    PTMD_SET(h, "states", states);
}

static VALUE binstats(const ptmd_binstat *b, int n, int from)
{
    VALUE ary = rb_ary_new();
    int i;
    for (i = from; i < n; i++) {
        VALUE e;
        if (!b[i].count) continue;
        e = rb_hash_new();
        PTMD_SET(e, "index", INT2NUM(i));
        PTMD_SET(e, "from", PTMD_U64(b[i].from));
        PTMD_SET(e, "to", PTMD_U64(b[i].to));
        PTMD_SET(e, "total", PTMD_U64(b[i].total));
        PTMD_SET(e, "count", PTMD_U64(b[i].count));
        rb_ary_push(ary, e);
    }
    return ary;
}

VALUE ptmd_rb_summary(const ptmd_view *v)
{
    ptmd_totals total;
    ptmd_arena_summary *per = ALLOC_N(ptmd_arena_summary, v->n_arenas ? v->n_arenas : 1);
    VALUE h = rb_hash_new(), arenas = rb_ary_new();
    size_t a;
    ptmd_summarize(v, &total, per);
    totals_into(h, &total);
    PTMD_SET(h, "arena_count", PTMD_U64(v->n_arenas));
    PTMD_SET(h, "thread_count", PTMD_U64(v->n_threads));
    PTMD_SET(h, "anomaly_count", PTMD_U64(v->n_anomalies));
    for (a = 0; a < v->n_arenas; a++) {
        VALUE e = rb_hash_new();
        PTMD_SET(e, "index", PTMD_U64(a));
        PTMD_SET(e, "address", PTMD_U64(v->arenas[a].address));
        PTMD_SET(e, "main", PTMD_BOOL(v->arenas[a].flags & PTMD_AF_MAIN));
        PTMD_SET(e, "system_mem", PTMD_U64(v->arenas[a].system_mem));
        totals_into(e, &per[a].t);
        PTMD_SET(e, "fastbins", binstats(per[a].fast, 10, 0));
        PTMD_SET(e, "unsorted", binstats(per[a].bins, 2, 1));
        PTMD_SET(e, "bins", binstats(per[a].bins, 128, 2));
        rb_ary_push(arenas, e);
    }
    xfree(per);
    PTMD_SET(h, "arenas", arenas);
    return h;
}

static VALUE page_classes(const ptmd_view *v, const ptmd_page_usage *usage, VALUE out)
{
    uint64_t *per_heap = ALLOC_N(uint64_t, (v->n_heaps ? v->n_heaps : 1) * PTMD_PC_COUNT);
    uint64_t pages[PTMD_PC_COUNT], shared[PTMD_PC_COUNT];
    VALUE classes = rb_hash_new(), heaps = rb_ary_new_capa((long)v->n_heaps);
    size_t h, i;
    ptmd_page_class_counts(v, usage, per_heap, pages, shared);
    for (h = 0; h < v->n_heaps; h++) {
        VALUE e = rb_hash_new();
        for (i = 0; i < PTMD_PC_COUNT; i++)
            PTMD_SET(e, ptmd_page_class_names[i], PTMD_U64(per_heap[h * PTMD_PC_COUNT + i]));
        rb_ary_push(heaps, e);
    }
    xfree(per_heap);
    for (i = 0; i < PTMD_PC_COUNT; i++) {
        VALUE e = rb_hash_new();
        PTMD_SET(e, "pages", PTMD_U64(pages[i]));
        PTMD_SET(e, "shared_pages", PTMD_U64(shared[i]));
        PTMD_SET(classes, ptmd_page_class_names[i], e);
    }
    PTMD_SET(out, "page_classes", classes);
    PTMD_SET(out, "heap_page_classes", heaps);
    return out;
}

static VALUE free_runs(const ptmd_view *v)
{
    ptmd_free_run runs[PTMD_TOP_RUNS];
    size_t i, n = ptmd_largest_free_runs(v, runs, PTMD_TOP_RUNS);
    VALUE ary = rb_ary_new_capa((long)n);
    for (i = 0; i < n; i++) {
        VALUE e = rb_hash_new();
        PTMD_SET(e, "start", PTMD_U64(runs[i].start));
        PTMD_SET(e, "end", PTMD_U64(runs[i].end));
        PTMD_SET(e, "resident", PTMD_U64(runs[i].resident));
        PTMD_SET(e, "heap", UINT2NUM(runs[i].heap));
        PTMD_SET(e, "chunks", UINT2NUM(runs[i].chunks));
        rb_ary_push(ary, e);
    }
    return ary;
}

static void pinned_pages(const ptmd_view *v, const ptmd_page_usage *usage, VALUE out)
{
    ptmd_pinned_page pins[PTMD_TOP_PINNED];
    uint64_t pinned_bytes, chunks[PTMD_PINNING_CHUNKS];
    size_t total = ptmd_pinned_pages(v, usage, pins, PTMD_TOP_PINNED, &pinned_bytes), i, k;
    size_t n = total < PTMD_TOP_PINNED ? total : PTMD_TOP_PINNED;
    VALUE ary = rb_ary_new_capa((long)n);
    for (i = 0; i < n; i++) {
        VALUE e = rb_hash_new(), list = rb_ary_new();
        size_t nc = ptmd_pinned_page_chunks(v, &pins[i], chunks, PTMD_PINNING_CHUNKS);
        PTMD_SET(e, "address", PTMD_U64(pins[i].address));
        PTMD_SET(e, "heap", UINT2NUM(pins[i].heap));
        PTMD_SET(e, "in_use", UINT2NUM(pins[i].in_use));
        PTMD_SET(e, "chunk_count", UINT2NUM(pins[i].n_chunks));
        for (k = 0; k < nc; k++)
            rb_ary_push(list, rb_ary_new_from_args(2, PTMD_U64(v->chunks[chunks[k]].addr),
                                                   PTMD_U64(ptmd_rec_size(&v->chunks[chunks[k]]))));
        PTMD_SET(e, "chunks", list);
        rb_ary_push(ary, e);
    }
    PTMD_SET(out, "pinned_pages", ary);
    PTMD_SET(out, "pinned_page_count", PTMD_U64(total));
    PTMD_SET(out, "pinned_bytes", PTMD_U64(pinned_bytes));
}

static void free_histogram(const ptmd_view *v, VALUE out)
{
    uint64_t counts[PTMD_HIST_BUCKETS], bytes[PTMD_HIST_BUCKETS], small = 0, all = 0, ps = v->meta->page_size;
    VALUE ary = rb_ary_new();
    size_t i;
    ptmd_free_histogram(v, counts, bytes);
    for (i = 0; i < PTMD_HIST_BUCKETS; i++) {
        all += bytes[i];
        if ((1ull << (i + 1)) <= ps) small += bytes[i];
        if (counts[i])
            rb_ary_push(ary, rb_ary_new_from_args(3, PTMD_U64(1ull << i), PTMD_U64(counts[i]), PTMD_U64(bytes[i])));
    }
    PTMD_SET(out, "free_histogram", ary);
    PTMD_SET(out, "free_bytes_below_page", PTMD_U64(small));
    PTMD_SET(out, "free_bytes_not_top", PTMD_U64(all));
}

VALUE ptmd_rb_analysis(const ptmd_view *v, const ptmd_page_usage *usage)
{
    VALUE out = rb_hash_new(), trim_ary = rb_ary_new_capa((long)v->n_arenas);
    uint64_t *trim = ALLOC_N(uint64_t, v->n_arenas ? v->n_arenas : 1);
    size_t i;
    page_classes(v, usage, out);
    PTMD_SET(out, "free_runs", free_runs(v));
    pinned_pages(v, usage, out);
    ptmd_trim_estimate(v, trim);
    for (i = 0; i < v->n_arenas; i++) rb_ary_push(trim_ary, PTMD_U64(trim[i]));
    xfree(trim);
    PTMD_SET(out, "trim_estimate", trim_ary);
    free_histogram(v, out);
    return out;
}

VALUE ptmd_rb_meta(const ptmd_view *v)
{
    const ptmd_meta *m = v->meta;
    VALUE h = rb_hash_new();
    size_t off = 0;
    PTMD_SET(h, "pid", PTMD_U64(m->pid));
    PTMD_SET(h, "ppid", PTMD_U64(m->ppid));
    PTMD_SET(h, "time_sec", LL2NUM(m->time_sec));
    PTMD_SET(h, "time_nsec", PTMD_U64(m->time_nsec));
    PTMD_SET(h, "page_size", PTMD_U64(m->page_size));
    PTMD_SET(h, "main_arena", PTMD_U64(m->main_arena));
    PTMD_SET(h, "mp", PTMD_U64(m->mp_addr));
    PTMD_SET(h, "libc_base", PTMD_U64(m->libc_base));
    PTMD_SET(h, "sbrk_base", PTMD_U64(m->sbrk_base));
    PTMD_SET(h, "heap_max_size", PTMD_U64(m->heap_max_size));
    PTMD_SET(h, "mmap_threshold", PTMD_U64(m->mmap_threshold));
    PTMD_SET(h, "trim_threshold", PTMD_U64(m->trim_threshold));
    PTMD_SET(h, "top_pad", PTMD_U64(m->top_pad));
    PTMD_SET(h, "arena_max", PTMD_U64(m->arena_max));
    PTMD_SET(h, "arena_test", PTMD_U64(m->arena_test));
    PTMD_SET(h, "n_mmaps", PTMD_U64(m->n_mmaps));
    PTMD_SET(h, "mmapped_mem", PTMD_U64(m->mmapped_mem));
    PTMD_SET(h, "max_mmapped_mem", PTMD_U64(m->max_mmapped_mem));
    PTMD_SET(h, "tcache_bins", PTMD_U64(m->tcache_bins));
    PTMD_SET(h, "tcache_count", PTMD_U64(m->tcache_count));
    PTMD_SET(h, "tcache_max_bytes", PTMD_U64(m->tcache_max_bytes));
    PTMD_SET(h, "walk_ns", PTMD_U64(m->walk_ns));
    PTMD_SET(h, "residency_ns", PTMD_U64(m->residency_ns));
    PTMD_SET(h, "lock_wait_ns", PTMD_U64(m->lock_wait_ns));
    PTMD_SET(h, "symbol_source_code", UINT2NUM(m->symbol_source));
    PTMD_SET(h, "residency_source_code", UINT2NUM(m->residency_source));
    PTMD_SET(h, "glibc_major", UINT2NUM(m->glibc_major));
    PTMD_SET(h, "glibc_minor", UINT2NUM(m->glibc_minor));
    PTMD_SET(h, "flags", UINT2NUM(m->flags));
    PTMD_SET(h, "thread_count", UINT2NUM(m->thread_count));
    {
        VALUE strings = rb_hash_new();
        while (off < v->strings_len) {
            uint16_t kl;
            uint32_t vl;
            VALUE k;
            memcpy(&kl, v->strings + off, 2);
            k = rb_str_new((const char *)v->strings + off + 2, kl);
            off += 2 + kl;
            memcpy(&vl, v->strings + off, 4);
            rb_hash_aset(strings, k, rb_utf8_str_new((const char *)v->strings + off + 4, vl));
            off += 4 + vl;
        }
        PTMD_SET(h, "strings", strings);
    }
    return h;
}

VALUE ptmd_rb_mallinfo2(const ptmd_view *v)
{
    const ptmd_mallinfo2_rec *m = v->mallinfo2;
    VALUE h = rb_hash_new();
    PTMD_SET(h, "arena", PTMD_U64(m->arena));
    PTMD_SET(h, "ordblks", PTMD_U64(m->ordblks));
    PTMD_SET(h, "smblks", PTMD_U64(m->smblks));
    PTMD_SET(h, "hblks", PTMD_U64(m->hblks));
    PTMD_SET(h, "hblkhd", PTMD_U64(m->hblkhd));
    PTMD_SET(h, "usmblks", PTMD_U64(m->usmblks));
    PTMD_SET(h, "fsmblks", PTMD_U64(m->fsmblks));
    PTMD_SET(h, "uordblks", PTMD_U64(m->uordblks));
    PTMD_SET(h, "fordblks", PTMD_U64(m->fordblks));
    PTMD_SET(h, "keepcost", PTMD_U64(m->keepcost));
    return h;
}

VALUE ptmd_rb_arena_records(const ptmd_view *v)
{
    VALUE ary = rb_ary_new_capa((long)v->n_arenas);
    size_t i;
    for (i = 0; i < v->n_arenas; i++) {
        const ptmd_arena_rec *a = &v->arenas[i];
        VALUE h = rb_hash_new();
        PTMD_SET(h, "index", PTMD_U64(i));
        PTMD_SET(h, "address", PTMD_U64(a->address));
        PTMD_SET(h, "main", PTMD_BOOL(a->flags & PTMD_AF_MAIN));
        PTMD_SET(h, "noncontiguous", PTMD_BOOL(a->flags & PTMD_AF_NONCONTIGUOUS));
        PTMD_SET(h, "corrupt", PTMD_BOOL(a->flags & PTMD_AF_CORRUPT));
        PTMD_SET(h, "top", PTMD_U64(a->top));
        PTMD_SET(h, "top_size", PTMD_U64(a->top_size));
        PTMD_SET(h, "last_remainder", PTMD_U64(a->last_remainder));
        PTMD_SET(h, "system_mem", PTMD_U64(a->system_mem));
        PTMD_SET(h, "max_system_mem", PTMD_U64(a->max_system_mem));
        PTMD_SET(h, "next", PTMD_U64(a->next));
        PTMD_SET(h, "next_free", PTMD_U64(a->next_free));
        PTMD_SET(h, "attached_threads", PTMD_U64(a->attached_threads));
        PTMD_SET(h, "first_heap", UINT2NUM(a->first_heap));
        PTMD_SET(h, "heap_count", UINT2NUM(a->n_heaps));
        rb_ary_push(ary, h);
    }
    return ary;
}

VALUE ptmd_rb_heap_records(const ptmd_view *v)
{
    VALUE ary = rb_ary_new_capa((long)v->n_heaps);
    size_t i;
    for (i = 0; i < v->n_heaps; i++) {
        const ptmd_heap_rec *hp = &v->heaps[i];
        VALUE h = rb_hash_new();
        PTMD_SET(h, "index", PTMD_U64(i));
        PTMD_SET(h, "kind", ID2SYM(rb_intern(PTMD_NAME_OF(ptmd_heap_kind_names, hp->kind))));
        PTMD_SET(h, "arena", hp->arena == PTMD_NO_ARENA ? Qnil : UINT2NUM(hp->arena));
        PTMD_SET(h, "start", PTMD_U64(hp->start));
        PTMD_SET(h, "end", PTMD_U64(hp->end));
        PTMD_SET(h, "reserved_end", PTMD_U64(hp->reserved_end));
        PTMD_SET(h, "prev", PTMD_U64(hp->prev));
        PTMD_SET(h, "mprotect_size", PTMD_U64(hp->mprotect_size));
        PTMD_SET(h, "first_chunk", PTMD_U64(hp->first_chunk));
        PTMD_SET(h, "chunk_count", PTMD_U64(hp->n_chunks));
        PTMD_SET(h, "first_page", PTMD_U64(hp->first_page));
        PTMD_SET(h, "page_count", PTMD_U64(hp->n_pages));
        PTMD_SET(h, "page_base", PTMD_U64(hp->page_base));
        PTMD_SET(h, "truncated", PTMD_BOOL(hp->flags & PTMD_HF_TRUNCATED));
        rb_ary_push(ary, h);
    }
    return ary;
}

VALUE ptmd_rb_thread_records(const ptmd_view *v)
{
    VALUE ary = rb_ary_new_capa((long)v->n_threads);
    size_t i;
    for (i = 0; i < v->n_threads; i++) {
        const ptmd_thread_rec *t = &v->threads[i];
        VALUE h = rb_hash_new();
        PTMD_SET(h, "tid", t->tid ? UINT2NUM(t->tid) : Qnil);
        PTMD_SET(h, "pthread", t->pthread ? PTMD_U64(t->pthread) : Qnil);
        PTMD_SET(h, "tcache", t->tcache ? PTMD_U64(t->tcache) : Qnil);
        PTMD_SET(h, "arena", t->arena ? PTMD_U64(t->arena) : Qnil);
        PTMD_SET(h, "tcache_count", UINT2NUM(t->tcache_count));
        PTMD_SET(h, "tcache_bytes", PTMD_U64(t->tcache_bytes));
        PTMD_SET(h, "current", PTMD_BOOL(t->flags & PTMD_TF_CURRENT));
        PTMD_SET(h, "exiting", PTMD_BOOL(t->flags & PTMD_TF_EXITING));
        PTMD_SET(h, "found_by",
                 (t->flags & PTMD_TF_TLS)    ? PTMD_SYM("tls")
                 : (t->flags & PTMD_TF_SCAN) ? PTMD_SYM("scan")
                                             : Qnil);
        rb_ary_push(ary, h);
    }
    return ary;
}

VALUE ptmd_rb_anomaly_records(const ptmd_view *v)
{
    VALUE ary = rb_ary_new_capa((long)v->n_anomalies);
    size_t i;
    for (i = 0; i < v->n_anomalies; i++) {
        const ptmd_anomaly_rec *a = &v->anomalies[i];
        VALUE h = rb_hash_new();
        PTMD_SET(h, "kind", ID2SYM(rb_intern(PTMD_NAME_OF(ptmd_anomaly_names, a->kind))));
        PTMD_SET(h, "address", PTMD_U64(a->address));
        PTMD_SET(h, "detail", PTMD_U64(a->detail));
        PTMD_SET(h, "arena", a->arena == PTMD_NO_ARENA ? Qnil : UINT2NUM(a->arena));
        rb_ary_push(ary, h);
    }
    return ary;
}

/* ---- the whole RSS and the GC's counts ---------------------------------------------------- */

/* { total:, vm_rss:, <part>: bytes ..., files: [{ path:, bytes: }] largest first }, or nil without
 * mappings (analysis/rss.c). A file mapped several times is one entry. */
VALUE ptmd_rb_rss(const ptmd_view *v)
{
    ptmd_rss r;
    uint64_t *file_bytes;
    VALUE h, by_path, files;
    size_t i;
    if (!v->mappings_head) return Qnil;
    file_bytes = ALLOC_N(uint64_t, v->n_mappings ? v->n_mappings : 1);
    if (ptmd_rss_account(v, &r, file_bytes) != 0) {
        xfree(file_bytes);
        rb_raise(rb_eNoMemError, "accounting for the RSS");
    }
    h = rb_hash_new();
    by_path = rb_hash_new();
    PTMD_SET(h, "total", PTMD_U64(r.total));
    PTMD_SET(h, "vm_rss", PTMD_U64(r.vm_rss));
    PTMD_SET(h, "overshoot", PTMD_U64(r.overshoot));
    for (i = 0; i < PTMD_RSS_COUNT; i++) PTMD_SET(h, ptmd_rss_part_names[i], PTMD_U64(r.part[i]));
    for (i = 0; i < v->n_mappings; i++) {
        const ptmd_mapping_rec *m = &v->mappings[i];
        VALUE path, prev;
        if (m->kind != PTMD_MK_FILE) continue;
        path = rb_utf8_str_new(v->mapping_paths + m->path_off, m->path_len);
        prev = rb_hash_lookup2(by_path, path, INT2FIX(0));
        rb_hash_aset(by_path, path, rb_funcall(prev, '+', 1, PTMD_U64(file_bytes[i])));
    }
    xfree(file_bytes);
    files = rb_funcall(by_path, rb_intern("to_a"), 0);
    for (i = 0; i < (size_t)RARRAY_LEN(files); i++) {
        VALUE pair = RARRAY_AREF(files, (long)i), e = rb_hash_new();
        PTMD_SET(e, "path", RARRAY_AREF(pair, 0));
        PTMD_SET(e, "bytes", RARRAY_AREF(pair, 1));
        rb_ary_store(files, (long)i, e);
    }
    PTMD_SET(h, "files", files);
    return h;
}

/* The mappings as recorded: Array of Hashes, nil without the section. */
VALUE ptmd_rb_mappings(const ptmd_view *v)
{
    VALUE ary;
    size_t i;
    if (!v->mappings_head) return Qnil;
    ary = rb_ary_new_capa((long)v->n_mappings);
    for (i = 0; i < v->n_mappings; i++) {
        const ptmd_mapping_rec *m = &v->mappings[i];
        VALUE e = rb_hash_new();
        PTMD_SET(e, "start", PTMD_U64(m->start));
        PTMD_SET(e, "end", PTMD_U64(m->end));
        PTMD_SET(e, "rss", PTMD_U64(m->rss));
        PTMD_SET(e, "private", PTMD_U64(m->private_bytes));
        PTMD_SET(e, "shared", PTMD_U64(m->shared_bytes));
        PTMD_SET(e, "swap", PTMD_U64(m->swap));
        PTMD_SET(e, "anonymous", PTMD_U64(m->anonymous));
        PTMD_SET(e, "offset", PTMD_U64(m->offset));
        PTMD_SET(e, "inode", PTMD_U64(m->inode));
        PTMD_SET(e, "prot", UINT2NUM(m->prot));
        PTMD_SET(e, "kind", PTMD_SYM(PTMD_NAME_OF(ptmd_mapping_kind_names, m->kind)));
        PTMD_SET(e, "path", m->path_len ? rb_utf8_str_new(v->mapping_paths + m->path_off, m->path_len) : Qnil);
        rb_ary_push(ary, e);
    }
    return ary;
}

/* The mappings head's figures: { vm_rss:, rss_anon:, rss_file:, rss_shmem:, read_ns:, from_parent:,
 * approximate:, error: } */
VALUE ptmd_rb_mappings_head(const ptmd_view *v)
{
    const ptmd_mappings_head *m = v->mappings_head;
    VALUE h;
    if (!m) return Qnil;
    h = rb_hash_new();
    PTMD_SET(h, "vm_rss", PTMD_U64(m->vm_rss));
    PTMD_SET(h, "rss_anon", PTMD_U64(m->rss_anon));
    PTMD_SET(h, "rss_file", PTMD_U64(m->rss_file));
    PTMD_SET(h, "rss_shmem", PTMD_U64(m->rss_shmem));
    PTMD_SET(h, "read_ns", PTMD_U64(m->read_ns));
    PTMD_SET(h, "from_parent", PTMD_BOOL(m->flags & PTMD_MAPF_PARENT));
    PTMD_SET(h, "approximate", PTMD_BOOL(m->flags & PTMD_MAPF_APPROX));
    PTMD_SET(h, "error", PTMD_U64((uint64_t)m->error_kib * 1024));
    return h;
}

/* header[:source_info]: where a dump taken from outside came from and what it could not give; nil for
 * a process that dumped itself. */
VALUE ptmd_rb_source(const ptmd_view *v)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } flags[] = {
#define PTMD_SOURCE_FLAG_ENTRY(c, value, name) { value, name },
        PTMD_SOURCE_FLAGS(PTMD_SOURCE_FLAG_ENTRY)
#undef PTMD_SOURCE_FLAG_ENTRY
    };
    const ptmd_source_rec *s = v->source;
    VALUE h, missing;
    size_t i;
    if (!s) return Qnil;
    h = rb_hash_new();
    missing = rb_ary_new();
    for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (s->flags & flags[i].bit) rb_ary_push(missing, PTMD_SYM(flags[i].name + 3)); /* past "no_" */
    PTMD_SET(h, "kind", PTMD_SYM(ptmd_source_kind_names[s->kind]));
    PTMD_SET(h, "pid", PTMD_U64(s->pid));
    PTMD_SET(h, "pause_ns", PTMD_U64(s->pause_ns));
    PTMD_SET(h, "copied_bytes", PTMD_U64(s->copied_bytes));
    PTMD_SET(h, "threads", UINT2NUM(s->threads));
    PTMD_SET(h, "attempts", UINT2NUM(s->attempts));
    PTMD_SET(h, "unavailable", missing);
    return h;
}

/* header[:snapshot]: what a fork snapshot's parent paused for, or nil for other dumps. :pause_ns is
 * the parent's time from the dump's call to the child's first step (the fork's return in the parent
 * takes about as long); :ruby_pass is where the Ruby pass ran (:child, :parent, or nil without one). */
VALUE ptmd_rb_snapshot(const ptmd_view *v)
{
    const ptmd_snapshot_rec *s = v->snapshot;
    VALUE h, where = Qnil;
    if (!s) return Qnil;
    h = rb_hash_new();
    if (s->flags & PTMD_SNF_RUBY_IN_CHILD) where = PTMD_SYM("child");
    else if (s->flags & PTMD_SNF_RUBY_IN_PARENT) where = PTMD_SYM("parent");
    PTMD_SET(h, "pause_ns", PTMD_U64(s->before_fork_ns + s->fork_ns));
    PTMD_SET(h, "before_fork_ns", PTMD_U64(s->before_fork_ns));
    PTMD_SET(h, "fork_ns", PTMD_U64(s->fork_ns));
    PTMD_SET(h, "ruby_pass_ns", PTMD_U64(s->ruby_pass_ns));
    PTMD_SET(h, "gc_ns", PTMD_U64(s->gc_ns));
    PTMD_SET(h, "ruby_pass", where);
    return h;
}

/* header[:gc]: GC.stat's counts at the Ruby pass, or nil. */
VALUE ptmd_rb_gc(const ptmd_view *v)
{
    const ptmd_gc_rec *g = v->gc;
    VALUE h;
    if (!g) return Qnil;
    h = rb_hash_new();
    PTMD_SET(h, "count", PTMD_U64(g->count));
    PTMD_SET(h, "major_gc_count", PTMD_U64(g->major_gc_count));
    PTMD_SET(h, "minor_gc_count", PTMD_U64(g->minor_gc_count));
    PTMD_SET(h, "total_allocated_objects", PTMD_U64(g->total_allocated_objects));
    PTMD_SET(h, "total_freed_objects", PTMD_U64(g->total_freed_objects));
    PTMD_SET(h, "old_objects", PTMD_U64(g->old_objects));
    PTMD_SET(h, "old_objects_limit", PTMD_U64(g->old_objects_limit));
    PTMD_SET(h, "heap_live_slots", PTMD_U64(g->heap_live_slots));
    PTMD_SET(h, "malloc_increase_bytes", PTMD_U64(g->malloc_increase_bytes));
    PTMD_SET(h, "oldmalloc_increase_bytes", PTMD_U64(g->oldmalloc_increase_bytes));
    PTMD_SET(h, "time_ms", PTMD_U64(g->time_ms));
    PTMD_SET(h, "full_gc", PTMD_BOOL(g->flags & PTMD_GF_FULL_GC));
    PTMD_SET(h, "last_gc_major", PTMD_BOOL(g->flags & PTMD_GF_LAST_MAJOR));
    PTMD_SET(h, "sweep_pending", PTMD_BOOL(g->flags & PTMD_GF_SWEEPING));
    return h;
}

VALUE ptmd_rb_names(const unsigned char *names, size_t len, size_t n)
{
    VALUE ary = rb_ary_new_capa((long)n);
    size_t off = 0;
    ptmd_view_name e;
    while (ptmd_view_next_name(names, len, &off, &e)) rb_ary_push(ary, rb_utf8_str_new(e.name, e.len));
    return ary;
}
