/* PtmallocDump::RubyHeap: the Ruby layer of a loaded dump (its @dump): pages, objects, owners and
 * the owner summary, from the RUBY_* sections and the attribution (analysis/attribution.c). */
#include "bindings/bindings.h"
#include "analysis/code_owners.h"
#include "format/reader.h"

#include <string.h>

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

/* imemo_type of Ruby 2.7 .. 3.4 (internal/imemo.h; 2.7: internal.h, up to parser_strterm) */
static const char *const imemo_names[16] = { "env",       "cref",       "svar",           "throw_data",
                                             "ifunc",     "memo",       "ment",           "iseq",
                                             "tmpbuf",    "ast",        "parser_strterm", "callinfo",
                                             "callcache", "constcache", "imemo14",        "imemo15" };

static ID id_dump;

/* The loaded dump this RubyHeap belongs to. */
static VALUE dump_of(VALUE self)
{
    return rb_ivar_get(self, id_dump);
}

static const ptmd_view *ruby_view(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(dump_of(self));
    if (!v->ruby_meta) rb_raise(rb_path2class("PtmallocDump::Error"), "this dump has no Ruby heap data");
    return v;
}

static VALUE names_array(const ptmd_view *v)
{
    return ptmd_rb_names(v->ruby_names, v->ruby_names_len, v->n_ruby_names);
}

static VALUE heap_meta(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_ruby_meta *m = v->ruby_meta;
    VALUE h = rb_hash_new();
    PTMD_SET(h, "heap_allocated_pages", PTMD_U64(m->heap_allocated_pages));
    PTMD_SET(h, "heap_tomb_pages", PTMD_U64(m->heap_tomb_pages));
    PTMD_SET(h, "heap_live_slots", PTMD_U64(m->heap_live_slots));
    PTMD_SET(h, "heap_free_slots", PTMD_U64(m->heap_free_slots));
    PTMD_SET(h, "total_allocated_objects", PTMD_U64(m->total_allocated_objects));
    PTMD_SET(h, "pass_ns", PTMD_U64(m->pass_ns));
    PTMD_SET(h, "refs_ns", PTMD_U64(m->refs_ns));
    PTMD_SET(h, "references", PTMD_BOOL(m->flags & PTMD_RF_REFERENCES));
    PTMD_SET(h, "pages_from_gc", PTMD_BOOL(m->flags & PTMD_RF_PAGES_FROM_GC));
    PTMD_SET(h, "in_snapshot", PTMD_BOOL(m->flags & PTMD_RF_IN_SNAPSHOT));
    PTMD_SET(h, "page_count", PTMD_U64(v->n_ruby_pages));
    PTMD_SET(h, "object_count", PTMD_U64(v->n_ruby_objects));
    PTMD_SET(h, "reference_count", PTMD_U64(v->n_refs));
    return h;
}

static VALUE heap_names(VALUE self)
{
    return names_array(ruby_view(self));
}

static VALUE heap_pages(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    VALUE ary = rb_ary_new_capa((long)v->n_ruby_pages);
    size_t i;
    for (i = 0; i < v->n_ruby_pages; i++) {
        const ptmd_ruby_page *p = &v->ruby_pages[i];
        rb_ary_push(ary, rb_ary_new_from_args(6, PTMD_U64(p->start), PTMD_U64(p->end), UINT2NUM(p->stride),
                                              UINT2NUM(p->total), UINT2NUM(p->live), UINT2NUM(p->free)));
    }
    return ary;
}

/* [address, type, class index or nil, data type index or nil, imemo type or nil, old?, garbage?] */
static VALUE object_tuple(const ptmd_ruby_object *o)
{
    return rb_ary_new_from_args(7, PTMD_U64(o->address), ID2SYM(rb_intern(type_name(o->type))),
                                o->klass == PTMD_NO_NAME ? Qnil : UINT2NUM(o->klass),
                                o->data_type == PTMD_NO_NAME ? Qnil : UINT2NUM(o->data_type),
                                o->type == T_IMEMO ? ID2SYM(rb_intern(imemo_names[o->subtype & 15])) : Qnil,
                                PTMD_BOOL(o->flags & PTMD_OF_OLD), PTMD_BOOL(o->flags & PTMD_OF_GARBAGE));
}

static VALUE heap_object(VALUE self, VALUE index)
{
    const ptmd_view *v = ruby_view(self);
    long i = NUM2LONG(index);
    if (i < 0 || (size_t)i >= v->n_ruby_objects) return Qnil;
    return object_tuple(&v->ruby_objects[i]);
}

/* The candidate pointer words recorded for object i. */
static VALUE heap_object_words(VALUE self, VALUE index)
{
    const ptmd_view *v = ruby_view(self);
    long i = NUM2LONG(index), k;
    size_t w = 0;
    VALUE ary = rb_ary_new();
    if (i < 0 || (size_t)i >= v->n_ruby_objects) return Qnil;
    for (k = 0; k < i; k++) w += v->ruby_objects[k].n_words; /* linear: a diagnostic, not a hot path */
    for (k = 0; k < v->ruby_objects[i].n_words && w + (size_t)k < v->n_ruby_words; k++)
        rb_ary_push(ary, PTMD_U64(v->ruby_words[w + (size_t)k]));
    return ary;
}

static VALUE heap_each_object(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    size_t i;
    for (i = 0; i < v->n_ruby_objects; i++) rb_yield(object_tuple(&v->ruby_objects[i]));
    return self;
}

/* Index of the object at a VALUE address, or nil (through an address-sorted permutation). */
static VALUE heap_object_index(VALUE self, VALUE address)
{
    const ptmd_view *v = ruby_view(self);
    const uint32_t *order = ptmd_rb_dump_object_order(dump_of(self));
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
static VALUE heap_owner(VALUE self, VALUE chunk_address)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_attribution *a = ptmd_rb_dump_attribution(dump_of(self));
    long ci = ptmd_view_find_chunk(v, NUM2ULL(chunk_address), 0);
    uint32_t o;
    if (ci < 0) return Qnil;
    o = a->owner[ci];
    return rb_ary_new_from_args(3, o && o != UINT32_MAX ? ULONG2NUM(o - 1) : Qnil,
                                PTMD_SYM(ptmd_owner_category_names[a->category[ci]]), PTMD_BOOL(a->direct[ci]));
}

static VALUE pair(uint64_t bytes, uint64_t chunks)
{
    return rb_ary_new_from_args(2, PTMD_U64(bytes), PTMD_U64(chunks));
}

/* Adds the n figures to the entry of `name`: the names are per class (or data type) identity, and
 * many share one name (every class object's class is its own metaclass, whose real class is Class). */
static void add_figures(VALUE h, VALUE name, const uint64_t *figures, int n)
{
    VALUE prev = rb_hash_lookup2(h, name, Qnil);
    int k;
    if (NIL_P(prev)) {
        prev = rb_ary_new_capa(n);
        for (k = 0; k < n; k++) rb_ary_push(prev, PTMD_U64(0));
        rb_hash_aset(h, name, prev);
    }
    for (k = 0; k < n; k++) rb_ary_store(prev, k, rb_funcall(RARRAY_AREF(prev, k), '+', 1, PTMD_U64(figures[k])));
}

/* Owned bytes by the owner's GC age (analysis/age.c). */
static void age_into(VALUE h, const ptmd_view *v, const ptmd_attribution *a)
{
    ptmd_age_totals t;
    ptmd_age_summary(v, a, &t);
    PTMD_SET(h, "old_bytes", PTMD_U64(t.old_bytes));
    PTMD_SET(h, "old_chunks", PTMD_U64(t.old_chunks));
    PTMD_SET(h, "young_bytes", PTMD_U64(t.young_bytes));
    PTMD_SET(h, "young_chunks", PTMD_U64(t.young_chunks));
    PTMD_SET(h, "old_objects", PTMD_U64(t.old_objects));
    PTMD_SET(h, "young_objects", PTMD_U64(t.young_objects));
    PTMD_SET(h, "garbage_bytes", PTMD_U64(t.garbage_bytes));
    PTMD_SET(h, "garbage_chunks", PTMD_U64(t.garbage_chunks));
    PTMD_SET(h, "garbage_objects", PTMD_U64(t.garbage_objects));
}

/* The owner summary: bytes of allocated chunks by owner category, builtin type, class and typed-data
 * name (analysis/attribution.c: ptmd_owner_summary). */
static VALUE heap_summary(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_attribution *a = ptmd_rb_dump_attribution(dump_of(self));
    VALUE names = names_array(v), h = rb_hash_new(), by_type = rb_hash_new(), by_class = rb_hash_new(),
          by_dtype = rb_hash_new(), by_cat = rb_hash_new();
    size_t i, nn = v->n_ruby_names ? v->n_ruby_names : 1;
    uint64_t *arrays = ALLOC_N(uint64_t, 5 * nn);
    const uint64_t *cb;
    ptmd_owner_totals t;
    t.class_bytes = arrays;
    t.class_chunks = arrays + nn;
    t.data_type_bytes = arrays + 2 * nn;
    t.data_type_chunks = arrays + 3 * nn;
    t.class_garbage_bytes = arrays + 4 * nn;
    ptmd_owner_summary(v, a, &t);
    for (i = 0; i < PTMD_RUBY_TYPES; i++)
        if (t.type_chunks[i])
            rb_hash_aset(by_type, PTMD_SYM(type_name((int)i)), pair(t.type_bytes[i], t.type_chunks[i]));
    for (i = 0; i < v->n_ruby_names; i++) {
        VALUE name = rb_ary_entry(names, (long)i);
        uint64_t cls[3] = { t.class_bytes[i], t.class_chunks[i], t.class_garbage_bytes[i] };
        uint64_t dt[2] = { t.data_type_bytes[i], t.data_type_chunks[i] };
        if (t.class_chunks[i]) add_figures(by_class, name, cls, 3);
        if (t.data_type_chunks[i]) add_figures(by_dtype, name, dt, 2);
    }
    xfree(arrays);
    for (i = 1; i < PTMD_OWN_COUNT; i++)
        PTMD_SET(by_cat, ptmd_owner_category_names[i], pair(t.category_bytes[i], t.category_chunks[i]));
    cb = t.category_bytes;
    PTMD_SET(h, "by_type", by_type);
    PTMD_SET(h, "by_class", by_class);
    PTMD_SET(h, "by_data_type", by_dtype);
    PTMD_SET(h, "by_category", by_cat);
    PTMD_SET(h, "ruby_page_bytes", PTMD_U64(t.ruby_page_bytes));
    PTMD_SET(h, "ruby_pages_in_malloc_bytes", PTMD_U64(cb[PTMD_OWN_RUBY_PAGE]));
    PTMD_SET(h, "owned_bytes",
             PTMD_U64(cb[PTMD_OWN_STRING] + cb[PTMD_OWN_ARRAY] + cb[PTMD_OWN_HASH] + cb[PTMD_OWN_OBJECT] +
                      cb[PTMD_OWN_DATA] + cb[PTMD_OWN_IMEMO] + cb[PTMD_OWN_OTHER_RUBY]));
    PTMD_SET(h, "unattributed_bytes", PTMD_U64(cb[PTMD_OWN_NATIVE]));
    PTMD_SET(h, "ambiguous_chunks", PTMD_U64(a->ambiguous));
    PTMD_SET(h, "direct_chunks", PTMD_U64(a->direct_count));
    PTMD_SET(h, "chunks_via_references", PTMD_U64(a->via_refs));
    age_into(h, v, a);
    return h;
}

/* ---- code owners (analysis/code_owners.c) ---- */

/* The RUBY_CODE_NAMES entries' names; kinds[i] gets each one's kind (kinds holds n_ruby_code_names). */
static VALUE code_names(const ptmd_view *v, uint32_t *kinds)
{
    VALUE ary = rb_ary_new_capa((long)v->n_ruby_code_names);
    size_t off = 0, i = 0;
    while (off + 16 <= v->ruby_code_names_len && i < v->n_ruby_code_names) {
        uint32_t len;
        memcpy(&len, v->ruby_code_names + off + 12, 4);
        if (kinds) memcpy(&kinds[i], v->ruby_code_names + off + 8, 4);
        rb_ary_push(ary, rb_utf8_str_new((const char *)v->ruby_code_names + off + 16, len));
        off += 16 + ((len + 7u) & ~7u);
        i++;
    }
    return ary;
}

static VALUE code_name(VALUE names, uint32_t i)
{
    return i == PTMD_NO_NAME ? Qnil : rb_ary_entry(names, (long)i);
}

/* nil without a RUBY_CODE section; else [{module name => [bytes, chunks]}, [[kind, module, method,
 * path, line, bytes], ...] for each method entry and iseq that owns any chunk, total bytes, total
 * chunks, {VM table name => [bytes, chunks]}, their bytes, their chunks]. */
static VALUE heap_code_summary(VALUE self)
{
    const ptmd_view *v = ruby_view(self);
    const ptmd_attribution *a = ptmd_rb_dump_attribution(dump_of(self));
    VALUE names, by_module = rb_hash_new(), records = rb_ary_new(), tables = rb_hash_new();
    size_t i;
    uint64_t *arrays;
    uint32_t *kinds;
    ptmd_code_totals t;
    if (!v->ruby_code) return Qnil;
    kinds = ALLOC_N(uint32_t, v->n_ruby_code_names + 1);
    names = code_names(v, kinds);
    arrays = ALLOC_N(uint64_t, 2 * v->n_ruby_code_names + v->n_ruby_code + 1);
    t.name_bytes = arrays;
    t.name_chunks = arrays + v->n_ruby_code_names;
    t.record_bytes = arrays + 2 * v->n_ruby_code_names;
    t.chunk_record = NULL;
    if (ptmd_code_owners(v, a, &t) != 0) {
        xfree(arrays);
        xfree(kinds);
        rb_raise(rb_eNoMemError, "out of memory while charging code to its modules");
    }
    for (i = 0; i < v->n_ruby_code_names; i++)
        if (t.name_chunks[i])
            rb_hash_aset(kinds[i] == PTMD_NAME_VM_TABLE ? tables : by_module, rb_ary_entry(names, (long)i),
                         pair(t.name_bytes[i], t.name_chunks[i]));
    xfree(kinds);
    for (i = 0; i < v->n_ruby_code; i++) {
        const ptmd_ruby_code *c = &v->ruby_code[i];
        if (!t.record_bytes[i] || c->kind == PTMD_CODE_VM_TABLE || c->kind == PTMD_CODE_MODULE) continue;
        rb_ary_push(records,
                    rb_ary_new_from_args(6, PTMD_SYM(PTMD_NAME_OF(ptmd_code_kind_names, c->kind)),
                                         code_name(names, c->module), code_name(names, c->method),
                                         code_name(names, c->path), UINT2NUM(c->line), PTMD_U64(t.record_bytes[i])));
    }
    xfree(arrays);
    return rb_ary_new_from_args(7, by_module, records, PTMD_U64(t.bytes), PTMD_U64(t.chunks), tables,
                                PTMD_U64(t.vm_bytes), PTMD_U64(t.vm_chunks));
}

VALUE ptmd_rb_code_charges(VALUE dump)
{
    const ptmd_view *v = ptmd_rb_dump_view(dump);
    const ptmd_attribution *a;
    ptmd_code_totals t;
    uint64_t *arrays;
    VALUE charges;
    if (!v->ruby_meta || !v->ruby_code) return Qnil;
    a = ptmd_rb_dump_attribution(dump);
    charges = rb_str_new(NULL, (long)(v->n_chunks * sizeof(uint32_t)));
    arrays = ALLOC_N(uint64_t, 2 * v->n_ruby_code_names + v->n_ruby_code + 1);
    t.name_bytes = arrays;
    t.name_chunks = arrays + v->n_ruby_code_names;
    t.record_bytes = arrays + 2 * v->n_ruby_code_names;
    t.chunk_record = (uint32_t *)RSTRING_PTR(charges);
    if (ptmd_code_owners(v, a, &t) != 0) {
        xfree(arrays);
        rb_raise(rb_eNoMemError, "out of memory while charging code to its modules");
    }
    xfree(arrays);
    return charges;
}

static VALUE heap_code_charges(VALUE self)
{
    ruby_view(self);
    return ptmd_rb_code_charges(dump_of(self));
}

static VALUE name_index(uint32_t i)
{
    return i == PTMD_NO_NAME ? Qnil : UINT2NUM(i);
}

/* [kind, module, method, path, line] of the code object at an address (names as indexes into
 * _code_names), or nil. */
static VALUE heap_code_at(VALUE self, VALUE address)
{
    const ptmd_view *v = ruby_view(self);
    long r = ptmd_code_record(v, NUM2ULL(address));
    const ptmd_ruby_code *c;
    if (r < 0) return Qnil;
    c = &v->ruby_code[r];
    return rb_ary_new_from_args(5, PTMD_SYM(PTMD_NAME_OF(ptmd_code_kind_names, c->kind)), name_index(c->module),
                                name_index(c->method), name_index(c->path), UINT2NUM(c->line));
}

/* _code_charge(charges, chunk_address): the address of the code record the chunk at chunk_address is
 * charged to (charges: _code_charges), or nil. */
static VALUE heap_code_charge(VALUE self, VALUE charges, VALUE chunk_address)
{
    const ptmd_view *v = ruby_view(self);
    long ci = ptmd_view_find_chunk(v, NUM2ULL(chunk_address), 0);
    uint32_t r;
    StringValue(charges);
    if ((size_t)RSTRING_LEN(charges) != v->n_chunks * sizeof(uint32_t)) rb_raise(rb_eArgError, "one u32 per chunk");
    if (ci < 0) return Qnil;
    memcpy(&r, RSTRING_PTR(charges) + ci * sizeof(uint32_t), sizeof(r));
    return r < v->n_ruby_code ? PTMD_U64(v->ruby_code[r].address) : Qnil;
}

static VALUE heap_code_names(VALUE self)
{
    return code_names(ruby_view(self), NULL);
}

void ptmd_ruby_heap_class_init(void)
{
    VALUE cRubyHeap = rb_define_class_under(ptmd_mPtmallocDump, "RubyHeap", rb_cObject);
    id_dump = rb_intern("@dump");
    rb_define_private_method(cRubyHeap, "_meta", heap_meta, 0);
    rb_define_private_method(cRubyHeap, "_names", heap_names, 0);
    rb_define_private_method(cRubyHeap, "_pages", heap_pages, 0);
    rb_define_private_method(cRubyHeap, "_object", heap_object, 1);
    rb_define_private_method(cRubyHeap, "_each_object", heap_each_object, 0);
    rb_define_private_method(cRubyHeap, "_object_words", heap_object_words, 1);
    rb_define_private_method(cRubyHeap, "_object_index", heap_object_index, 1);
    rb_define_private_method(cRubyHeap, "_owner", heap_owner, 1);
    rb_define_private_method(cRubyHeap, "_summary", heap_summary, 0);
    rb_define_private_method(cRubyHeap, "_code_summary", heap_code_summary, 0);
    rb_define_private_method(cRubyHeap, "_code_at", heap_code_at, 1);
    rb_define_private_method(cRubyHeap, "_code_names", heap_code_names, 0);
    rb_define_private_method(cRubyHeap, "_code_charges", heap_code_charges, 0);
    rb_define_private_method(cRubyHeap, "_code_charge", heap_code_charge, 2);
}
