/* The Ruby object graph (graph: true), after the Ruby pass and on its objects: what the GC marks from
 * each object (rb_objspace_reachable_objects_from) and from the roots, by category
 * (rb_objspace_reachable_objects_from_root), and the names Ruby keeps for the references: instance and
 * class variables (rb_ivar_foreach), constants and global variables (their tables, read as memory),
 * Array indices and Hash keys. Marking calls no allocator, nor does anything else here: every record
 * goes into mmap-backed buffers, every name is one Ruby already holds. It runs with the GVL held, in
 * the process or in a fork snapshot's child on its copy. */
#include <ruby.h>
#include "capture/ruby_graph.h"
#include "capture/ruby_graph_tables.h"
#include "format/index.h"
#include "format/ptmd.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void reachable_fn(VALUE obj, void (*func)(VALUE, void *), void *data);
typedef void reachable_root_fn(void (*func)(const char *category, VALUE, void *), void *data);
static reachable_fn *reachable_from;
static reachable_root_fn *reachable_from_root;

#define NAMED_LIMIT 4096  /* references named per object: an Array's first indices, a Hash's first keys */
#define KEY_BYTES 64      /* of a String Hash key */
#define MAX_CATEGORIES 64 /* distinct root categories (Ruby 3.4 has about 15) */
#define NONE 0xffffffffu

typedef struct {
    ptmd_ruby_data *rd;
    ptmd_buf slot_base;    /* per page (RUBY_PAGES order): its first entry in slots */
    ptmd_buf slots;        /* uint32 per slot of every page: object index + 1, 0 for none */
    ptmd_name_table names; /* the names the graph adds after the classes', resolved at the end */
    const char *categories[MAX_CATEGORIES];
    size_t n_categories;
    uint64_t edge_start, cursor; /* the current object's first edge, and where the last name was found */
    uint64_t named_from;         /* the current object's first entry in edge_names */
    uint32_t named;              /* names given the current object */
    uint32_t last_dst;
    uint64_t dropped;
    int oom;
} graph_ctx;

void ptmd_ruby_graph_init(void)
{
    reachable_from = (reachable_fn *)dlsym(RTLD_DEFAULT, "rb_objspace_reachable_objects_from");
    reachable_from_root = (reachable_root_fn *)dlsym(RTLD_DEFAULT, "rb_objspace_reachable_objects_from_root");
    ptmd_graph_tables_init();
}

const char *ptmd_ruby_graph_problem(void)
{
    if (!reachable_from) return "this Ruby does not export rb_objspace_reachable_objects_from";
    if (!reachable_from_root) return "this Ruby does not export rb_objspace_reachable_objects_from_root";
    return NULL;
}

/* The slot-map entry of the slot at address a (the object index + 1, 0 for none), NULL when a starts
 * no slot of a recorded page. */
static uint32_t *slot_entry(const graph_ctx *g, uint64_t a)
{
    const ptmd_ruby_data *rd = g->rd;
    size_t lo = 0, hi = PTMD_BUF_COUNT(&rd->pages, ptmd_ruby_page);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_ruby_page *p = PTMD_BUF_AT(&rd->pages, ptmd_ruby_page, mid);
        if (a < p->start) hi = mid;
        else if (a >= p->end) lo = mid + 1;
        else if ((a - p->start) % p->stride) return NULL;
        else
            return PTMD_BUF_AT(&g->slots, uint32_t,
                               *PTMD_BUF_AT(&g->slot_base, uint64_t, mid) + (a - p->start) / p->stride);
    }
    return NULL;
}

/* The object index of v, NONE when v is no object the pass recorded. */
static uint32_t index_of(const graph_ctx *g, VALUE v)
{
    const uint32_t *e = RB_SPECIAL_CONST_P(v) ? NULL : slot_entry(g, (uint64_t)v);
    return e ? *e - 1 : NONE;
}

static int build_slot_map(graph_ctx *g)
{
    const ptmd_ruby_data *rd = g->rd;
    size_t i, np = PTMD_BUF_COUNT(&rd->pages, ptmd_ruby_page), no = PTMD_BUF_COUNT(&rd->objects, ptmd_ruby_object);
    uint64_t total = 0;
    for (i = 0; i < np; i++) {
        const ptmd_ruby_page *p = PTMD_BUF_AT(&rd->pages, ptmd_ruby_page, i);
        if (ptmd_buf_append(&g->slot_base, &total, sizeof(total)) != 0) return -1;
        total += (p->end - p->start) / p->stride;
    }
    if (total && !ptmd_buf_push(&g->slots, total * sizeof(uint32_t))) return -1;
    for (i = 0; i < no; i++) {
        uint32_t *e = slot_entry(g, PTMD_BUF_AT(&rd->objects, ptmd_ruby_object, i)->address);
        if (e) *e = (uint32_t)i + 1;
    }
    return 0;
}

/* The RUBY_NAMES index the name (key, kind) will have; the names are written at the end. */
static uint32_t name_index(graph_ctx *g, uint64_t key, uint32_t kind)
{
    uint32_t i = ptmd_name_table_index(&g->names, key, kind);
    if (g->names.oom) g->oom = 1;
    return i;
}

static void on_edge(VALUE v, void *data)
{
    graph_ctx *g = data;
    uint32_t i = index_of(g, v);
    if (i == NONE) {
        g->dropped++;
        return;
    }
    if (i == g->last_dst) return; /* marked twice in a row: one reference */
    g->last_dst = i;
    if (ptmd_buf_append(&g->rd->graph_edges, &i, sizeof(i)) != 0) g->oom = 1;
}

/* Names the current object's reference to v: the first of its edges to v from where the last name was
 * found (the names come in marking order for the common types), else from its first edge. */
static void name_edge(graph_ctx *g, VALUE v, uint32_t kind, uint32_t detail)
{
    const uint32_t *edges = (const uint32_t *)(const void *)g->rd->graph_edges.base;
    uint64_t end = g->rd->graph_edges.len / sizeof(uint32_t), k;
    uint32_t dst;
    ptmd_ruby_edge_name n;
    if (g->named >= NAMED_LIMIT || (dst = index_of(g, v)) == NONE) return;
    for (k = g->cursor; k < end && edges[k] != dst; k++) {}
    if (k == end)
        for (k = g->edge_start; k < g->cursor && edges[k] != dst; k++) {}
    if (k == end || edges[k] != dst) return;
    g->cursor = k + 1 < end ? k + 1 : g->edge_start;
    n.edge = (uint32_t)k;
    n.kind = kind;
    n.detail = detail;
    n.reserved = 0;
    if (ptmd_buf_append(&g->rd->graph_edge_names, &n, sizeof(n)) != 0) g->oom = 1;
    g->named++;
}

static int on_ivar(ID id, VALUE v, st_data_t data)
{
    graph_ctx *g = (graph_ctx *)data;
    if (!RB_SPECIAL_CONST_P(v)) name_edge(g, v, PTMD_EDGE_IVAR, name_index(g, (uint64_t)id, PTMD_NAME_SYMBOL));
    return g->named >= NAMED_LIMIT ? ST_STOP : ST_CONTINUE;
}

static int on_pair(VALUE key, VALUE v, VALUE data)
{
    graph_ctx *g = (graph_ctx *)data;
    if (RB_SPECIAL_CONST_P(v)) return ST_CONTINUE;
    if (RB_STATIC_SYM_P(key)) name_edge(g, v, PTMD_EDGE_KEY_SYMBOL, name_index(g, RB_SYM2ID(key), PTMD_NAME_SYMBOL));
    else if (RB_FIXNUM_P(key) && FIX2LONG(key) >= INT32_MIN && FIX2LONG(key) <= INT32_MAX)
        name_edge(g, v, PTMD_EDGE_KEY_INTEGER, (uint32_t)(int32_t)FIX2LONG(key));
    else if (!RB_SPECIAL_CONST_P(key) && BUILTIN_TYPE(key) == T_STRING && index_of(g, key) != NONE)
        name_edge(g, v, PTMD_EDGE_KEY_STRING, name_index(g, (uint64_t)key, PTMD_NAME_STRING));
    return g->named >= NAMED_LIMIT ? ST_STOP : ST_CONTINUE;
}

static int on_thread_local(st_data_t id, st_data_t v, st_data_t data)
{
    graph_ctx *g = (graph_ctx *)data;
    if (!RB_SPECIAL_CONST_P((VALUE)v))
        name_edge(g, (VALUE)v, PTMD_EDGE_THREAD_LOCAL, name_index(g, (uint64_t)id, PTMD_NAME_SYMBOL));
    return g->named >= NAMED_LIMIT ? ST_STOP : ST_CONTINUE;
}

static void on_constant(uint64_t id, VALUE v, void *data)
{
    graph_ctx *g = data;
    if (!RB_SPECIAL_CONST_P(v)) name_edge(g, v, PTMD_EDGE_CONSTANT, name_index(g, id, PTMD_NAME_SYMBOL));
}

/* An Array's elements by index, read from its slot or buffer (RARRAY_CONST_PTR would move a
 * transient-heap buffer into malloc memory on Ruby 2.7 to 3.2). */
static void name_elements(graph_ctx *g, VALUE ary)
{
    const VALUE *e = FL_TEST_RAW(ary, RARRAY_EMBED_FLAG) ? RARRAY(ary)->as.ary : RARRAY(ary)->as.heap.ptr;
    long n = RARRAY_LEN(ary), i;
    for (i = 0; e && i < n && g->named < NAMED_LIMIT; i++)
        if (!RB_SPECIAL_CONST_P(e[i])) name_edge(g, e[i], PTMD_EDGE_INDEX, (uint32_t)i);
}

static void name_references(graph_ctx *g, VALUE v, int type)
{
    g->cursor = g->edge_start;
    g->named = 0;
    g->named_from = g->rd->graph_edge_names.len / sizeof(ptmd_ruby_edge_name);
    switch (type) {
    case T_OBJECT: rb_ivar_foreach(v, on_ivar, (st_data_t)g); break;
    case T_CLASS:
    case T_MODULE:
        ptmd_graph_constants(v, on_constant, g);
        g->cursor = g->edge_start;
        rb_ivar_foreach(v, on_ivar, (st_data_t)g);
        /* a path through its constants or variables names it */
        if (g->named) name_index(g, (uint64_t)v, PTMD_NAME_MODULE);
        break;
    case T_ARRAY: name_elements(g, v); break;
    case T_HASH: rb_hash_foreach(v, on_pair, (VALUE)g); break;
    default:
        if (type == T_DATA) ptmd_graph_thread_locals(v, on_thread_local, g);
        g->cursor = g->edge_start;
        if (FL_TEST_RAW(v, FL_EXIVAR)) rb_ivar_foreach(v, on_ivar, (st_data_t)g);
    }
}

static int by_edge(const void *a, const void *b, void *ctx)
{
    uint32_t x = ((const ptmd_ruby_edge_name *)a)->edge, y = ((const ptmd_ruby_edge_name *)b)->edge;
    PTMD_UNUSED(ctx);
    return x < y ? -1 : x > y;
}

/* The current object's names in edge order, one per edge (a value held twice keeps its first name). */
static void order_names(graph_ctx *g)
{
    ptmd_buf *b = &g->rd->graph_edge_names;
    size_t n = b->len / sizeof(ptmd_ruby_edge_name), i, out;
    ptmd_ruby_edge_name *names = PTMD_BUF_AT(b, ptmd_ruby_edge_name, g->named_from);
    size_t m = n - g->named_from;
    if (m < 2) return;
    ptmd_sort(names, m, sizeof(*names), by_edge, NULL);
    for (i = 1, out = 1; i < m; i++)
        if (names[i].edge != names[out - 1].edge) names[out++] = names[i];
    b->len = (g->named_from + out) * sizeof(ptmd_ruby_edge_name);
}

static void on_root(const char *category, VALUE v, void *data)
{
    graph_ctx *g = data;
    ptmd_ruby_root r;
    size_t c;
    uint32_t i = index_of(g, v);
    if (i == NONE) {
        g->dropped++;
        return;
    }
    if (!category) category = "unknown";
    for (c = 0; c < g->n_categories && g->categories[c] != category; c++) {}
    if (c == g->n_categories) {
        if (c == MAX_CATEGORIES) c--; /* the last one stands for the rest */
        else g->categories[g->n_categories++] = category;
    }
    r.object = i;
    r.category = name_index(g, c, PTMD_NAME_ROOT_CATEGORY);
    r.name = NONE;
    r.flags = strcmp(category, "machine_context") == 0 ? PTMD_RRF_CONSERVATIVE : 0;
    if (ptmd_buf_append(&g->rd->graph_roots, &r, sizeof(r)) != 0) g->oom = 1;
}

static void on_global(uint64_t id, VALUE v, void *data)
{
    graph_ctx *g = data;
    uint32_t i = index_of(g, v), name, category;
    size_t k, n = PTMD_BUF_COUNT(&g->rd->graph_roots, ptmd_ruby_root);
    if (i == NONE) return;
    for (k = 0; k < g->n_categories && strcmp(g->categories[k], "global_tbl") != 0; k++) {}
    if (k == g->n_categories) return;
    category = name_index(g, k, PTMD_NAME_ROOT_CATEGORY);
    name = name_index(g, id, PTMD_NAME_SYMBOL);
    for (k = 0; k < n; k++) {
        ptmd_ruby_root *r = PTMD_BUF_AT(&g->rd->graph_roots, ptmd_ruby_root, k);
        if (r->object == i && r->name == NONE && r->category == category) {
            r->name = name;
            return;
        }
    }
}

/* The names the graph refers to, after the class names: read from what Ruby holds, nothing made. */
static void resolve_names(graph_ctx *g)
{
    size_t i, n = PTMD_BUF_COUNT(&g->names.order, ptmd_name_slot);
    for (i = 0; i < n && !g->oom; i++) {
        const ptmd_name_slot *s = PTMD_BUF_AT(&g->names.order, ptmd_name_slot, i);
        const char *name = "";
        size_t len = 0;
        if (s->kind == PTMD_NAME_SYMBOL) {
            VALUE str = rb_id2str((ID)s->key);
            if (str && RB_TYPE_P(str, T_STRING)) {
                name = RSTRING_PTR(str);
                len = (size_t)RSTRING_LEN(str);
            }
        } else if (s->kind == PTMD_NAME_STRING) {
            VALUE str = (VALUE)s->key;
            name = RSTRING_PTR(str);
            len = (size_t)RSTRING_LEN(str);
            if (len > KEY_BYTES) len = KEY_BYTES;
        } else if (s->kind == PTMD_NAME_MODULE) {
            VALUE str = rb_mod_name((VALUE)s->key); /* the name Ruby keeps; nil for an anonymous one */
            if (RB_TYPE_P(str, T_STRING)) {
                name = RSTRING_PTR(str);
                len = (size_t)RSTRING_LEN(str);
            }
        } else if (s->key < g->n_categories) {
            name = g->categories[s->key];
            len = strlen(name);
        }
        if (ptmd_ruby_add_name(g->rd, s->key, s->kind, name, len) != 0) g->oom = 1;
    }
}

static void release(graph_ctx *g)
{
    ptmd_buf_release(&g->slot_base);
    ptmd_buf_release(&g->slots);
    ptmd_name_table_release(&g->names);
}

static void drop_graph(ptmd_ruby_data *rd)
{
    ptmd_buf_release(&rd->graph_counts);
    ptmd_buf_release(&rd->graph_edges);
    ptmd_buf_release(&rd->graph_roots);
    ptmd_buf_release(&rd->graph_edge_names);
    rd->graph_present = 0;
}

/* A Thread's or a Fiber's references other than its variables are on its stacks (frames' locals and
 * temporaries, and on machine stacks words that look like references): named so, so that a path to
 * an object prefers what names it (a constant, a variable) to a frame that holds it for a moment. */
static void name_stack_edges(graph_ctx *g)
{
    ptmd_buf *b = &g->rd->graph_edge_names;
    uint64_t end = g->rd->graph_edges.len / sizeof(uint32_t), k;
    size_t named = b->len / sizeof(ptmd_ruby_edge_name) - g->named_from, i = 0;
    for (k = g->edge_start; k < end && !g->oom; k++) {
        ptmd_ruby_edge_name n;
        while (i < named && PTMD_BUF_AT(b, ptmd_ruby_edge_name, g->named_from + i)->edge < k) i++;
        if (i < named && PTMD_BUF_AT(b, ptmd_ruby_edge_name, g->named_from + i)->edge == k) continue;
        n.edge = (uint32_t)k;
        n.kind = PTMD_EDGE_STACK;
        n.detail = 0;
        n.reserved = 0;
        if (ptmd_buf_append(b, &n, sizeof(n)) != 0) g->oom = 1;
    }
}

static void each_object(graph_ctx *g)
{
    ptmd_ruby_data *rd = g->rd;
    size_t i, n = PTMD_BUF_COUNT(&rd->objects, ptmd_ruby_object);
    for (i = 0; i < n && !g->oom; i++) {
        const ptmd_ruby_object *o = PTMD_BUF_AT(&rd->objects, ptmd_ruby_object, i);
        VALUE v = (VALUE)o->address;
        uint32_t count;
        g->edge_start = rd->graph_edges.len / sizeof(uint32_t);
        g->last_dst = NONE;
        if (!(o->flags & PTMD_OF_GARBAGE)) reachable_from(v, on_edge, g);
        count = (uint32_t)(rd->graph_edges.len / sizeof(uint32_t) - g->edge_start);
        if (ptmd_buf_append(&rd->graph_counts, &count, sizeof(count)) != 0) g->oom = 1;
        if (count && !g->oom) {
            name_references(g, v, o->type);
            order_names(g);
            if (o->type == T_DATA && ptmd_graph_stack_holder(v)) {
                name_stack_edges(g);
                order_names(g);
            }
        }
    }
}

int ptmd_ruby_graph(ptmd_ruby_data *rd, char *why, size_t cap)
{
    graph_ctx g;
    const char *problem = ptmd_ruby_graph_problem();
    uint64_t t0 = ptmd_now_ns();
    memset(&g, 0, sizeof(g));
    g.rd = rd;
    g.names.first = (uint32_t)rd->n_names;
    memset(&rd->graph, 0, sizeof(rd->graph));
    if (problem) {
        snprintf(why, cap, "%s", problem);
        return -1;
    }
    if (build_slot_map(&g) != 0) g.oom = 1;
    if (!g.oom) each_object(&g);
    if (!g.oom) reachable_from_root(on_root, &g);
    if (!g.oom && ptmd_graph_globals(on_global, &g) == 0) rd->graph.flags |= PTMD_GRF_GLOBAL_NAMES;
    if (ptmd_graph_constants_known()) rd->graph.flags |= PTMD_GRF_CONSTANT_NAMES;
    if (ptmd_graph_thread_locals_known()) rd->graph.flags |= PTMD_GRF_THREAD_LOCAL_NAMES;
    if (!g.oom) resolve_names(&g);
    release(&g);
    if (g.oom) {
        drop_graph(rd);
        snprintf(why, cap, "mmap failed while the object graph was recorded");
        return -1;
    }
    rd->graph.dropped_edges = g.dropped;
    rd->graph.named_limit = NAMED_LIMIT;
    rd->graph.graph_ns = ptmd_now_ns() - t0;
    rd->graph_present = 1;
    return 0;
}
