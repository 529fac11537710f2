/* PtmallocDump::Dump's owner figures: every allocated chunk Ruby-owned, anchored (and by which root)
 * or leaked (analysis/owners.c), as Hashes. */
#include "bindings/bindings.h"
#include "format/reader.h"

#include <stdlib.h>
#include <string.h>

#define PTMD_LEAK_SIZES 20  /* sizes of leaked chunks listed, most bytes first */
#define PTMD_LEAK_SAMPLES 5 /* addresses listed per size */

static VALUE kind_sym(int k)
{
    static VALUE syms[PTMD_OK_COUNT];
    if (!syms[k]) syms[k] = PTMD_SYM(ptmd_owner_kind_names[k]);
    return syms[k];
}

static VALUE root_name(const ptmd_view *v, uint32_t root)
{
    const ptmd_root_rec *r = &v->roots[root];
    return rb_str_new(r->name, (long)strnlen(r->name, sizeof(r->name)));
}

static VALUE pair_hash(uint64_t bytes, uint64_t count)
{
    VALUE h = rb_hash_new();
    PTMD_SET(h, "bytes", PTMD_U64(bytes));
    PTMD_SET(h, "count", PTMD_U64(count));
    return h;
}

typedef struct {
    uint64_t size, count, bytes;
    uint64_t samples[PTMD_LEAK_SAMPLES];
} leak_size;

static int by_size(const void *x, const void *y)
{
    const leak_size *a = x, *b = y;
    return a->size < b->size ? -1 : a->size > b->size;
}

static int by_bytes_desc(const void *x, const void *y)
{
    const leak_size *a = x, *b = y;
    return a->bytes > b->bytes ? -1 : a->bytes < b->bytes ? 1 : by_size(x, y);
}

/* For each of the n sizes listed, the index of the heap holding the most of its leaked bytes (the first
 * such on a tie): where a report shows them, the main arena's memory being in several heaps at times
 * (qemu-user gives it mmapped regions, and so may a process whose break cannot grow). */
static void heaviest_heaps(const ptmd_view *v, const ptmd_owners *o, const leak_size *s, size_t n, uint64_t *heap_of)
{
    uint64_t here[PTMD_LEAK_SIZES], best[PTMD_LEAK_SIZES];
    size_t h, i, k;
    for (k = 0; k < n; k++) {
        best[k] = 0;
        heap_of[k] = UINT64_MAX;
    }
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hr = &v->heaps[h];
        size_t end =
            hr->first_chunk + hr->n_chunks < v->n_chunks ? (size_t)(hr->first_chunk + hr->n_chunks) : v->n_chunks;
        memset(here, 0, sizeof(here));
        for (i = (size_t)hr->first_chunk; i < end; i++) {
            uint64_t size;
            if (o->kind[i] != PTMD_OK_LEAKED) continue;
            size = ptmd_rec_size(&v->chunks[i]);
            for (k = 0; k < n; k++)
                if (s[k].size == size) {
                    here[k] += size;
                    break;
                }
        }
        for (k = 0; k < n; k++)
            if (here[k] > best[k]) {
                best[k] = here[k];
                heap_of[k] = h;
            }
    }
}

/* Leaked chunks by size: one entry per size (sorted by size, then counted), most bytes first. */
static VALUE leaked_by_size(const ptmd_view *v, const ptmd_owners *o)
{
    size_t i, n = 0, m = 0;
    leak_size *s;
    uint64_t heap_of[PTMD_LEAK_SIZES];
    VALUE out = rb_ary_new();
    for (i = 0; i < v->n_chunks; i++) n += o->kind[i] == PTMD_OK_LEAKED;
    if (!n) return out;
    s = ALLOC_N(leak_size, n);
    for (i = 0; i < v->n_chunks; i++) {
        if (o->kind[i] != PTMD_OK_LEAKED) continue;
        memset(&s[m], 0, sizeof(s[m]));
        s[m].size = ptmd_rec_size(&v->chunks[i]);
        s[m].samples[0] = v->chunks[i].addr;
        m++;
    }
    qsort(s, m, sizeof(*s), by_size);
    for (i = 0, n = 0; i < m; i++) {
        if (n && s[n - 1].size == s[i].size) {
            if (s[n - 1].count < PTMD_LEAK_SAMPLES) s[n - 1].samples[s[n - 1].count] = s[i].samples[0];
        } else {
            uint64_t first = s[i].samples[0], size = s[i].size;
            memset(&s[n], 0, sizeof(s[n]));
            s[n].size = size;
            s[n].samples[0] = first;
            n++;
        }
        s[n - 1].count++;
        s[n - 1].bytes += s[n - 1].size;
    }
    qsort(s, n, sizeof(*s), by_bytes_desc);
    if (n > PTMD_LEAK_SIZES) n = PTMD_LEAK_SIZES;
    heaviest_heaps(v, o, s, n, heap_of);
    for (i = 0; i < n; i++) {
        VALUE h = rb_hash_new(), samples = rb_ary_new();
        size_t k;
        for (k = 0; k < PTMD_LEAK_SAMPLES && k < s[i].count; k++) rb_ary_push(samples, PTMD_U64(s[i].samples[k]));
        PTMD_SET(h, "size", PTMD_U64(s[i].size));
        PTMD_SET(h, "count", PTMD_U64(s[i].count));
        PTMD_SET(h, "bytes", PTMD_U64(s[i].bytes));
        PTMD_SET(h, "samples", samples);
        PTMD_SET(h, "heap", heap_of[i] == UINT64_MAX ? Qnil : PTMD_U64(heap_of[i]));
        rb_ary_push(out, h);
    }
    xfree(s);
    return out;
}

/* Dump#_owners -> { ruby:, anchored:, leaked:, unknown:, interior:, anchored_by:, leaked_by_size: } or nil */
static VALUE dump_owners(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_owners *o = ptmd_rb_dump_owners(self);
    uint64_t bytes[PTMD_OK_COUNT] = { 0 }, count[PTMD_OK_COUNT] = { 0 };
    VALUE h, by;
    uint64_t *per_root;
    size_t i;
    if (!o) return Qnil;
    per_root = ALLOC_N(uint64_t, v->n_roots + 1);
    memset(per_root, 0, (v->n_roots + 1) * sizeof(uint64_t));
    for (i = 0; i < v->n_chunks; i++) {
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        bytes[o->kind[i]] += size;
        count[o->kind[i]]++;
        if (o->kind[i] == PTMD_OK_ANCHORED && o->anchor[i] < v->n_roots) per_root[o->anchor[i]] += size;
    }
    /* roots of one name (an object's several segments) add up */
    by = rb_hash_new();
    for (i = 0; i < v->n_roots; i++) {
        VALUE name, was;
        if (!per_root[i]) continue;
        name = root_name(v, (uint32_t)i);
        was = rb_hash_aref(by, name);
        rb_hash_aset(by, name, PTMD_U64((NIL_P(was) ? 0 : NUM2ULL(was)) + per_root[i]));
    }
    xfree(per_root);
    h = rb_hash_new();
    PTMD_SET(h, "ruby", pair_hash(bytes[PTMD_OK_RUBY], count[PTMD_OK_RUBY]));
    PTMD_SET(h, "anchored", pair_hash(bytes[PTMD_OK_ANCHORED], count[PTMD_OK_ANCHORED]));
    PTMD_SET(h, "leaked", pair_hash(bytes[PTMD_OK_LEAKED], count[PTMD_OK_LEAKED]));
    PTMD_SET(h, "unknown", pair_hash(bytes[PTMD_OK_UNKNOWN], count[PTMD_OK_UNKNOWN]));
    PTMD_SET(h, "interior", pair_hash(bytes[PTMD_OK_INTERIOR], count[PTMD_OK_INTERIOR]));
    PTMD_SET(h, "anchored_by", by);
    PTMD_SET(h, "leaked_by_size", leaked_by_size(v, o));
    return h;
}

/* Dump#_owner_of(chunk address) -> [kind, anchor name or nil, root kind or nil, direct] or nil */
static VALUE dump_owner_of(VALUE self, VALUE address)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_owners *o = ptmd_rb_dump_owners(self);
    long ci;
    uint32_t r;
    if (!o || (ci = ptmd_view_find_chunk(v, NUM2ULL(address), 0)) < 0 || o->kind[ci] == PTMD_OK_NONE) return Qnil;
    r = o->anchor[ci];
    if (r >= v->n_roots) return rb_ary_new_from_args(4, kind_sym(o->kind[ci]), Qnil, Qnil, Qfalse);
    return rb_ary_new_from_args(4, kind_sym(o->kind[ci]), root_name(v, r),
                                PTMD_SYM(PTMD_NAME_OF(ptmd_root_kind_names, v->roots[r].kind)),
                                PTMD_BOOL(o->direct[ci]));
}

/* [[root name, address of the word], ...] of the root references into chunk ci */
static VALUE roots_holding(const ptmd_view *v, const ptmd_root_ref *refs, size_t n, uint32_t ci)
{
    VALUE out = rb_ary_new();
    size_t i;
    for (i = 0; i < n; i++)
        if (refs[i].chunk == ci)
            rb_ary_push(out, rb_ary_new_from_args(2, root_name(v, refs[i].root), PTMD_U64(refs[i].where)));
    return out;
}

static VALUE sources_of(const ptmd_view *v, const ptmd_ref *refs, size_t n, uint32_t to)
{
    VALUE out = rb_ary_new();
    size_t i;
    for (i = 0; i < n; i++)
        if (refs[i].to == to) rb_ary_push(out, PTMD_U64(v->chunks[refs[i].from].addr));
    return out;
}

/* The addresses of the Ruby objects whose recorded slot words hold `user` or the Integer of it. */
static VALUE objects_holding(const ptmd_view *v, uint64_t user)
{
    VALUE out = rb_ary_new();
    size_t i, w = 0;
    uint32_t k;
    for (i = 0; i < v->n_ruby_objects; i++) {
        const ptmd_ruby_object *o = &v->ruby_objects[i];
        int held = 0;
        for (k = 0; k < o->n_words && w < v->n_ruby_words; k++, w++)
            held |= v->ruby_words[w] == user || v->ruby_words[w] == ((user << 1) | 1);
        if (held) rb_ary_push(out, PTMD_U64(o->address));
    }
    return out;
}

/* Dump#_referrers(chunk address) -> [chunk addresses whose words hold its user address, chunk
 * addresses holding it as a Ruby Integer, [[root name, address of the word], ...], addresses of Ruby
 * objects whose slots hold it, chunk addresses with a word pointing into it past its start, [[root
 * name, address of the word], ...] of such words in roots] or nil: a linear pass over the recorded
 * references and slot words, for one chunk at a time */
static VALUE dump_referrers(VALUE self, VALUE address)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    long ci;
    if (!v->roots || (ci = ptmd_view_find_chunk(v, NUM2ULL(address), 0)) < 0) return Qnil;
    return rb_ary_new_from_args(
        6, sources_of(v, v->refs, v->n_refs, (uint32_t)ci), sources_of(v, v->int_refs, v->n_int_refs, (uint32_t)ci),
        roots_holding(v, v->root_refs, v->n_root_refs, (uint32_t)ci), objects_holding(v, v->chunks[ci].addr + 16),
        sources_of(v, v->inner_refs, v->n_inner_refs, (uint32_t)ci),
        roots_holding(v, v->root_inner_refs, v->n_root_inner_refs, (uint32_t)ci));
}

/* Dump#_roots -> [[start, end, kind, tid, name], ...] */
static VALUE dump_roots(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE out = rb_ary_new_capa((long)v->n_roots);
    size_t i;
    for (i = 0; i < v->n_roots; i++) {
        const ptmd_root_rec *r = &v->roots[i];
        rb_ary_push(out, rb_ary_new_from_args(5, PTMD_U64(r->start), PTMD_U64(r->end),
                                              PTMD_SYM(PTMD_NAME_OF(ptmd_root_kind_names, r->kind)), UINT2NUM(r->tid),
                                              root_name(v, (uint32_t)i)));
    }
    return out;
}

void ptmd_owners_class_init(void)
{
    VALUE cDump = rb_const_get(ptmd_mPtmallocDump, rb_intern("Dump"));
    rb_define_private_method(cDump, "_owners", dump_owners, 0);
    rb_define_private_method(cDump, "_owner_of", dump_owner_of, 1);
    rb_define_private_method(cDump, "_roots", dump_roots, 0);
    rb_define_private_method(cDump, "_referrers", dump_referrers, 1);
}
