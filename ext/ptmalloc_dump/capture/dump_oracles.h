/* glibc's malloc_info() and mallinfo2() captured after the walk (capture/dump_oracles.c). */
#ifndef PTMD_DUMP_ORACLES_H
#define PTMD_DUMP_ORACLES_H

#include "capture/dump_state.h"

/* The stream malloc_info() writes to, made once when the extension loads (making it mallocs). */
void ptmd_oracles_setup(void);
/* Before the walk (making the stream mallocs): a stream of room for this many arenas' output, with
 * four times the room once a dump's output has outgrown it. */
int ptmd_oracles_prepare(size_t arenas, ptmd_err *err);
/* malloc_info() then mallinfo2(), back to back, right after the walk and with no allocation since it
 * began, into d. Returns 0, or -1 when the output outgrew the stream (the next dump's is larger). */
int ptmd_oracles_capture(ptmd_dump_state *d);

#endif
