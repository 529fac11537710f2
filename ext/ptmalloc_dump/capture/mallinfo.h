/* glibc's mallinfo2() or mallinfo() as a MALLINFO2 record (capture/mallinfo.c). */
#ifndef PTMD_MALLINFO_H
#define PTMD_MALLINFO_H

#include "format/format.h"

/* Fills out from mallinfo2(), or from mallinfo() where glibc is older than 2.33: 1 when exact, 0 when
 * mallinfo()'s int fields kept the low 32 bits only. */
int ptmd_mallinfo(ptmd_mallinfo2_rec *out);

#endif
