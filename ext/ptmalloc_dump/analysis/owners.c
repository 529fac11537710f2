/* Ruby, anchored or leaked: breadth first over the pointer graph, first from the chunks Ruby objects
 * own, then from the chunks roots point at, then through pointers into chunks past their start
 * (interior) from roots and from what was reached; what none reaches is leaked, or unknown in a dump
 * without Ruby objects. */
#include "analysis/owners.h"
#include "format/glibc.h"
#include "format/reader.h"

#include <stdlib.h>
#include <string.h>

const char *const ptmd_owner_kind_names[PTMD_OK_COUNT] = { PTMD_OWNER_KINDS(PTMD_ENUM_NAME) };

int ptmd_owners_available(const ptmd_view *v)
{
    return v->roots != NULL;
}

/* ruby_value_type values (include/ruby/internal/value_type.h), as attribution.c uses them */
#define RT_OBJECT 0x01
#define RT_STRING 0x05
#define RT_ARRAY 0x07

/* One kind of edge as adjacency lists by source chunk. */
typedef struct {
    uint32_t *offs, *targets;
} graph;

static int build_graph(const ptmd_view *v, const ptmd_ref *refs, size_t n_refs, graph *g)
{
    size_t i, n = v->n_chunks;
    uint32_t *fill;
    g->offs = calloc(n + 1, sizeof(uint32_t));
    g->targets = malloc((n_refs ? n_refs : 1) * sizeof(uint32_t));
    fill = calloc(n ? n : 1, sizeof(uint32_t));
    if (!g->offs || !g->targets || !fill) {
        free(fill);
        return -1;
    }
    for (i = 0; i < n_refs; i++) g->offs[refs[i].from + 1]++;
    for (i = 0; i < n; i++) g->offs[i + 1] += g->offs[i];
    for (i = 0; i < n_refs; i++) g->targets[g->offs[refs[i].from] + fill[refs[i].from]++] = refs[i].to;
    free(fill);
    return 0;
}

/* Which edges out of a chunk count: a string's buffer holds bytes, an array's or object's buffer
 * VALUEs, so a word there that looks like a chunk's address is stale data (as attribution.c rules);
 * an Integer in an array's or object's buffer is a live Integer. An object page that is a malloc chunk
 * (Ruby 2.7 and 3.0) holds slots: what its live objects point at, the Ruby pass recorded as their slot
 * words, and the rest of its words are free slots' and dead objects' stale data. */
enum { EDGE_ADDR = 1, EDGE_INT = 2 };
static int edges_out(const ptmd_view *v, const ptmd_attribution *a, size_t ci)
{
    uint32_t o = a->owner[ci];
    int t;
    if (o == UINT32_MAX) return 0;
    if (!o || !a->direct[ci]) return EDGE_ADDR | EDGE_INT;
    t = v->ruby_objects[o - 1].type;
    if (t == RT_STRING) return 0;
    if (t == RT_ARRAY || t == RT_OBJECT) return EDGE_INT;
    return EDGE_ADDR | EDGE_INT;
}

static void visit(const ptmd_view *v, const graph *g, uint32_t from, ptmd_owners *o, uint32_t *queue, size_t *qt,
                  uint8_t kind)
{
    uint32_t e;
    for (e = g->offs[from]; e < g->offs[from + 1]; e++) {
        uint32_t to = g->targets[e];
        if (o->kind[to] != PTMD_OK_NONE || !ptmd_rec_is_allocated(&v->chunks[to])) continue;
        o->kind[to] = kind;
        o->anchor[to] = o->anchor[from];
        queue[(*qt)++] = to;
    }
}

/* Marks everything reachable from queue[0..qt) that is still unmarked (kind NONE on an allocated
 * chunk) as `kind`, carrying the anchor along. */
static void spread(const ptmd_view *v, const ptmd_attribution *a, const graph *addr, const graph *ints, ptmd_owners *o,
                   uint32_t *queue, size_t qt, uint8_t kind)
{
    size_t qh = 0;
    while (qh < qt) {
        uint32_t from = queue[qh++];
        int edges = edges_out(v, a, from);
        if (edges & EDGE_ADDR) visit(v, addr, from, o, queue, &qt, kind);
        if (edges & EDGE_INT) visit(v, ints, from, o, queue, &qt, kind);
    }
}

int ptmd_owners_classify(const ptmd_view *v, const ptmd_attribution *a, ptmd_owners *o)
{
    size_t i, n = v->n_chunks, qt = 0;
    uint32_t *queue = NULL;
    graph g = { NULL, NULL }, gi = { NULL, NULL }, gn = { NULL, NULL };

    memset(o->kind, PTMD_OK_NONE, n);
    memset(o->direct, 0, n);
    for (i = 0; i < n; i++) o->anchor[i] = PTMD_NO_ANCHOR;
    if (build_graph(v, v->refs, v->n_refs, &g) != 0 || build_graph(v, v->int_refs, v->n_int_refs, &gi) != 0) goto oom;
    queue = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!queue) goto oom;

    /* Ruby: what objects own (slot words, and the attribution's own spread), Integers of a chunk's
     * address in a slot, and everything reachable from those along the references that count */
    for (i = 0; i < n; i++)
        if (a->owner[i] && ptmd_rec_is_allocated(&v->chunks[i])) {
            o->kind[i] = PTMD_OK_RUBY;
            queue[qt++] = (uint32_t)i;
        }
    for (i = 0; i < v->n_ruby_words; i++) {
        uint64_t w = v->ruby_words[i];
        long ci;
        if ((w & 31) != 1) continue;
        ci = ptmd_view_find_chunk(v, ptmd_mem2chunk(w >> 1), 0);
        if (ci < 0 || o->kind[ci] != PTMD_OK_NONE || !ptmd_rec_is_allocated(&v->chunks[ci])) continue;
        o->kind[ci] = PTMD_OK_RUBY;
        queue[qt++] = (uint32_t)ci;
    }
    spread(v, a, &g, &gi, o, queue, qt, PTMD_OK_RUBY);

    /* anchored: the chunks roots point at, then what they reach */
    qt = 0;
    for (i = 0; i < v->n_root_refs; i++) {
        uint32_t ci = v->root_refs[i].chunk;
        if (o->kind[ci] != PTMD_OK_NONE || !ptmd_rec_is_allocated(&v->chunks[ci])) continue;
        o->kind[ci] = PTMD_OK_ANCHORED;
        o->anchor[ci] = v->root_refs[i].root;
        o->direct[ci] = 1;
        queue[qt++] = ci;
    }
    spread(v, a, &g, &gi, o, queue, qt, PTMD_OK_ANCHORED);

    /* interior: what a pointer into its middle holds, from a root or a chunk reached so far, then what
     * those reach, along every kind of edge */
    qt = 0;
    for (i = 0; i < v->n_root_inner_refs; i++) {
        uint32_t ci = v->root_inner_refs[i].chunk;
        if (o->kind[ci] != PTMD_OK_NONE || !ptmd_rec_is_allocated(&v->chunks[ci])) continue;
        o->kind[ci] = PTMD_OK_INTERIOR;
        o->anchor[ci] = v->root_inner_refs[i].root;
        o->direct[ci] = 1;
        queue[qt++] = ci;
    }
    for (i = 0; i < v->n_inner_refs; i++) {
        uint32_t from = v->inner_refs[i].from, to = v->inner_refs[i].to;
        if (o->kind[from] == PTMD_OK_NONE || !(edges_out(v, a, from) & EDGE_ADDR)) continue;
        if (o->kind[to] != PTMD_OK_NONE || !ptmd_rec_is_allocated(&v->chunks[to])) continue;
        o->kind[to] = PTMD_OK_INTERIOR;
        o->anchor[to] = o->anchor[from];
        queue[qt++] = to;
    }
    if (build_graph(v, v->inner_refs, v->n_inner_refs, &gn) != 0) goto oom;
    {
        size_t qh = 0;
        while (qh < qt) {
            uint32_t from = queue[qh++];
            int edges = edges_out(v, a, from);
            if (edges & EDGE_ADDR) {
                visit(v, &g, from, o, queue, &qt, PTMD_OK_INTERIOR);
                visit(v, &gn, from, o, queue, &qt, PTMD_OK_INTERIOR);
            }
            if (edges & EDGE_INT) visit(v, &gi, from, o, queue, &qt, PTMD_OK_INTERIOR);
        }
    }

    /* without the Ruby pass a chunk no root reaches may be a Ruby object's: nothing says it is leaked */
    for (i = 0; i < n; i++)
        if (o->kind[i] == PTMD_OK_NONE && ptmd_rec_is_allocated(&v->chunks[i]))
            o->kind[i] = v->ruby_meta ? PTMD_OK_LEAKED : PTMD_OK_UNKNOWN;
    free(queue);
    free(g.offs);
    free(g.targets);
    free(gi.offs);
    free(gi.targets);
    free(gn.offs);
    free(gn.targets);
    return 0;
oom:
    free(queue);
    free(g.offs);
    free(g.targets);
    free(gi.offs);
    free(gi.targets);
    free(gn.offs);
    free(gn.targets);
    return -1;
}
