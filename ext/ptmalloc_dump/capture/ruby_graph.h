/* The Ruby object graph: each recorded object's references and the roots (capture/ruby_graph.c). */
#ifndef PTMD_RUBY_GRAPH_H
#define PTMD_RUBY_GRAPH_H

#include "capture/ruby_data.h"

/* Looks up the GC's functions the graph needs and finds the constant and global tables (at load). */
void ptmd_ruby_graph_init(void);
/* Why this Ruby cannot give the graph, NULL when it can. */
const char *ptmd_ruby_graph_problem(void);
/* Records the graph of rd's objects (after the Ruby pass) into rd: 0, or -1 with the reason in why and
 * nothing recorded. Raises nothing, allocates nothing. */
int ptmd_ruby_graph(ptmd_ruby_data *rd, char *why, size_t cap);

#endif
