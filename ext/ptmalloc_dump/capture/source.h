/* Where the walk's memory comes from: this process (direct reads), or another process stopped with
 * ptrace and read with process_vm_readv. A core file is a third source not built yet. */
#ifndef PTMD_SOURCE_H
#define PTMD_SOURCE_H

#include "format/ptmd.h"

#define PTMD_SOURCE_MAX_TASKS 4096

typedef enum { PTMD_SOURCE_SELF = 0, PTMD_SOURCE_PID = 1 } ptmd_source_kind;

typedef struct {
    ptmd_source_kind kind;
    int pid;
    int tids[PTMD_SOURCE_MAX_TASKS];    /* the threads seized, in the order they were */
    int n_tids;
    uint64_t stopped_ns;                /* CLOCK_MONOTONIC when the first thread was seized */
    uint64_t pause_ns;                  /* how long the target stayed stopped (set by detach) */
} ptmd_source;

void ptmd_source_self(ptmd_source *s);
/* Seizes and interrupts every thread of pid (re-listing /proc/PID/task until no new one appears),
 * waiting until each has stopped. On failure every thread seized is detached again. */
int ptmd_source_attach(ptmd_source *s, int pid, ptmd_err *err);
/* Detaches every seized thread (the target runs again) and records the pause; safe to call twice. */
void ptmd_source_detach(ptmd_source *s);
/* Reads len bytes at the source's address addr; 0 when all were read. Never faults. */
int ptmd_source_read(const ptmd_source *s, uint64_t addr, void *dst, size_t len);

#endif
