/* Who keeps Ruby's memory alive: the dominator tree of the recorded object graph and what each object
 * retains, shortest paths from the roots, and the holders worth naming. */
#include "analysis/retention.h"
#include "format/index.h"

#include <stdlib.h>
#include <string.h>

#define HOLDER_POOL 4096 /* holders ranked: the most a caller gets */

static void own_weights(const ptmd_view *v, const ptmd_attribution *a, ptmd_retention *r)
{
    size_t i;
    for (i = 0; i < r->n_objects; i++) {
        r->self[i * PTMD_RET_COLUMNS + PTMD_RET_SLOT_BYTES] = ptmd_view_slot_size(v, v->ruby_objects[i].address);
        r->self[i * PTMD_RET_COLUMNS + PTMD_RET_OBJECTS] = 1;
    }
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t o = a->owner[i];
        if (o && o <= r->n_objects && ptmd_state_is_allocated((int)(v->chunks[i].word & 0xf)))
            r->self[(size_t)(o - 1) * PTMD_RET_COLUMNS + PTMD_RET_BYTES] += v->chunks[i].word & PTMD_SIZE_MASK;
    }
}

/* Queues the roots of one kind that nothing queued yet. */
static void queue_roots(const ptmd_view *v, ptmd_retention *r, int kind, uint32_t *queue, size_t *tail)
{
    size_t i;
    for (i = 0; i < v->n_ruby_roots; i++) {
        const ptmd_ruby_root *rt = &v->ruby_roots[i];
        int k = rt->name != PTMD_NO_NAME ? 0 : (rt->flags & PTMD_RRF_CONSERVATIVE) ? 2 : 1;
        if (k != kind || r->parent[rt->object] != PTMD_RET_NONE) continue;
        r->parent[rt->object] = r->n_objects;
        r->via[rt->object] = (uint32_t)i;
        queue[(*tail)++] = rt->object;
    }
}

typedef struct {
    uint32_t *queue;
    size_t head, tail;
    uint64_t *deferred; /* stack references met, to follow once nothing else is left */
    size_t n_deferred;
    uint8_t *stacks; /* per object: it has stack references */
} bfs;

static int is_stack_edge(const ptmd_view *v, uint64_t k)
{
    const ptmd_ruby_edge_name *e = ptmd_retention_edge_name(v, k);
    return e && e->kind == PTMD_EDGE_STACK;
}

static void visit(ptmd_retention *r, bfs *q, uint32_t w, uint32_t parent, uint64_t via)
{
    if (r->parent[w] != PTMD_RET_NONE) return;
    r->parent[w] = parent;
    r->via[w] = (uint32_t)via;
    q->queue[q->tail++] = w;
}

/* The queue emptied, then what the stacks it met reference, until neither is left. */
static void drain(const ptmd_view *v, ptmd_retention *r, bfs *q)
{
    do {
        size_t i;
        while (q->head < q->tail) {
            uint32_t u = q->queue[q->head++];
            uint64_t k;
            for (k = r->edge_start[u]; k < r->edge_start[u + 1]; k++) {
                if (q->stacks[u] && is_stack_edge(v, k)) q->deferred[q->n_deferred++] = k;
                else visit(r, q, v->ruby_edges[k], u, k);
            }
        }
        for (i = 0; i < q->n_deferred; i++) {
            uint64_t k = q->deferred[i];
            size_t lo = 0, hi = r->n_objects; /* the source: the last object whose edges start at or before k */
            while (lo + 1 < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (r->edge_start[mid] <= k) lo = mid;
                else hi = mid;
            }
            visit(r, q, v->ruby_edges[k], (uint32_t)lo, k);
        }
        q->n_deferred = 0;
    } while (q->head < q->tail);
}

/* Breadth first from the roots, so that each object's path is a shortest one, and among those one a
 * person would name: from a global variable first, then from the roots Ruby knows it holds; through
 * a Thread's or Fiber's stacks (a frame holding the object for a moment), and from a word on a machine
 * stack that looks like a reference (marked conservatively), only for what nothing else reaches. */
static int shortest_paths(const ptmd_view *v, ptmd_retention *r)
{
    uint32_t n = r->n_objects;
    bfs q;
    size_t i;
    int kind, rc = -1;
    memset(&q, 0, sizeof(q));
    q.queue = malloc(((size_t)n + 1) * sizeof(uint32_t));
    q.deferred = malloc((v->n_ruby_edge_names + 1) * sizeof(uint64_t));
    q.stacks = calloc((size_t)n + 1, 1);
    if (q.queue && q.deferred && q.stacks) {
        for (i = 0; i < n; i++) r->parent[i] = PTMD_RET_NONE;
        for (i = 0; i < v->n_ruby_edge_names; i++) {
            size_t lo = 0, hi = n;
            if (v->ruby_edge_names[i].kind != PTMD_EDGE_STACK) continue;
            while (lo + 1 < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (r->edge_start[mid] <= v->ruby_edge_names[i].edge) lo = mid;
                else hi = mid;
            }
            if (n) q.stacks[lo] = 1;
        }
        for (kind = 0; kind < 3; kind++) {
            queue_roots(v, r, kind, q.queue, &q.tail);
            if (kind) drain(v, r, &q);
        }
        rc = 0;
    }
    free(q.queue);
    free(q.deferred);
    free(q.stacks);
    return rc;
}

/* The graph in rows, with the super-root's row (every root object) after the objects' own. */
static int dominate(const ptmd_view *v, ptmd_retention *r)
{
    uint32_t n = r->n_objects;
    uint64_t *off = malloc(((size_t)n + 2) * sizeof(uint64_t));
    uint32_t *dst = malloc((v->n_ruby_edges + v->n_ruby_roots + 1) * sizeof(uint32_t));
    ptmd_graph g;
    size_t i;
    int rc = -1;
    if (off && dst) {
        memcpy(off, r->edge_start, ((size_t)n + 1) * sizeof(uint64_t));
        if (v->n_ruby_edges) memcpy(dst, v->ruby_edges, v->n_ruby_edges * sizeof(uint32_t));
        for (i = 0; i < v->n_ruby_roots; i++) dst[v->n_ruby_edges + i] = v->ruby_roots[i].object;
        off[n + 1] = v->n_ruby_edges + v->n_ruby_roots;
        g.n = n + 1;
        g.off = off;
        g.dst = dst;
        rc = ptmd_dominators_build(&g, n, &r->dom);
        if (rc == 0) ptmd_dominators_sum(&r->dom, n + 1, PTMD_RET_COLUMNS, r->self, r->retained);
    }
    free(off);
    free(dst);
    return rc;
}

int ptmd_retention_build(const ptmd_view *v, const ptmd_attribution *a, ptmd_retention *r)
{
    size_t n = v->n_ruby_objects, i;
    memset(r, 0, sizeof(*r));
    r->n_objects = (uint32_t)n;
    r->self = calloc((n + 1) * PTMD_RET_COLUMNS, sizeof(uint64_t));
    r->retained = calloc((n + 1) * PTMD_RET_COLUMNS, sizeof(uint64_t));
    r->parent = malloc((n + 1) * sizeof(uint32_t));
    r->via = calloc(n + 1, sizeof(uint32_t));
    r->edge_start = malloc((n + 1) * sizeof(uint64_t));
    if (!r->self || !r->retained || !r->parent || !r->via || !r->edge_start || !v->ruby_graph) goto fail;
    r->edge_start[0] = 0;
    for (i = 0; i < n; i++) r->edge_start[i + 1] = r->edge_start[i] + v->ruby_edge_counts[i];
    own_weights(v, a, r);
    if (shortest_paths(v, r) != 0 || dominate(v, r) != 0) goto fail;
    return 0;
fail:
    ptmd_retention_free(r);
    return -1;
}

void ptmd_retention_free(ptmd_retention *r)
{
    ptmd_dominators_free(&r->dom);
    free(r->self);
    free(r->retained);
    free(r->parent);
    free(r->via);
    free(r->edge_start);
    memset(r, 0, sizeof(*r));
}

static int by_retained(const void *a, const void *b, void *ctx)
{
    const uint64_t *retained = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint64_t x = retained[(size_t)i * PTMD_RET_COLUMNS], y = retained[(size_t)j * PTMD_RET_COLUMNS];
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* The holders: the objects no dominated object retains most of (more than half), each the end of a
 * chain of objects each retaining most of the one before, so that the chain is named by its deepest;
 * largest first, at most HOLDER_POOL into pool. Which objects they are does not depend on how many
 * are asked for. */
static size_t candidates(const ptmd_retention *r, uint32_t *pool)
{
    uint32_t n = r->n_objects, i;
    uint64_t *most = calloc(n, sizeof(uint64_t));
    uint32_t *all;
    size_t count = 0, keep;
    if (!most) return 0;
    for (i = 0; i < n; i++) {
        uint32_t p = r->dom.idom[i];
        uint64_t b = r->retained[(size_t)i * PTMD_RET_COLUMNS];
        if (p < n && b > most[p]) most[p] = b;
    }
    all = malloc((size_t)n * sizeof(uint32_t));
    if (!all) {
        free(most);
        return 0;
    }
    for (i = 0; i < n; i++) {
        uint64_t b = r->retained[(size_t)i * PTMD_RET_COLUMNS];
        if (b && r->dom.idom[i] != PTMD_DOM_NONE && most[i] * 2 <= b) all[count++] = i;
    }
    ptmd_sort(all, count, sizeof(uint32_t), by_retained, r->retained);
    keep = count < HOLDER_POOL ? count : HOLDER_POOL;
    memcpy(pool, all, keep * sizeof(uint32_t));
    free(all);
    free(most);
    return keep;
}

size_t ptmd_retention_holders(const ptmd_retention *r, size_t limit, uint32_t *out)
{
    uint32_t *pool = malloc(HOLDER_POOL * sizeof(uint32_t));
    size_t m = pool ? candidates(r, pool) : 0;
    if (m > limit) m = limit;
    if (m) memcpy(out, pool, m * sizeof(uint32_t));
    free(pool);
    return m;
}

const ptmd_ruby_edge_name *ptmd_retention_edge_name(const ptmd_view *v, uint64_t edge)
{
    size_t lo = 0, hi = v->n_ruby_edge_names;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->ruby_edge_names[mid].edge < edge) lo = mid + 1;
        else if (v->ruby_edge_names[mid].edge > edge) hi = mid;
        else return &v->ruby_edge_names[mid];
    }
    return NULL;
}
