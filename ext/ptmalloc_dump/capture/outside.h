/* Another process as the walk's source: stopped, checked that no arena lock is held, copied, let go. */
#ifndef PTMD_OUTSIDE_H
#define PTMD_OUTSIDE_H

#include "capture/walk_ctx.h"

/* Stops every thread of pid, reads its mappings into w->maps and copies what the walk reads into
 * w->src, and lets it run again. While an arena's mutex is held (read before the copy) it is let go for
 * a moment and stopped again (bounded; then PTMD_E_LOCKED naming the arena). Fills rec's pause,
 * threads, attempts and copied bytes. */
int ptmd_outside_copy(ptmd_walk *w, const ptmd_libc *lc, int pid, ptmd_source_rec *rec, ptmd_err *err);
/* The first arena along the ring from main_arena whose mutex is held (a stopped process read in
 * place, or a copy), or 0; a ring that cannot be read or does not come back ends the check. */
uint64_t ptmd_outside_held_arena(ptmd_source *s, const ptmd_libc *lc);
/* Where the target's threads keep struct pthread (lc->tp_from_pthread) and libc's static TLS block
 * (lc->tls_offset), from the threads' thread pointers and dtv: the block whose `thread_arena` holds an
 * arena of the ring. 1 when the TLS block was found. */
int ptmd_outside_tls(ptmd_walk *w, ptmd_libc *lc);

#endif
