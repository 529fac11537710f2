/* This process as the source of a walk: read in place, fault-free where memory may vanish
 * (capture/source_self.c). */
#ifndef PTMD_SOURCE_SELF_H
#define PTMD_SOURCE_SELF_H

#include "capture/source.h"

/* This process as the source: opens the fault-free reader. Its residency (s->pagemap) is opened by
 * the walk. */
int ptmd_source_self(ptmd_source *s, ptmd_err *err);

#endif
