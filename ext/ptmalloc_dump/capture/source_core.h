/* A core file as the source: its segments in place, its notes for threads and files
 * (capture/source_core.c). */
#ifndef PTMD_SOURCE_CORE_H
#define PTMD_SOURCE_CORE_H

#include "capture/source.h"

/* A core file as the source: its PT_LOAD segments as regions (every page the core holds marked
 * present: a core has no residency), its mappings into maps (file-backed where NT_FILE names a file,
 * unreadable where the core left the bytes out), the threads and their thread_ptr from NT_PRSTATUS, the
 * pid and parent from NT_PRPSINFO. PTMD_E_CORE when the file is not a whole x86-64 ELF core. */
int ptmd_source_open_core(ptmd_source *s, const char *path, ptmd_maps *maps, ptmd_err *err);
/* Entry i of the core's NT_FILE note: start, end, file offset (bytes) and path (NUL-terminated
 * inside the note). 0 when there is such an entry. */
int ptmd_source_core_file(const ptmd_source *s, size_t i, uint64_t *start, uint64_t *end, uint64_t *offset,
                          const char **path);

#endif
