/* PtmallocDump::Dump's retainer figures: what each Ruby object retains, the holders worth naming and
 * the path from a root to an object (analysis/retention.c), as Arrays the Ruby side names. */
#include "bindings/bindings.h"
#include "format/index.h"

#include <string.h>

static const ptmd_retention *retention_of(VALUE self)
{
    const ptmd_retention *r = ptmd_rb_dump_retention(self);
    if (!r) rb_raise(rb_path2class("PtmallocDump::NoGraphError"), "this dump has no object graph");
    return r;
}

static uint32_t object_index(const ptmd_retention *r, VALUE index)
{
    unsigned long i = NUM2ULONG(index);
    if (i >= r->n_objects) rb_raise(rb_eIndexError, "no Ruby object %lu", i);
    return (uint32_t)i;
}

static VALUE dump_graph_p(VALUE self)
{
    return PTMD_BOOL(ptmd_rb_dump_view(self)->ruby_graph != NULL);
}

/* _retained(index) -> [bytes, slot_bytes, objects], nil when no root reaches the object */
static VALUE dump_retained(VALUE self, VALUE index)
{
    const ptmd_retention *r = retention_of(self);
    uint32_t i = object_index(r, index);
    const uint64_t *x = &r->retained[(size_t)i * PTMD_RET_COLUMNS];
    if (r->dom.idom[i] == PTMD_DOM_NONE) return Qnil;
    return rb_ary_new_from_args(3, PTMD_U64(x[PTMD_RET_BYTES]), PTMD_U64(x[PTMD_RET_SLOT_BYTES]),
                                PTMD_U64(x[PTMD_RET_OBJECTS]));
}

/* _holders(limit) -> [index, ...], largest retained bytes first */
static VALUE dump_holders(VALUE self, VALUE limit)
{
    const ptmd_retention *r = retention_of(self);
    long n = NUM2LONG(limit), i, found;
    uint32_t *out;
    VALUE ary;
    if (n <= 0) return rb_ary_new();
    if (n > 4096) n = 4096;
    out = ALLOC_N(uint32_t, (size_t)n);
    found = (long)ptmd_retention_holders(r, (size_t)n, out);
    ary = rb_ary_new_capa(found);
    for (i = 0; i < found; i++) rb_ary_push(ary, UINT2NUM(out[i]));
    xfree(out);
    return ary;
}

static VALUE edge_step(const ptmd_view *v, uint32_t object, uint64_t edge)
{
    const ptmd_ruby_edge_name *e = ptmd_retention_edge_name(v, edge);
    VALUE kind = Qnil, detail = Qnil;
    if (e) {
        kind = PTMD_SYM(PTMD_NAME_OF(ptmd_edge_kind_names, e->kind));
        detail = e->kind == PTMD_EDGE_KEY_INTEGER ? INT2NUM((int32_t)e->detail) : UINT2NUM(e->detail);
    }
    return rb_ary_new_from_args(3, UINT2NUM(object), kind, detail);
}

/* _path(index) -> [[category name index, global name index or nil], [object, kind, detail], ...]: a
 * shortest path from a root, root first; each step the object reached and the name of the reference
 * to it (kind and detail nil where Ruby keeps none). nil when no root reaches the object. */
static VALUE dump_path(VALUE self, VALUE index)
{
    const ptmd_retention *r = retention_of(self);
    const ptmd_view *v = ptmd_rb_dump_view(self);
    uint32_t i = object_index(r, index), u;
    VALUE steps = rb_ary_new();
    size_t guard = 0;
    if (r->parent[i] == PTMD_RET_NONE) return Qnil;
    for (u = i; r->parent[u] != r->n_objects && guard++ <= r->n_objects; u = r->parent[u])
        rb_ary_push(steps, edge_step(v, u, r->via[u]));
    {
        const ptmd_ruby_root *root = &v->ruby_roots[r->via[u]];
        rb_ary_push(steps, rb_ary_new_from_args(3, UINT2NUM(u), Qnil, Qnil));
        rb_ary_push(steps, rb_ary_new_from_args(2, UINT2NUM(root->category),
                                                root->name == PTMD_NO_NAME ? Qnil : UINT2NUM(root->name)));
    }
    return rb_ary_reverse(steps);
}

/* _module_names -> { address => name }: the modules the graph names by their own name */
static VALUE dump_module_names(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE h = rb_hash_new();
    size_t off = 0;
    ptmd_view_name n;
    while (ptmd_view_next_name(v->ruby_names, v->ruby_names_len, &off, &n))
        if (n.kind == PTMD_NAME_MODULE && n.len) rb_hash_aset(h, PTMD_U64(n.key), rb_utf8_str_new(n.name, n.len));
    return h;
}

/* _graph_meta -> { graph_ns:, dropped_edges:, named_limit:, flags:, edges:, roots:, edge_names: } */
static VALUE dump_graph_meta(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE h;
    if (!v->ruby_graph) return Qnil;
    h = rb_hash_new();
    PTMD_SET(h, "graph_ns", PTMD_U64(v->ruby_graph->graph_ns));
    PTMD_SET(h, "dropped_edges", PTMD_U64(v->ruby_graph->dropped_edges));
    PTMD_SET(h, "named_limit", PTMD_U64(v->ruby_graph->named_limit));
    PTMD_SET(h, "flags", UINT2NUM(v->ruby_graph->flags));
    PTMD_SET(h, "edges", PTMD_U64(v->n_ruby_edges));
    PTMD_SET(h, "roots", PTMD_U64(v->n_ruby_roots));
    PTMD_SET(h, "edge_names", PTMD_U64(v->n_ruby_edge_names));
    return h;
}

/* _references(index) -> [[object, kind, detail], ...]: what the object references, as recorded */
static VALUE dump_references(VALUE self, VALUE index)
{
    const ptmd_retention *r = retention_of(self);
    const ptmd_view *v = ptmd_rb_dump_view(self);
    uint32_t i = object_index(r, index);
    uint64_t k;
    VALUE ary = rb_ary_new();
    for (k = r->edge_start[i]; k < r->edge_start[i + 1]; k++) rb_ary_push(ary, edge_step(v, v->ruby_edges[k], k));
    return ary;
}

/* _graph_roots -> [[object, category name index, global name index or nil], ...] */
static VALUE dump_graph_roots(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE ary = rb_ary_new();
    size_t i;
    for (i = 0; i < v->n_ruby_roots; i++) {
        const ptmd_ruby_root *root = &v->ruby_roots[i];
        rb_ary_push(ary, rb_ary_new_from_args(3, UINT2NUM(root->object), UINT2NUM(root->category),
                                              root->name == PTMD_NO_NAME ? Qnil : UINT2NUM(root->name)));
    }
    return ary;
}

static int by_bytes(const void *a, const void *b, void *ctx)
{
    const uint64_t *retained = ctx;
    uint64_t x = retained[(size_t) * (const uint32_t *)a * PTMD_RET_COLUMNS];
    uint64_t y = retained[(size_t) * (const uint32_t *)b * PTMD_RET_COLUMNS];
    return x > y ? -1 : x < y;
}

/* _dominator_tree(min_bytes, cap) -> [[index, parent index or nil, retained bytes, objects], ...]: the
 * objects that retain at least min_bytes (what dominates one retains as much, so they are a tree below
 * the roots), the cap largest of them, largest first (a parent before its children). */
static VALUE dump_dominator_tree(VALUE self, VALUE min_bytes, VALUE cap)
{
    const ptmd_retention *r = retention_of(self);
    uint64_t min = NUM2ULL(min_bytes);
    long limit = NUM2LONG(cap);
    uint32_t i, *picked = ALLOC_N(uint32_t, (size_t)r->n_objects + 1);
    size_t n = 0, k;
    VALUE ary = rb_ary_new();
    for (i = 0; i < r->n_objects; i++)
        if (r->dom.idom[i] != PTMD_DOM_NONE && r->retained[(size_t)i * PTMD_RET_COLUMNS] >= min) picked[n++] = i;
    ptmd_sort(picked, n, sizeof(uint32_t), by_bytes, r->retained);
    for (k = 0; k < n && (long)k < limit; k++) {
        const uint64_t *x = &r->retained[(size_t)picked[k] * PTMD_RET_COLUMNS];
        uint32_t p = r->dom.idom[picked[k]];
        rb_ary_push(ary, rb_ary_new_from_args(4, UINT2NUM(picked[k]), p < r->n_objects ? UINT2NUM(p) : Qnil,
                                              PTMD_U64(x[PTMD_RET_BYTES]), PTMD_U64(x[PTMD_RET_OBJECTS])));
    }
    xfree(picked);
    return ary;
}

void ptmd_retention_class_init(void)
{
    VALUE cDump = rb_const_get(ptmd_mPtmallocDump, rb_intern("Dump"));
    rb_define_private_method(cDump, "_graph?", dump_graph_p, 0);
    rb_define_private_method(cDump, "_graph_meta", dump_graph_meta, 0);
    rb_define_private_method(cDump, "_retained", dump_retained, 1);
    rb_define_private_method(cDump, "_holders", dump_holders, 1);
    rb_define_private_method(cDump, "_path", dump_path, 1);
    rb_define_private_method(cDump, "_module_names", dump_module_names, 0);
    rb_define_private_method(cDump, "_references", dump_references, 1);
    rb_define_private_method(cDump, "_graph_roots", dump_graph_roots, 0);
    rb_define_private_method(cDump, "_dominator_tree", dump_dominator_tree, 2);
}
