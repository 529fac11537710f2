/* The copy of a stopped process's memory that the walk reads (capture/source_copy.c). */
#ifndef PTMD_SOURCE_COPY_H
#define PTMD_SOURCE_COPY_H

#include "capture/source.h"

/* While the target is stopped: copies the mappings of maps that the walk reads (private readable
 * and writable ones, and libc's image [lo, hi)) into local mmapped regions, with their residency
 * from /proc/PID/pagemap. Anonymous pages neither resident nor swapped are not read (they read as
 * zeros, and reading them would make them resident); file-backed ones are read whole. Mappings left
 * out lose PTMD_MAP_R in maps, so that a readability check agrees with the copy. */
/* Copy buffers made ready while the target still runs: a fresh page costs the kernel a fault when
 * the copy first writes it, and the faults of a few hundred MiB took most of the time the target was
 * stopped. ptmd_source_prefault maps a buffer for each region the copy will take (from mappings read
 * before the stop) and faults in its pages where the target's were resident or swapped then; the
 * copy takes a spare whose region starts where its own does (resized to it), and maps afresh where
 * none does. A failure here only loses the head start. */
typedef struct {
    ptmd_buf regions; /* ptmd_region; local NULL once taken (pages unused) */
    size_t n;
} ptmd_copy_spare;
void ptmd_source_prefault(ptmd_copy_spare *sp, int pid, const ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi);
void ptmd_copy_spare_release(ptmd_copy_spare *sp);
int ptmd_source_copy(ptmd_source *s, ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi, ptmd_copy_spare *spare,
                     ptmd_err *err);

#endif
