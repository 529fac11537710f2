/* Lengauer and Tarjan's dominator algorithm ("A fast algorithm for finding dominators in a
 * flowgraph", TOPLAS 1979), its simple version: semidominators through a forest with path
 * compression, O(m log n). The pointer graphs it runs on have a million nodes and chains as long, so
 * the depth-first search and the compression both run without recursion, and every step after the
 * search works on preorder numbers, which keeps the arrays as long as the reached part. */
#include "analysis/dominators.h"

#include <stdlib.h>
#include <string.h>

#define NONE PTMD_DOM_NONE

/* Node v's row, clamped so that an inconsistent offset reads nothing rather than past dst. */
static void row(const ptmd_graph *g, uint32_t v, uint64_t *lo, uint64_t *hi)
{
    uint64_t end = g->off[g->n];
    *hi = g->off[v + 1] < end ? g->off[v + 1] : end;
    *lo = g->off[v] < *hi ? g->off[v] : *hi;
}

/* Depth-first search from root, numbering nodes in preorder: num[v] (NONE when not reached),
 * order[i], parent[i] (by number). The path back to the root is the stack, through parent[], and
 * cursor[i] is where node i's row resumes. Returns the number of nodes reached. */
static uint32_t search(const ptmd_graph *g, uint32_t root, uint32_t *num, uint32_t *order, uint32_t *parent,
                       uint64_t *cursor)
{
    uint32_t reached = 1, i = 0;
    uint64_t lo, hi;
    num[root] = 0;
    order[0] = root;
    parent[0] = NONE;
    row(g, root, &cursor[0], &hi);
    while (i != NONE) {
        row(g, order[i], &lo, &hi);
        while (cursor[i] < hi) {
            uint32_t u = g->dst[cursor[i]++];
            if (u >= g->n || num[u] != NONE) continue;
            num[u] = reached;
            order[reached] = u;
            parent[reached] = i;
            row(g, u, &cursor[reached], &hi);
            i = reached++;
            break;
        }
        if (cursor[i] >= hi) i = parent[i];
    }
    return reached;
}

/* A node of the forest, by preorder number. eval reads the three together, so they sit together: on
 * a graph of a million nodes each of its steps costs one cache miss rather than three. */
typedef struct {
    uint32_t ancestor; /* NONE at a tree's root, which is a node not processed yet */
    uint32_t label;    /* the node of smallest semidominator on the compressed path from here up */
    uint32_t semi;     /* label's semidominator; until the node is processed, the least number of its
                          predecessors numbered below it */
} forest_node;

/* The predecessors that matter to the semidominators, by preorder number. Of those numbered below t
 * only the least counts, and it goes to f[t].semi: in a graph that is mostly a tree, most edges are
 * such. Those numbered above t are from[start[t] .. start[t+1]). Self loops and edges into the root
 * are left out: the algorithm gains nothing from the first and never asks for the second. start must
 * hold r + 1 entries. */
static uint32_t *predecessors(const ptmd_graph *g, const uint32_t *num, const uint32_t *order, uint32_t r,
                              uint64_t *start, forest_node *f)
{
    uint32_t i, *from;
    uint64_t e, lo, hi, total = 0;
    memset(start, 0, (r + (size_t)1) * sizeof(*start));
    for (i = 0; i < r; i++) f[i].semi = i;
    for (i = 0; i < r; i++) {
        row(g, order[i], &lo, &hi);
        for (e = lo; e < hi; e++) {
            uint32_t u = g->dst[e], t = u < g->n ? num[u] : NONE;
            if (t == NONE || t == 0) continue;
            if (t < i) start[t]++;
            else if (t > i && i < f[t].semi) f[t].semi = i;
        }
    }
    /* each entry becomes the end of its range, and filling counts it back down to the start */
    for (i = 0; i < r; i++) {
        total += start[i];
        start[i] = total;
    }
    start[r] = total;
    from = malloc((total ? total : 1) * sizeof(*from));
    if (!from) return NULL;
    for (i = 0; i < r; i++) {
        row(g, order[i], &lo, &hi);
        for (e = lo; e < hi; e++) {
            uint32_t u = g->dst[e], t = u < g->n ? num[u] : NONE;
            if (t != NONE && t != 0 && t < i) from[--start[t]] = i;
        }
    }
    return from;
}

/* Compresses v's path to its tree's root, the root excluded, after which f[v].label is the node of
 * smallest semidominator on it and f[v].semi that semidominator. The recursive form compresses from
 * the top down; here the way up reverses the ancestor links so that the way down can follow them, and
 * restores them compressed. */
static void eval(forest_node *f, uint32_t v)
{
    uint32_t below = NONE, x = v;
    if (f[v].ancestor == NONE) return;
    while (f[f[x].ancestor].ancestor != NONE) {
        uint32_t up = f[x].ancestor;
        f[x].ancestor = below;
        below = x;
        x = up;
    }
    while (below != NONE) {
        uint32_t next = f[below].ancestor;
        if (f[x].semi < f[below].semi) {
            f[below].label = f[x].label;
            f[below].semi = f[x].semi;
        }
        f[below].ancestor = f[x].ancestor;
        x = below;
        below = next;
    }
}

/* Semidominators, then immediate dominators, by preorder number (the paper's steps 2 to 4).
 * parent[] becomes dom[]: parent[w] is last read when w is processed, which is when dom[w] is first
 * written, and until dom[v] is final it links v into the bucket of its semidominator. Those buckets'
 * heads are in head[], which also keeps w's semidominator once w is processed: only w's descendants
 * go into w's bucket, and it is empty again once its first child, the last of them, is processed. */
static void dominate(forest_node *f, uint32_t r, const uint64_t *start, const uint32_t *from, uint32_t *parent,
                     uint32_t *head)
{
    uint32_t *dom = parent, w, v;
    uint64_t e;
    for (w = 0; w < r; w++) {
        f[w].ancestor = NONE;
        head[w] = NONE;
    }
    for (w = r - 1; w > 0; w--) {
        uint32_t p = parent[w], semi = f[w].semi;
        for (e = start[w]; e < start[w + 1]; e++) {
            eval(f, from[e]);
            if (f[from[e]].semi < semi) semi = f[from[e]].semi;
        }
        dom[w] = head[semi];
        head[semi] = w;
        head[w] = semi;
        f[w].ancestor = p;
        f[w].label = w;
        f[w].semi = semi;
        for (v = head[p]; v != NONE;) {
            uint32_t next = dom[v];
            eval(f, v);
            dom[v] = f[v].semi < p ? f[v].label : p;
            v = next;
        }
        head[p] = NONE;
    }
    for (w = 1; w < r; w++)
        if (dom[w] != head[w]) dom[w] = dom[dom[w]];
    dom[0] = 0;
}

int ptmd_dominators_build(const ptmd_graph *g, uint32_t root, ptmd_dominators *d)
{
    uint32_t n = g->n, r, i, *parent = NULL, *from = NULL, *shrunk;
    uint64_t *start = NULL;
    forest_node *f = NULL;

    memset(d, 0, sizeof(*d));
    if (root >= n) return -1;
    d->idom = malloc(n * sizeof(uint32_t));
    d->order = malloc(n * sizeof(uint32_t));
    parent = malloc(n * sizeof(uint32_t));
    start = malloc((n + (size_t)1) * sizeof(uint64_t));
    if (!d->idom || !d->order || !parent || !start) goto oom;

    /* idom[] holds the preorder numbers until the predecessors are known, and start[] the search's
     * cursors until it is done: each is free by then for its later use */
    for (i = 0; i < n; i++) d->idom[i] = NONE;
    r = search(g, root, d->idom, d->order, parent, start);
    f = malloc(r * sizeof(*f));
    if (!f || !(from = predecessors(g, d->idom, d->order, r, start, f))) goto oom;
    dominate(f, r, start, from, parent, d->idom);
    free(from);
    free(start);
    free(f);

    for (i = 0; i < n; i++) d->idom[i] = NONE;
    for (i = 0; i < r; i++) d->idom[d->order[i]] = d->order[parent[i]];
    free(parent);
    d->reached = r;
    if ((shrunk = realloc(d->order, r * sizeof(uint32_t)))) d->order = shrunk;
    return 0;

oom:
    free(from);
    free(start);
    free(f);
    free(parent);
    ptmd_dominators_free(d);
    return -1;
}

void ptmd_dominators_free(ptmd_dominators *d)
{
    free(d->idom);
    free(d->order);
    memset(d, 0, sizeof(*d));
}

void ptmd_dominators_sum(const ptmd_dominators *d, uint32_t n, size_t k, const uint64_t *self, uint64_t *out)
{
    uint32_t i;
    size_t j;
    memset(out, 0, (size_t)n * k * sizeof(*out));
    for (i = 0; i < d->reached; i++) {
        uint32_t v = d->order[i];
        if (v < n) memcpy(&out[(size_t)v * k], &self[(size_t)v * k], k * sizeof(*out));
    }
    /* backwards, each node is complete before it is added to its immediate dominator, which the
     * preorder puts earlier */
    for (i = d->reached; i-- > 1;) {
        uint32_t v = d->order[i], p = v < n ? d->idom[v] : NONE;
        if (p >= n || p == v) continue;
        for (j = 0; j < k; j++) out[(size_t)p * k + j] += out[(size_t)v * k + j];
    }
}
