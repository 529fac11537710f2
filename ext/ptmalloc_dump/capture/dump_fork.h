/* The fork snapshot: a dump of this process written by a forked child (capture/dump_fork.c). */
#ifndef PTMD_DUMP_FORK_H
#define PTMD_DUMP_FORK_H

#include "capture/dump_state.h"

/* Fork snapshot: forks; the child runs the Ruby pass on its copy when ruby_in_child is set (else d's
 * Ruby data is the parent's, recorded before), then ptmd_dump_run for each of opts[0..n_opts) on the
 * same frozen heap (sharing that Ruby data), and _exits (status 0 on success; on failure it writes the
 * error to the pipe first). The parent gets the child's pid and the pipe's read end. d->snap_start
 * and d->snap's parent figures are the caller's. */
int ptmd_dump_fork(ptmd_dump_state *d, const ptmd_dump_opts *opts, size_t n_opts, int ruby_in_child, int *pid_out,
                   int *errfd_out, ptmd_err *err);

#endif
