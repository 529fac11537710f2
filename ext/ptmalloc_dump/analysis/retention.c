/* Who keeps Ruby's memory alive: the dominator tree of the recorded object graph and what each object
 * retains, shortest paths from the roots, and the holders worth naming. */
#include "analysis/retention.h"
#include "format/index.h"

#include <stdlib.h>
#include <string.h>

#define HOLDER_POOL 4096   /* candidates ranked before the listed descendants are taken out */
#define CHAIN_LIMIT 100000 /* idom steps from a candidate up to the one listed above it */

static uint32_t slot_size(const ptmd_view *v, uint64_t address)
{
    size_t lo = 0, hi = v->n_ruby_pages;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_ruby_page *p = &v->ruby_pages[mid];
        if (address < p->start) hi = mid;
        else if (address >= p->end) lo = mid + 1;
        else return p->stride;
    }
    return 0;
}

static void own_weights(const ptmd_view *v, const ptmd_attribution *a, ptmd_retention *r)
{
    size_t i;
    for (i = 0; i < r->n_objects; i++) {
        r->self[i * PTMD_RET_COLUMNS + PTMD_RET_SLOT_BYTES] = slot_size(v, v->ruby_objects[i].address);
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

/* Breadth first from the roots, so that each object's path is a shortest one, and among those one a
 * person would name: from a global variable first, then from the roots Ruby knows it holds, and from a
 * word on a machine stack that looks like a reference (marked conservatively) only for what nothing
 * else reaches. */
static int shortest_paths(const ptmd_view *v, ptmd_retention *r)
{
    uint32_t n = r->n_objects, *queue = malloc(((size_t)n + 1) * sizeof(uint32_t));
    size_t head = 0, tail = 0, i;
    int kind;
    if (!queue) return -1;
    for (i = 0; i < n; i++) r->parent[i] = PTMD_RET_NONE;
    for (kind = 0; kind < 3; kind++) {
        queue_roots(v, r, kind, queue, &tail);
        if (kind == 0) continue;
        while (head < tail) {
            uint32_t u = queue[head++];
            uint64_t k;
            for (k = r->edge_start[u]; k < r->edge_start[u + 1]; k++) {
                uint32_t w = v->ruby_edges[k];
                if (r->parent[w] != PTMD_RET_NONE) continue;
                r->parent[w] = u;
                r->via[w] = (uint32_t)k;
                queue[tail++] = w;
            }
        }
    }
    free(queue);
    return 0;
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

/* Objects no dominated object retains most of, largest first (at most HOLDER_POOL into pool). */
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
        if (b && r->dom.idom[i] != PTMD_DOM_NONE && most[i] * 2 < b) all[count++] = i;
    }
    ptmd_sort(all, count, sizeof(uint32_t), by_retained, r->retained);
    keep = count < HOLDER_POOL ? count : HOLDER_POOL;
    memcpy(pool, all, keep * sizeof(uint32_t));
    free(all);
    free(most);
    return keep;
}

/* Which of the chosen are mostly other chosen ones' bytes: each chosen holder's bytes count against the
 * nearest chosen one above it in the dominator tree. Marks them in dropped; returns how many. */
static size_t drop_covered(const ptmd_retention *r, const uint32_t *chosen, size_t n_chosen, uint8_t *state,
                           uint64_t *covered)
{
    uint32_t n = r->n_objects;
    size_t i, dropped = 0;
    for (i = 0; i < n_chosen; i++) covered[chosen[i]] = 0;
    for (i = 0; i < n_chosen; i++) {
        uint32_t u = r->dom.idom[chosen[i]];
        size_t steps = 0;
        while (u < n && state[u] != 1 && steps++ < CHAIN_LIMIT) u = r->dom.idom[u];
        if (u < n && state[u] == 1) covered[u] += r->retained[(size_t)chosen[i] * PTMD_RET_COLUMNS];
    }
    for (i = 0; i < n_chosen; i++)
        if (covered[chosen[i]] * 2 >= r->retained[(size_t)chosen[i] * PTMD_RET_COLUMNS]) {
            state[chosen[i]] = 2;
            dropped++;
        }
    return dropped;
}

size_t ptmd_retention_holders(const ptmd_retention *r, size_t limit, uint32_t *out)
{
    uint32_t *pool = malloc(HOLDER_POOL * sizeof(uint32_t)), n = r->n_objects;
    uint8_t *state = calloc((size_t)n + 1, 1); /* 1 chosen, 2 dropped for the holders below it */
    uint64_t *covered = calloc((size_t)n + 1, sizeof(uint64_t));
    size_t m = 0, next = 0, found = 0, round, i;
    if (pool && state && covered) {
        m = candidates(r, pool);
        /* the largest `limit` chosen; those mostly made of chosen ones below them make room for the
         * next, until none is */
        for (round = 0; round < 64; round++) {
            for (found = 0, i = 0; i < next; i++)
                if (state[pool[i]] == 1) out[found++] = pool[i];
            while (found < limit && next < m) {
                state[pool[next]] = 1;
                out[found++] = pool[next++];
            }
            if (!drop_covered(r, out, found, state, covered)) break;
        }
        for (found = 0, i = 0; i < next && found < limit; i++)
            if (state[pool[i]] == 1) out[found++] = pool[i];
    }
    free(pool);
    free(state);
    free(covered);
    return found;
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
