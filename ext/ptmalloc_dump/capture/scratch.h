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

/* The capture's own mappings while they live (its buffers, the write buffer, the pagemap batch, the
 * malloc_info stream): a fixed table, so that the dump can measure its own share of the RSS without
 * allocating. A mapping past the table's room is not listed. */
#define PTMD_SCRATCH_MAX 512
typedef struct {
    uint64_t start, length;
} ptmd_scratch_range;
void ptmd_scratch_note(const void *base, size_t length);
void ptmd_scratch_forget(const void *base);
/* Copies up to max ranges into out; returns how many. */
size_t ptmd_scratch_list(ptmd_scratch_range *out, size_t max);

/* An address range of ours that the mapping scanner must ignore. */

#endif
