/* main_arena, mp_ and the tcache globals found by their structure, without symbols
 * (capture/locate_heuristic.c). */
#ifndef PTMD_LOCATE_HEURISTIC_H
#define PTMD_LOCATE_HEURISTIC_H

#include "capture/locate.h"
#include "capture/source.h"

/* In this process: 1 when found. */
int ptmd_locate_heuristic(ptmd_libc *lc, ptmd_err *err);
/* The same in another process's memory (a running one read in place, or a core) with its mappings:
 * mp_ without glibc's counters to match (they cannot be taken there), by its own consistency. */
int ptmd_locate_heuristic_in(ptmd_libc *lc, ptmd_source *mem, const ptmd_maps *maps);

#endif
