/* Who alone keeps what alive: the dominator tree of a directed graph (the pointer graph, from a root
 * standing for everything outside it) and, over that tree, the retained sums: what freeing one node
 * would free with it. Plain C; runs offline.
 *
 * Memory, for n nodes of which r are reached: the result's two arrays (8n bytes) and, while
 * ptmd_dominators_build runs, 8(n + 1) + 4n + 12r + 4b bytes more, where b counts the edges from a node
 * to one earlier in the search's preorder (back and cross edges, at most m = off[n]): a peak of at most about
 * 32n + 4m bytes when most nodes are reached, and nearer 32n for a graph that is mostly a tree.
 */
#ifndef PTMD_DOMINATORS_H
#define PTMD_DOMINATORS_H

#include <stddef.h>
#include <stdint.h>

/* A directed graph in compressed rows: node v's successors are dst[off[v] .. off[v+1]). An edge to a
 * node >= n, or a row past off[n], is ignored. */
typedef struct {
    uint32_t n;          /* nodes */
    const uint64_t *off; /* n + 1 entries, off[0] == 0, non-decreasing */
    const uint32_t *dst; /* off[n] entries */
} ptmd_graph;

#define PTMD_DOM_NONE UINT32_MAX

typedef struct {
    uint32_t *idom;   /* n: immediate dominator of each node; PTMD_DOM_NONE when unreachable from the
                         root; idom[root] == root */
    uint32_t *order;  /* the reached nodes in DFS preorder from the root (order[0] == root), so that
                         every node comes after its immediate dominator */
    uint32_t reached; /* how many nodes order holds */
} ptmd_dominators;

/* The dominator tree of g from `root` (Lengauer–Tarjan with path compression, without recursion):
 * 0, or -1 when memory runs out or root is not a node of g (d is then empty). */
int ptmd_dominators_build(const ptmd_graph *g, uint32_t root, ptmd_dominators *d);
void ptmd_dominators_free(ptmd_dominators *d);

/* out[v] = self[v] + the sum of self[] over every node v dominates (its dominator subtree), for every
 * reached node; 0 for unreached ones. One pass over the preorder, backwards. k columns: self and out
 * are n*k arrays, row-major (self[v*k + j]), so bytes, slot bytes and object counts are summed in one
 * pass. n is the graph's node count, as given to ptmd_dominators_build. */
void ptmd_dominators_sum(const ptmd_dominators *d, uint32_t n, size_t k, const uint64_t *self, uint64_t *out);

#endif
