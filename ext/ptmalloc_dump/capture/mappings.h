/* The MAPPINGS section's facts: /proc/self/smaps and VmRSS, read without malloc. */
#ifndef PTMD_MAPPINGS_H
#define PTMD_MAPPINGS_H

#include "format/ptmd.h"
#include "capture/scratch.h"

typedef struct {
    int present;
    ptmd_mappings_head head;
    ptmd_buf recs;  /* ptmd_mapping_rec */
    ptmd_buf paths; /* the records' path bytes */
    ptmd_buf text;  /* smaps as read (released after parsing) */
} ptmd_mappings;

/* Reads /proc/PID/smaps, then /proc/PID/status (pid 0: this process), into m (mmapped scratch; no
 * malloc). */
int ptmd_mappings_read(ptmd_mappings *m, int pid, ptmd_err *err);
void ptmd_mappings_release(ptmd_mappings *m);

#endif
