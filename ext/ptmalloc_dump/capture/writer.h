/* Writing a dump atomically: a 0600 temp file beside the target (O_EXCL|O_NOFOLLOW), write(2) from a
 * fixed mmapped buffer, fsync, rename. On any failure the target path is left untouched. */
#ifndef PTMD_WRITER_H
#define PTMD_WRITER_H

#include "format/ptmd.h"
#include <limits.h>

typedef struct {
    int fd;
    char path[PATH_MAX];
    char tmp[PATH_MAX];
    char dir[PATH_MAX];
    unsigned char *buf; /* mmapped staging buffer */
    size_t buf_len, buf_cap;
    uint32_t crc;
    uint64_t written; /* bytes handed to write(2) or buffered */
    uint64_t n_sections;
    int err_no; /* first write error */
} ptmd_writer;

/* Creates the temp file. Refuses a target that is a symlink or a directory. */
int ptmd_writer_open(ptmd_writer *wr, const char *path, ptmd_err *err);
/* Appends one section; errors are remembered and reported by ptmd_writer_finish. */
void ptmd_writer_section(ptmd_writer *wr, uint32_t type, uint64_t count, const void *data, uint64_t len);
/* A section written in pieces: begin, any number of puts totalling len bytes, end. */
void ptmd_writer_begin(ptmd_writer *wr, uint32_t type, uint64_t count, uint64_t len);
void ptmd_writer_put(ptmd_writer *wr, const void *data, size_t n);
void ptmd_writer_end(ptmd_writer *wr, uint64_t len);
/* Writes the END section, fsyncs, renames over the target. On failure removes the temp file. */
int ptmd_writer_finish(ptmd_writer *wr, uint64_t n_chunks, ptmd_err *err);
/* Abandons the dump: closes and removes the temp file. Safe to call twice. */
void ptmd_writer_abort(ptmd_writer *wr);

#endif
