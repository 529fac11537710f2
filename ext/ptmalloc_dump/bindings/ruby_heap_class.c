/* PtmallocDump::Dump's Ruby layer: pages, objects, owners and the owner summary, from the RUBY_*
 * sections and the attribution (attribution.c). */
#include "bindings/bindings.h"
#include "format/reader.h"

#include <string.h>

#define U64(x) ULL2NUM((unsigned long long)(x))
#define SET(h, key, val) rb_hash_aset((h), ID2SYM(rb_intern(key)), (val))

static const char *type_name(int t)
{
    switch (t) {
    case T_NONE: return "T_NONE";
    case T_OBJECT: return "T_OBJECT";
    case T_CLASS: return "T_CLASS";
    case T_MODULE: return "T_MODULE";
    case T_FLOAT: return "T_FLOAT";
    case T_STRING: return "T_STRING";
    case T_REGEXP: return "T_REGEXP";
    case T_ARRAY: return "T_ARRAY";
    case T_HASH: return "T_HASH";
    case T_STRUCT: return "T_STRUCT";
    case T_BIGNUM: return "T_BIGNUM";
    case T_FILE: return "T_FILE";
    case T_DATA: return "T_DATA";
    case T_MATCH: return "T_MATCH";
    case T_COMPLEX: return "T_COMPLEX";
    case T_RATIONAL: return "T_RATIONAL";
    case T_SYMBOL: return "T_SYMBOL";
    case T_IMEMO: return "T_IMEMO";
    case T_ICLASS: return "T_ICLASS";
    default: return "T_UNKNOWN";
    }
}

/* imemo_type of Ruby 2.7 .. 3.3 (internal/imemo.h) */
static const char *const imemo_names[16] = {
    "env", "cref", "svar", "throw_data", "ifunc", "memo", "ment", "iseq", "tmpbuf", "ast",
    "parser_strterm", "callinfo", "callcache", "constcache", "imemo14", "imemo15"
};

static const char *const category_names[PTMD_OWN_COUNT] = {
    "none", "string", "array", "hash", "object", "data", "imemo", "other_ruby", "ruby_page", "native"
};

static const ptmd_view *ruby_view(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    if (!v->ruby_meta) rb_raise(rb_path2class("PtmallocDump::Error"), "this dump has no Ruby heap data");
    return v;
}

/* Offsets of the names, computed on demand (the section is a sequence of variable entries). */
static VALUE names_array(const ptmd_view *v)
{
    VALUE ary = rb_ary_new_capa((long)v->n_ruby_names);
    size_t off = 0;
    while (off + 16 <= v->ruby_names_len) {
        uint64_t key;
        uint32_t kind, len;
        memcpy(&key, v->ruby_names + off, 8);
        memcpy(&kind, v->ruby_names + off + 8, 4);
        memcpy(&len, v->ruby_names + off + 12, 4);
        rb_ary_push(ary, rb_utf8_str_new((const char *)v->ruby_names + off + 16, len));
        off += 16 + ((len + 7u) & ~7u);
    }
    return ary;
}

static VALUE dump_ruby_p(VALUE self)
{
    return ptmd_rb_dump_view(self)->ruby_meta ? Qtrue : Qfalse;
}

static VALUE dump_ruby_meta(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_ruby_meta *m = v->ruby_meta;
    VALUE h = rb_hash_new();
    SET(h, "heap_allocated_pages", U64(m->heap_allocated_pages));
    SET(h, "heap_tomb_pages", U64(m->heap_tomb_pages));
    SET(h, "heap_live_slots", U64(m->heap_live_slots));
    SET(h, "heap_free_slots", U64(m->heap_free_slots));
    SET(h, "total_allocated_objects", U64(m->total_allocated_objects));
    SET(h, "pass_ns", U64(m->pass_ns));
    SET(h, "refs_ns", U64(m->refs_ns));
    SET(h, "references", (m->flags & PTMD_RF_REFERENCES) ? Qtrue : Qfalse);
    SET(h, "page_count", U64(v->n_ruby_pages));
    SET(h, "object_count", U64(v->n_ruby_objects));
    SET(h, "reference_count", U64(v->n_refs));
    return h;
}

static VALUE dump_ruby_names(VALUE self)
{
    return names_array(ruby_view(self));
}

static VALUE dump_ruby_pages(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_attribution *a = ptmd_rb_dump_attribution(self);
    VALUE ary = rb_ary_new_capa((long)v->n_ruby_pages);
    size_t i;
    PTMD_UNUSED(a);
    for (i = 0; i < v->n_ruby_pages; i++) {
        const ptmd_ruby_page *p = &v->ruby_pages[i];
        rb_ary_push(ary, rb_ary_new_from_args(6, U64(p->start), U64(p->end), UINT2NUM(p->stride), UINT2NUM(p->total),
                                              UINT2NUM(p->live), UINT2NUM(p->free)));
    }
    return ary;
}

/* [address, type, class index or nil, data type index or nil, imemo type or nil] */
static VALUE object_tuple(const ptmd_ruby_object *o)
{
    return rb_ary_new_from_args(5, U64(o->address), ID2SYM(rb_intern(type_name(o->type))),
                                o->klass == PTMD_NO_NAME ? Qnil : UINT2NUM(o->klass),
                                o->data_type == PTMD_NO_NAME ? Qnil : UINT2NUM(o->data_type),
                                o->type == T_IMEMO ? ID2SYM(rb_intern(imemo_names[o->subtype & 15])) : Qnil);
}

static VALUE dump_ruby_object(VALUE self, VALUE index)
{
    const ptmd_view *v = ruby_view(self);
    long i = NUM2LONG(index);
    if (i < 0 || (size_t)i >= v->n_ruby_objects) return Qnil;
    return object_tuple(&v->ruby_objects[i]);
}

/* The candidate pointer words recorded for object i. */
static VALUE dump_ruby_object_words(VALUE self, VALUE index)
{
    const ptmd_view *v = ruby_view(self);
    long i = NUM2LONG(index), k;
    size_t w = 0;
    VALUE ary = rb_ary_new();
    if (i < 0 || (size_t)i >= v->n_ruby_objects) return Qnil;
    for (k = 0; k < i; k++) w += v->ruby_objects[k].n_words;   /* linear: a diagnostic, not a hot path */
    for (k = 0; k < v->ruby_objects[i].n_words && w + (size_t)k < v->n_ruby_words; k++)
        rb_ary_push(ary, U64(v->ruby_words[w + (size_t)k]));
    return ary;
}

static VALUE dump_each_ruby_object(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    size_t i;
    for (i = 0; i < v->n_ruby_objects; i++) rb_yield(object_tuple(&v->ruby_objects[i]));
    return self;
}

/* Index of the object at a VALUE address, or nil (through an address-sorted permutation). */
static VALUE dump_ruby_object_index(VALUE self, VALUE address)
{
    const ptmd_view *v = ruby_view(self);
    const uint32_t *order = ptmd_rb_dump_object_order(self);
    uint64_t a = NUM2ULL(address);
    size_t lo = 0, hi = v->n_ruby_objects;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->ruby_objects[order[mid]].address < a) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n_ruby_objects && v->ruby_objects[order[lo]].address == a ? ULONG2NUM(order[lo]) : Qnil;
}

/* [object index or nil, category, direct?] of the chunk at an address */
static VALUE dump_owner(VALUE self, VALUE chunk_address)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_attribution *a = ptmd_rb_dump_attribution(self);
    long ci = ptmd_view_find_chunk(v, NUM2ULL(chunk_address), 0);
    uint32_t o;
    if (ci < 0) return Qnil;
    o = a->owner[ci];
    return rb_ary_new_from_args(3, o && o != UINT32_MAX ? ULONG2NUM(o - 1) : Qnil,
                                ID2SYM(rb_intern(category_names[a->category[ci]])), a->direct[ci] ? Qtrue : Qfalse);
}

static VALUE dump_owner_categories(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    if (!v->ruby_meta) return Qnil;
    return rb_str_new((const char *)ptmd_rb_dump_attribution(self)->category, (long)v->n_chunks);
}

/* The owner summary: bytes of in-use chunks by owner type, class and typed-data name. */
static VALUE dump_ruby_summary(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_attribution *a = ptmd_rb_dump_attribution(self);
    VALUE names = names_array(v), h = rb_hash_new(), by_type = rb_hash_new(), by_class = rb_hash_new(),
          by_dtype = rb_hash_new(), by_cat = rb_hash_new();
    uint64_t type_bytes[32] = { 0 }, type_chunks[32] = { 0 }, cat_bytes[PTMD_OWN_COUNT] = { 0 },
             cat_chunks[PTMD_OWN_COUNT] = { 0 }, *class_bytes, *class_chunks, page_bytes = 0, in_malloc = 0;
    size_t i, nn = v->n_ruby_names ? v->n_ruby_names : 1;
    class_bytes = ALLOC_N(uint64_t, 2 * nn);
    class_chunks = ALLOC_N(uint64_t, 2 * nn);
    memset(class_bytes, 0, 2 * nn * sizeof(uint64_t));
    memset(class_chunks, 0, 2 * nn * sizeof(uint64_t));
    for (i = 0; i < v->n_chunks; i++) {
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        uint32_t o = a->owner[i];
        cat_bytes[a->category[i]] += size;
        cat_chunks[a->category[i]]++;
        if (o && o != UINT32_MAX) {
            const ptmd_ruby_object *obj = &v->ruby_objects[o - 1];
            type_bytes[obj->type & 31] += size;
            type_chunks[obj->type & 31]++;
            if (obj->klass != PTMD_NO_NAME) {
                class_bytes[obj->klass] += size;
                class_chunks[obj->klass]++;
            }
            if (obj->data_type != PTMD_NO_NAME) {
                class_bytes[nn + obj->data_type] += size;
                class_chunks[nn + obj->data_type]++;
            }
        }
    }
    for (i = 0; i < 32; i++)
        if (type_chunks[i])
            rb_hash_aset(by_type, ID2SYM(rb_intern(type_name((int)i))), rb_ary_new_from_args(2, U64(type_bytes[i]), U64(type_chunks[i])));
    for (i = 0; i < v->n_ruby_names; i++) {
        VALUE name = rb_ary_entry(names, (long)i);
        if (class_chunks[i]) rb_hash_aset(by_class, name, rb_ary_new_from_args(2, U64(class_bytes[i]), U64(class_chunks[i])));
        if (class_chunks[nn + i])
            rb_hash_aset(by_dtype, name, rb_ary_new_from_args(2, U64(class_bytes[nn + i]), U64(class_chunks[nn + i])));
    }
    xfree(class_bytes);
    xfree(class_chunks);
    for (i = 1; i < PTMD_OWN_COUNT; i++)
        rb_hash_aset(by_cat, ID2SYM(rb_intern(category_names[i])), rb_ary_new_from_args(2, U64(cat_bytes[i]), U64(cat_chunks[i])));
    for (i = 0; i < v->n_ruby_pages; i++) page_bytes += v->ruby_pages[i].end - v->ruby_pages[i].start;
    in_malloc = cat_bytes[PTMD_OWN_RUBY_PAGE];
    SET(h, "by_type", by_type);
    SET(h, "by_class", by_class);
    SET(h, "by_data_type", by_dtype);
    SET(h, "by_category", by_cat);
    SET(h, "ruby_page_bytes", U64(page_bytes));
    SET(h, "ruby_pages_in_malloc_bytes", U64(in_malloc));
    SET(h, "owned_bytes", U64(cat_bytes[PTMD_OWN_STRING] + cat_bytes[PTMD_OWN_ARRAY] + cat_bytes[PTMD_OWN_HASH] +
                              cat_bytes[PTMD_OWN_OBJECT] + cat_bytes[PTMD_OWN_DATA] + cat_bytes[PTMD_OWN_IMEMO] +
                              cat_bytes[PTMD_OWN_OTHER_RUBY]));
    SET(h, "unattributed_bytes", U64(cat_bytes[PTMD_OWN_NATIVE]));
    SET(h, "ambiguous_chunks", U64(a->ambiguous));
    SET(h, "direct_chunks", U64(a->direct_count));
    SET(h, "chunks_via_references", U64(a->via_refs));
    return h;
}

void ptmd_rb_ruby_init(void)
{
    VALUE cDump = rb_const_get(ptmd_mPtmallocDump, rb_intern("Dump"));
    VALUE mRender = rb_const_get(ptmd_mPtmallocDump, rb_intern("Render"));
    VALUE cats = rb_ary_new();
    int i;
    rb_define_private_method(cDump, "_ruby?", dump_ruby_p, 0);
    rb_define_private_method(cDump, "_ruby_meta", dump_ruby_meta, 0);
    rb_define_private_method(cDump, "_ruby_names", dump_ruby_names, 0);
    rb_define_private_method(cDump, "_ruby_pages", dump_ruby_pages, 0);
    rb_define_private_method(cDump, "_ruby_object", dump_ruby_object, 1);
    rb_define_private_method(cDump, "_each_ruby_object", dump_each_ruby_object, 0);
    rb_define_private_method(cDump, "_ruby_object_words", dump_ruby_object_words, 1);
    rb_define_private_method(cDump, "_ruby_object_index", dump_ruby_object_index, 1);
    rb_define_private_method(cDump, "_owner", dump_owner, 1);
    rb_define_private_method(cDump, "_owner_categories", dump_owner_categories, 0);
    rb_define_private_method(cDump, "_ruby_summary", dump_ruby_summary, 0);
    for (i = 0; i < PTMD_OWN_COUNT; i++) rb_ary_push(cats, ID2SYM(rb_intern(category_names[i])));
    rb_define_const(mRender, "OWNER_CATEGORIES", rb_ary_freeze(cats));
}
