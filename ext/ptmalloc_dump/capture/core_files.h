/* Which files a core's process mapped when the core has no NT_FILE note (capture/core_files.c). */
#ifndef PTMD_CORE_FILES_H
#define PTMD_CORE_FILES_H

#include "capture/source.h"

/* An NT_FILE note's contents built into out from the dynamic linker's list of loaded objects in the
 * core s (its regions read), its NT_AUXV note and the objects' files on this machine; 0 when at least
 * one file was found, -1 else (out's contents then undefined). */
int ptmd_core_files_from_link_map(ptmd_source *s, const unsigned char *auxv, size_t auxv_len, ptmd_buf *out);

#endif
