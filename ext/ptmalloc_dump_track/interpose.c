/* The malloc family, each calling glibc's own (__libc_malloc and the rest, which glibc exports for
 * exactly this) and then, for a sampled block, the tracker; free and realloc first drop a sampled
 * block. glibc calls these through its own PLT as well, so strdup's and fopen's blocks are seen. */
#include "track.h"

#include <errno.h>
#include <gnu/libc-version.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t alignment, size_t n);
extern void *__libc_valloc(size_t n);
extern void *__libc_pvalloc(size_t n);

static inline void *seen(void *p, size_t n)
{
    if (p && ptmd_track_sampled(n)) ptmd_track_record(p, n);
    return p;
}

static inline void forget(void *p)
{
    if (!p || !ptmd_track_maybe(p) || ptmd_track_busy) return;
    ptmd_track_busy = 1;
    ptmd_track_lock();
    ptmd_track_remove((uint64_t)(uintptr_t)p);
    ptmd_track_unlock();
    ptmd_track_busy = 0; /* nothing here sets errno */
}

EXPORT void *malloc(size_t n)
{
    return seen(__libc_malloc(n), n);
}

EXPORT void free(void *p)
{
    forget(p);
    __libc_free(p);
}

EXPORT void *calloc(size_t n, size_t size)
{
    return seen(__libc_calloc(n, size), n * size); /* no overflow when it returned a block */
}

EXPORT void *realloc(void *p, size_t n)
{
    forget(p);
    return seen(__libc_realloc(p, n), n);
}

EXPORT void *memalign(size_t alignment, size_t n)
{
    return seen(__libc_memalign(alignment, n), n);
}

/* glibc 2.38 made aligned_alloc refuse an alignment that is not a power of two; before, it was memalign */
EXPORT void *aligned_alloc(size_t alignment, size_t n)
{
    static int strict = -1;
    if (strict < 0) {
        const char *v = gnu_get_libc_version();
        strict = v[0] > '2' || (v[0] == '2' && v[1] == '.' && atoi(v + 2) >= 38);
    }
    if (strict && (alignment == 0 || (alignment & (alignment - 1)))) {
        errno = EINVAL;
        return NULL;
    }
    return seen(__libc_memalign(alignment, n), n);
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t n)
{
    if (alignment % sizeof(void *) != 0 || alignment == 0 || (alignment & (alignment - 1))) return EINVAL;
    int saved = errno;
    void *p = __libc_memalign(alignment, n);
    errno = saved;
    if (!p) return ENOMEM;
    *out = seen(p, n);
    return 0;
}

EXPORT void *valloc(size_t n)
{
    return seen(__libc_valloc(n), n);
}

EXPORT void *pvalloc(size_t n)
{
    return seen(__libc_pvalloc(n), n);
}
