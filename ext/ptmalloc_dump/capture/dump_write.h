/* The records and sections of a dump, and its view (capture/dump_write.c). */
#ifndef PTMD_DUMP_WRITE_H
#define PTMD_DUMP_WRITE_H

#include "capture/dump_state.h"
#include <time.h>

/* The STRINGS section: libc's identity, the host, opts' extra strings (a snapshot child whose Ruby
 * pass failed says so instead of what its parent said); -1 when mmap fails. */
int ptmd_dump_strings(ptmd_dump_state *d, const ptmd_libc *lc, const ptmd_dump_opts *o);
/* The META record from the walk, lc and the capture's time. */
void ptmd_dump_meta(ptmd_dump_state *d, const ptmd_libc *lc, const struct timespec *now);
/* The sections, then the file's end and its rename; a file size limit must fail the write with
 * EFBIG, not kill the process. */
int ptmd_dump_write(ptmd_dump_state *d, ptmd_err *err);
/* The dump's records as a view (valid until release). */
void ptmd_dump_view(const ptmd_dump_state *d, ptmd_view *v);

#endif
