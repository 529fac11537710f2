/* analysis/dominators.c against brute force: on small random graphs, each node's dominators found by
 * deleting every other node in turn, the search's order and the retained sums; by hand, shapes whose
 * answers are known; a chain long enough that recursion over it would overflow the stack. */
#include "check.h"
#include "synth.h"
#include "analysis/dominators.h"

#include <stdlib.h>
#include <string.h>

#define SMALL 14
#define MAX_EDGES (2 * SMALL * SMALL + 1)
#define COLUMNS 3

typedef struct {
    uint64_t off[SMALL + 1];
    uint32_t dst[MAX_EDGES];
    ptmd_graph g;
} small_graph;

/* Compressed rows from an edge list, each row keeping the list's order. */
static void from_edges(small_graph *s, uint32_t n, const uint32_t (*edges)[2], size_t m)
{
    size_t e;
    uint32_t v;
    memset(s->off, 0, sizeof(s->off));
    for (e = 0; e < m; e++) s->off[edges[e][0] + 1]++;
    for (v = 0; v < n; v++) s->off[v + 1] += s->off[v];
    for (v = n; v > 0; v--) {
        size_t at = s->off[v];
        for (e = m; e-- > 0;)
            if (edges[e][0] == v - 1) s->dst[--at] = edges[e][1];
    }
    s->g.n = n;
    s->g.off = s->off;
    s->g.dst = s->dst;
}

/* The nodes reachable from root once `removed` is deleted (PTMD_DOM_NONE: none is), as a bit mask. */
static uint32_t reach(const ptmd_graph *g, uint32_t root, uint32_t removed)
{
    uint32_t seen, stack[SMALL], top = 0;
    uint64_t e;
    if (root == removed) return 0;
    seen = 1u << root;
    stack[top++] = root;
    while (top) {
        uint32_t v = stack[--top];
        for (e = g->off[v]; e < g->off[v + 1]; e++) {
            uint32_t u = g->dst[e];
            if (u >= g->n || u == removed || (seen >> u & 1)) continue;
            seen |= 1u << u;
            stack[top++] = u;
        }
    }
    return seen;
}

/* 1 when v has an edge to a node in mask. */
static int edge_into(const ptmd_graph *g, uint32_t v, uint32_t mask)
{
    uint64_t e;
    for (e = g->off[v]; e < g->off[v + 1]; e++)
        if (g->dst[e] < g->n && (mask >> g->dst[e] & 1)) return 1;
    return 0;
}

/* order is a depth-first preorder when each node is entered from the deepest node on the current
 * path that still has an unentered successor, and that node has an edge to it. */
static int is_dfs_preorder(const ptmd_graph *g, const ptmd_dominators *d)
{
    uint32_t path[SMALL], depth = 0, entered, i;
    if (d->reached == 0) return 0;
    entered = 1u << d->order[0];
    path[depth++] = d->order[0];
    for (i = 1; i < d->reached; i++) {
        uint32_t v = d->order[i];
        if (v >= g->n || (entered >> v & 1)) return 0;
        while (depth && !edge_into(g, path[depth - 1], ~entered)) depth--;
        if (!depth || !edge_into(g, path[depth - 1], 1u << v)) return 0;
        entered |= 1u << v;
        path[depth++] = v;
    }
    return 1;
}

/* Checks d against the oracle; self (n * COLUMNS entries) is summed when not NULL. */
static void check_against_oracle(const ptmd_graph *g, uint32_t root, const ptmd_dominators *d, const uint64_t *self,
                                 uint64_t seed)
{
    uint32_t n = g->n, reached = reach(g, root, PTMD_DOM_NONE), strict[SMALL], pos[SMALL], u, v, w;
    uint64_t out[SMALL * COLUMNS];
    size_t j;
    for (v = 0; v < n; v++) {
        strict[v] = 0;
        pos[v] = PTMD_DOM_NONE;
    }
    for (u = 0; u < n; u++) {
        uint32_t without = reach(g, root, u);
        for (v = 0; v < n; v++)
            if (v != u && (reached >> v & 1) && !(without >> v & 1)) strict[v] |= 1u << u;
    }
    CHECK_EQ(d->reached, (uint32_t)__builtin_popcount(reached));
    CHECK(d->reached && d->order[0] == root, "seed %llu: the order starts at the root", (unsigned long long)seed);
    CHECK(is_dfs_preorder(g, d), "seed %llu: the order is a depth-first preorder", (unsigned long long)seed);
    for (v = 0; v < d->reached && v < n; v++)
        if (d->order[v] < n) pos[d->order[v]] = v;
    for (v = 0; v < n; v++) {
        uint32_t closest = PTMD_DOM_NONE, candidates = 0;
        if (!(reached >> v & 1)) {
            CHECK(d->idom[v] == PTMD_DOM_NONE, "seed %llu: node %u is unreached", (unsigned long long)seed, v);
            continue;
        }
        if (v == root) {
            CHECK_EQ(d->idom[v], root);
            continue;
        }
        for (u = 0; u < n; u++)
            if ((strict[v] >> u & 1) && (strict[v] & ~(1u << u) & ~strict[u]) == 0) {
                closest = u;
                candidates++;
            }
        CHECK(candidates == 1, "seed %llu: one closest dominator of %u, not %u", (unsigned long long)seed, v,
              candidates);
        CHECK(d->idom[v] == closest, "seed %llu: idom(%u) is %u, expected %u", (unsigned long long)seed, v, d->idom[v],
              closest);
        CHECK(d->idom[v] < n && pos[d->idom[v]] < pos[v], "seed %llu: %u comes after its immediate dominator",
              (unsigned long long)seed, v);
    }
    if (!self) return;
    ptmd_dominators_sum(d, n, COLUMNS, self, out);
    for (v = 0; v < n; v++)
        for (j = 0; j < COLUMNS; j++) {
            uint64_t sum = 0;
            if (reached >> v & 1)
                for (w = 0; w < n; w++)
                    if ((reached >> w & 1) && (w == v || (strict[w] >> v & 1))) sum += self[w * COLUMNS + j];
            CHECK(out[v * COLUMNS + j] == sum, "seed %llu: node %u column %zu retains %llu, expected %llu",
                  (unsigned long long)seed, v, j, (unsigned long long)out[v * COLUMNS + j], (unsigned long long)sum);
        }
}

/* Graphs of 1 to 14 nodes, from none to twice n*n edges (self loops and parallel edges among them),
 * now and then an edge to a node that does not exist, the root anywhere. */
static void random_graphs(void)
{
    static small_graph s;
    uint32_t edges[MAX_EDGES][2];
    uint64_t r = 0x5eed, seed, self[SMALL * COLUMNS];
    unit_case = "dominators of random graphs";
    for (seed = 1; seed <= 3000; seed++) {
        uint32_t n = 1 + (uint32_t)(synth_random(&r) % SMALL), root = (uint32_t)(synth_random(&r) % n);
        size_t m = synth_random(&r) % (2 * n * n / (1u << synth_random(&r) % 4) + 1), e, j;
        ptmd_dominators d;
        for (e = 0; e < m; e++) {
            edges[e][0] = (uint32_t)(synth_random(&r) % n);
            edges[e][1] = (uint32_t)(synth_random(&r) % n);
            if (synth_random(&r) % 50 == 0) edges[e][1] = n + (uint32_t)(synth_random(&r) % 3);
        }
        for (j = 0; j < n * COLUMNS; j++) self[j] = synth_random(&r) % 1000;
        from_edges(&s, n, (const uint32_t(*)[2])edges, m);
        if (ptmd_dominators_build(&s.g, root, &d) != 0) {
            CHECK(0, "seed %llu: built", (unsigned long long)seed);
            continue;
        }
        check_against_oracle(&s.g, root, &d, self, seed);
        ptmd_dominators_free(&d);
    }
}

/* A shape drawn by hand, from root 0, with the immediate dominators it is known to have. */
static void shape(const char *name, uint32_t n, const uint32_t (*edges)[2], size_t m, const uint32_t *expected)
{
    static small_graph s;
    ptmd_dominators d;
    uint32_t v;
    unit_case = name;
    from_edges(&s, n, edges, m);
    if (ptmd_dominators_build(&s.g, 0, &d) != 0) {
        CHECK(0, "built");
        return;
    }
    for (v = 0; v < n; v++) CHECK(d.idom[v] == expected[v], "idom(%u) is %u, expected %u", v, d.idom[v], expected[v]);
    check_against_oracle(&s.g, 0, &d, NULL, 0);
    ptmd_dominators_free(&d);
}

static void shapes(void)
{
    static const uint32_t chain[][2] = { { 0, 1 }, { 1, 2 }, { 2, 3 } }, chain_idom[] = { 0, 0, 1, 2 };
    static const uint32_t diamond[][2] = { { 0, 1 }, { 0, 2 }, { 1, 3 }, { 2, 3 }, { 3, 4 } },
                          diamond_idom[] = { 0, 0, 0, 0, 3, PTMD_DOM_NONE };
    static const uint32_t cycle[][2] = { { 0, 1 }, { 1, 2 }, { 2, 0 }, { 2, 3 }, { 3, 3 }, { 3, 9 } },
                          cycle_idom[] = { 0, 0, 1, 2 };
    /* two ways into a loop: neither entry dominates the other */
    static const uint32_t irreducible[][2] = { { 0, 1 }, { 0, 2 }, { 1, 2 }, { 2, 1 } },
                          irreducible_idom[] = { 0, 0, 0 };
    /* Lengauer and Tarjan's example, R A B C D E F G H I J K L numbered 0 to 12 */
    enum { R, A, B, C, D, E, F, G, H, I, J, K, L };
    static const uint32_t lt[][2] = { { R, A }, { R, B }, { R, C }, { A, D }, { B, A }, { B, D }, { B, E },
                                      { C, F }, { C, G }, { D, L }, { E, H }, { F, I }, { G, I }, { G, J },
                                      { H, E }, { H, K }, { I, K }, { J, I }, { K, I }, { K, R }, { L, H } },
                          lt_idom[] = { R, R, R, R, R, R, C, C, R, R, G, R, D };
    static small_graph s;
    ptmd_dominators d;
    uint64_t self[6 * COLUMNS], out[6 * COLUMNS];
    size_t j;
    shape("dominators of a chain", 4, chain, 3, chain_idom);
    shape("dominators of a diamond and an unreached node", 6, diamond, 5, diamond_idom);
    shape("dominators of a cycle back to the root", 4, cycle, 6, cycle_idom);
    shape("dominators of an irreducible loop", 3, irreducible, 4, irreducible_idom);
    shape("dominators of Lengauer and Tarjan's example", 13, lt, sizeof(lt) / sizeof(lt[0]), lt_idom);

    /* self[v][j] = 3v + j + 1; the tree is 0 over 1, 2 and 3, and 3 over 4 */
    unit_case = "retained sums of a diamond";
    from_edges(&s, 6, diamond, 5);
    for (j = 0; j < 6 * COLUMNS; j++) self[j] = j + 1;
    if (ptmd_dominators_build(&s.g, 0, &d) == 0) {
        ptmd_dominators_sum(&d, 6, COLUMNS, self, out);
        for (j = 0; j < COLUMNS; j++) {
            CHECK_EQ(out[0 * COLUMNS + j], 35 + 5 * j);
            CHECK_EQ(out[1 * COLUMNS + j], 4 + j);
            CHECK_EQ(out[2 * COLUMNS + j], 7 + j);
            CHECK_EQ(out[3 * COLUMNS + j], 23 + 2 * j);
            CHECK_EQ(out[4 * COLUMNS + j], 13 + j);
            CHECK_EQ(out[5 * COLUMNS + j], 0);
        }
        ptmd_dominators_free(&d);
    } else CHECK(0, "built");

    unit_case = "dominators from a node that does not exist";
    CHECK(ptmd_dominators_build(&s.g, 6, &d) == -1 && !d.idom && !d.order && !d.reached, "refused, empty");
}

/* A chain of two million nodes whose last node points back at the second: the search goes two million
 * deep, and the first look along the forest from the end climbs the whole chain. */
static void long_chain(void)
{
    const uint32_t n = 2000000;
    uint64_t *off = malloc((n + (size_t)1) * sizeof(*off)), *self = malloc(n * sizeof(*self)),
             *out = malloc(n * sizeof(*out));
    uint32_t *dst = malloc(n * sizeof(*dst)), i, wrong_idom = 0, wrong_order = 0, wrong_sum = 0;
    ptmd_graph g = { n, off, dst };
    ptmd_dominators d;
    unit_case = "dominators of a chain of two million nodes";
    if (!off || !dst || !self || !out) {
        CHECK(0, "memory for the chain");
        goto out;
    }
    for (i = 0; i <= n; i++) off[i] = i;
    for (i = 0; i < n; i++) {
        dst[i] = i + 1 < n ? i + 1 : 1;
        self[i] = 1;
    }
    if (ptmd_dominators_build(&g, 0, &d) != 0) {
        CHECK(0, "built");
        goto out;
    }
    CHECK_EQ(d.reached, n);
    CHECK_EQ(d.idom[0], 0);
    for (i = 1; i < n; i++) wrong_idom += d.idom[i] != i - 1;
    for (i = 0; i < d.reached; i++) wrong_order += d.order[i] != i;
    ptmd_dominators_sum(&d, n, 1, self, out);
    for (i = 0; i < n; i++) wrong_sum += out[i] != n - i;
    CHECK_EQ(wrong_idom, 0);
    CHECK_EQ(wrong_order, 0);
    CHECK_EQ(wrong_sum, 0);
    ptmd_dominators_free(&d);
out:
    free(off);
    free(dst);
    free(self);
    free(out);
}

void test_dominators(void)
{
    random_graphs();
    shapes();
    long_chain();
}
