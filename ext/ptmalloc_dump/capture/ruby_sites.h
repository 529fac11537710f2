/* Ruby allocation sites (capture/ruby_sites.c): sampled new objects and the stacks that made them,
 * kept while tracing is on, copied into a dump's Ruby data. */
#ifndef PTMD_RUBY_SITES_H
#define PTMD_RUBY_SITES_H

#include <ruby.h>
#include "capture/ruby_data.h"

#define PTMD_SITES_MAX_FRAMES 64 /* the innermost frames kept of a deeper stack */

typedef struct {
    uint64_t every, seed;
    size_t max_objects; /* traced objects alive at once; more are counted as dropped */
    size_t max_stacks;  /* distinct stacks */
} ptmd_sites_options;

/* What tracing has done so far (all zero when it is off). */
typedef struct {
    int on;
    uint64_t every, seen, sampled, dropped, started_ns;
    size_t tracked, stacks, frames, max_objects, max_stacks, mapped_bytes;
} ptmd_sites_stats;

/* At load: the tracepoint and the object that marks the frames. */
void ptmd_ruby_sites_init(void);
/* Starts tracing: 0, or -1 with why filled (already on, mmap failed). */
int ptmd_ruby_sites_start(const ptmd_sites_options *o, char *why, size_t cap);
/* Stops tracing and unmaps its tables; nothing when it is off. */
void ptmd_ruby_sites_stop(void);
void ptmd_ruby_sites_stats(ptmd_sites_stats *s);
/* After the Ruby pass's walk, while tracing: the traced objects, their stacks and the frames' names
 * into rd (rd->sites_present), nothing allocated. -1 when mmap fails. */
int ptmd_ruby_sites_capture(ptmd_ruby_data *rd);

#endif
