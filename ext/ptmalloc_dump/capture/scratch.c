/* mmap-backed growable buffers: scratch memory for the walk that leaves the malloc heap untouched. */
#define _GNU_SOURCE
#include "capture/scratch.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define PTMD_BUF_MIN (64 * 1024)

static ptmd_scratch_range live[PTMD_SCRATCH_MAX];
static size_t n_live;

void ptmd_scratch_note(const void *base, size_t length)
{
    if (n_live < PTMD_SCRATCH_MAX) {
        live[n_live].start = (uint64_t)(uintptr_t)base;
        live[n_live].length = length;
        n_live++;
    }
}

void ptmd_scratch_forget(const void *base)
{
    size_t i;
    for (i = 0; i < n_live; i++)
        if (live[i].start == (uint64_t)(uintptr_t)base) {
            live[i] = live[--n_live];
            memset(&live[n_live], 0, sizeof(live[n_live])); /* no stale address for the roots' scan */
            return;
        }
}

size_t ptmd_scratch_list(ptmd_scratch_range *out, size_t max)
{
    size_t n = n_live < max ? n_live : max;
    memcpy(out, live, n * sizeof(*out));
    return n;
}

int ptmd_buf_reserve(ptmd_buf *b, size_t extra)
{
    size_t need = b->len + extra, cap;
    void *p;
    if (need < b->len) {
        errno = ENOMEM;
        return -1;
    }
    if (need <= b->cap) return 0;
    cap = b->cap ? b->cap : PTMD_BUF_MIN;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            errno = ENOMEM;
            return -1;
        }
        cap *= 2;
    }
    if (b->base) p = mremap(b->base, b->cap, cap, MREMAP_MAYMOVE);
    else p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    if (b->base) ptmd_scratch_forget(b->base);
    ptmd_scratch_note(p, cap);
    b->base = p;
    b->cap = cap;
    return 0;
}

void *ptmd_buf_push(ptmd_buf *b, size_t n)
{
    void *p;
    if (ptmd_buf_reserve(b, n) != 0) return NULL;
    p = b->base + b->len;
    memset(p, 0, n);
    b->len += n;
    return p;
}

int ptmd_buf_append(ptmd_buf *b, const void *data, size_t n)
{
    void *p = ptmd_buf_push(b, n);
    if (!p) return -1;
    memcpy(p, data, n);
    return 0;
}

void ptmd_buf_release(ptmd_buf *b)
{
    if (b->base) {
        ptmd_scratch_forget(b->base);
        munmap(b->base, b->cap);
    }
    b->base = NULL;
    b->len = b->cap = 0;
}
