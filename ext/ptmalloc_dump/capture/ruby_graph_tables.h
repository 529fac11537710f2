/* The tables that name constants, global variables and thread-local variables, read as memory
 * (capture/ruby_graph_tables.c). */
#ifndef PTMD_RUBY_GRAPH_TABLES_H
#define PTMD_RUBY_GRAPH_TABLES_H

#include <ruby.h>
#include <stdint.h>

/* Finds where this Ruby keeps a module's constant table and its global variable table, checked on
 * constants and globals whose values are known (at load, where reading may fail safely). */
void ptmd_graph_tables_init(void);
/* Whether constants can be named (their table was found at load). */
int ptmd_graph_constants_known(void);
/* Calls each(id, value, data) for each constant of the class or module mod with a value. */
void ptmd_graph_constants(VALUE mod, void (*each)(uint64_t id, VALUE value, void *data), void *data);
/* Calls each(id, value, data) for each global variable whose value Ruby keeps itself (not a hooked
 * getter's): 0, or -1 when the table was not found at load. */
int ptmd_graph_globals(void (*each)(uint64_t id, VALUE value, void *data), void *data);
int ptmd_graph_thread_locals_known(void);
/* Whether v is a Thread or a Fiber: what it references is on its stacks, but for its variables. */
int ptmd_graph_stack_holder(VALUE v);
/* Calls each(id, value, data) for each of a Thread's or a Fiber's fiber-local variables (Thread#[]): 0,
 * or -1 when v is neither or their place was not found at load. */
int ptmd_graph_thread_locals(VALUE v, int (*each)(st_data_t id, st_data_t value, st_data_t data), void *data);

#endif
