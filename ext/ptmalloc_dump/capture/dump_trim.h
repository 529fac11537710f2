/* The trim check (capture/dump_trim.c). */
#ifndef PTMD_DUMP_TRIM_H
#define PTMD_DUMP_TRIM_H

#include "capture/dump_state.h"

/* malloc_trim(0) after the walk, then the pages that were resident and are not any more,
 * per arena: what trimming really gave back, against which the report's estimate is checked. */
int ptmd_dump_trim_check(ptmd_dump_state *d, ptmd_err *err);

#endif
