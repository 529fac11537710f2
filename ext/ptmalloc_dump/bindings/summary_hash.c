/* Building the summary Hash from ptmd_summarize's figures. */
#include "bindings/bindings.h"

#define SET(h, key, val) rb_hash_aset((h), ID2SYM(rb_intern(key)), (val))
#define U64(x) ULL2NUM((unsigned long long)(x))

static void totals_into(VALUE h, const ptmd_totals *t)
{
    VALUE states = rb_hash_new();
    int s;
    SET(h, "arena", U64(t->arena));
    SET(h, "ordblks", U64(t->ordblks));
    SET(h, "smblks", U64(t->smblks));
    SET(h, "hblks", U64(t->hblks));
    SET(h, "hblkhd", U64(t->hblkhd));
    SET(h, "usmblks", U64(t->usmblks));
    SET(h, "fsmblks", U64(t->fsmblks));
    SET(h, "uordblks", U64(t->uordblks));
    SET(h, "fordblks", U64(t->fordblks));
    SET(h, "keepcost", U64(t->keepcost));
    SET(h, "in_use_count", U64(t->count[PTMD_ST_IN_USE]));
    SET(h, "in_use_bytes", U64(t->bytes[PTMD_ST_IN_USE]));
    SET(h, "tcache_count", U64(t->count[PTMD_ST_TCACHE]));
    SET(h, "tcache_bytes", U64(t->bytes[PTMD_ST_TCACHE]));
    SET(h, "fastbin_count", U64(t->count[PTMD_ST_FASTBIN]));
    SET(h, "fastbin_bytes", U64(t->bytes[PTMD_ST_FASTBIN]));
    SET(h, "top_bytes", U64(t->bytes[PTMD_ST_TOP]));
    SET(h, "meta_bytes", U64(t->bytes[PTMD_ST_META]));
    SET(h, "mmapped_count", U64(t->count[PTMD_ST_MMAPPED]));
    SET(h, "mmapped_bytes", U64(t->bytes[PTMD_ST_MMAPPED]));
    SET(h, "free_bytes", U64(t->bytes[PTMD_ST_TCACHE] + t->fordblks));
    SET(h, "resident_bytes", U64(t->resident_bytes));
    SET(h, "swapped_bytes", U64(t->swapped_bytes));
    SET(h, "absent_bytes", U64(t->absent_bytes));
    SET(h, "shared_bytes", U64(t->shared_bytes));
    SET(h, "free_resident_bytes", U64(t->free_resident_bytes));
    SET(h, "free_swapped_bytes", U64(t->free_swapped_bytes));
    SET(h, "free_released_bytes", U64(t->free_released_bytes));
    SET(h, "largest_free", U64(t->largest_free));
    SET(h, "heap_count", U64(t->heap_count));
    SET(h, "chunk_count", U64(t->chunk_count));
    SET(h, "malloc_info_rest_size", U64(t->malloc_info_rest_size));
    for (s = 0; s < PTMD_ST_COUNT; s++) {
        VALUE e = rb_hash_new();
        SET(e, "count", U64(t->count[s]));
        SET(e, "bytes", U64(t->bytes[s]));
        rb_hash_aset(states, ID2SYM(rb_intern(ptmd_state_names[s])), e);
    }
    SET(h, "states", states);
}

static VALUE binstats(const ptmd_binstat *b, int n, int from)
{
    VALUE ary = rb_ary_new();
    int i;
    for (i = from; i < n; i++) {
        VALUE e;
        if (!b[i].count) continue;
        e = rb_hash_new();
        SET(e, "index", INT2NUM(i));
        SET(e, "from", U64(b[i].from));
        SET(e, "to", U64(b[i].to));
        SET(e, "total", U64(b[i].total));
        SET(e, "count", U64(b[i].count));
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
    SET(h, "arena_count", U64(v->n_arenas));
    SET(h, "thread_count", U64(v->n_threads));
    SET(h, "anomaly_count", U64(v->n_anomalies));
    for (a = 0; a < v->n_arenas; a++) {
        VALUE e = rb_hash_new();
        SET(e, "index", U64(a));
        SET(e, "address", U64(v->arenas[a].address));
        SET(e, "main", (v->arenas[a].flags & PTMD_AF_MAIN) ? Qtrue : Qfalse);
        SET(e, "system_mem", U64(v->arenas[a].system_mem));
        totals_into(e, &per[a].t);
        SET(e, "fastbins", binstats(per[a].fast, 10, 0));
        SET(e, "unsorted", binstats(per[a].bins, 2, 1));
        SET(e, "bins", binstats(per[a].bins, 128, 2));
        rb_ary_push(arenas, e);
    }
    xfree(per);
    SET(h, "arenas", arenas);
    return h;
}
