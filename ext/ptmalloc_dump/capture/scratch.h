/* Growable scratch buffers backed by mmap, so the walk never calls malloc. */
#ifndef PTMD_SCRATCH_H
#define PTMD_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *base; /* NULL until first reserve; may move on growth: keep indices, not pointers */
    size_t len;          /* bytes in use */
    size_t cap;          /* bytes mapped */
} ptmd_buf;

/* Makes room for `extra` more bytes; 0 on success, -1 with errno on failure. */
int ptmd_buf_reserve(ptmd_buf *b, size_t extra);
/* Appends n bytes (zeroed) and returns a pointer to them, or NULL when mmap fails. */
void *ptmd_buf_push(ptmd_buf *b, size_t n);
int ptmd_buf_append(ptmd_buf *b, const void *data, size_t n);
void ptmd_buf_release(ptmd_buf *b);

#define PTMD_BUF_AT(b, type, i) (((type *)(void *)(b)->base) + (i))
#define PTMD_BUF_COUNT(b, type) ((b)->len / sizeof(type))

/* An address range of ours that the mapping scanner must ignore. */

#endif
