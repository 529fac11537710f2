/* The mappings, VmRSS and Ruby pages' residency a dump records for its RSS (capture/dump_rss.c). */
#ifndef PTMD_DUMP_RSS_H
#define PTMD_DUMP_RSS_H

#include "capture/dump_state.h"

/* The mappings and VmRSS, right after the walk's page residency so that the two describe one moment.
 * A snapshot child takes its parent's (read_parent_mappings). Where /proc/self/smaps cannot be read the
 * dump goes on without them (the RSS is then not accounted), as residency falls back to mincore. */
void ptmd_dump_mappings(ptmd_dump_state *d);
/* A snapshot child's first act: its parent's smaps and VmRSS. The child's own would describe the
 * child (fork copies no page table entries of file mappings without private pages, so a mapped file
 * would show next to nothing; the other threads are gone), while the dump describes the parent at the
 * fork. Reading them in the parent before the fork would lengthen its pause by the whole smaps walk
 * (tens of milliseconds on a large heap, as long as the rest of the pause); read here, they lag the
 * fork by about the time a fork takes to return, during which the parent runs on. Left out when the
 * parent is already gone. */
void ptmd_dump_parent_mappings(ptmd_mappings *m, int parent);
/* Resident bytes of each Ruby page's body: the OS pages its slots span, from pagemap. */
int ptmd_dump_ruby_page_rss(ptmd_dump_state *d, ptmd_err *err);
/* The dump's own mappings (capture/scratch.c) and their resident bytes, right after the mappings
 * were read (in process only: a snapshot's mappings are its parent's). */
int ptmd_dump_scratch_rss(ptmd_dump_state *d, ptmd_err *err);

#endif
