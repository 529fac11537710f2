/* glibc's own view, captured right after the walk: malloc_info() into a stream that never mallocs
 * once made, and mallinfo2(). */
#define _GNU_SOURCE
#include "capture/dump_oracles.h"
#include "capture/mallinfo.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define PTMD_MALLOC_INFO_MAX (256u << 20)
#define PTMD_MALLOC_INFO_RESERVE (16u << 20)   /* about 2,000 arenas of malloc_info() output */
#define PTMD_MALLOC_INFO_PER_ARENA (16u << 10) /* twice an arena's output with every bin in use */

/* One unbuffered FILE over an mmapped buffer, kept for the life of the process: creating it
 * mallocs, so it is made once (when the extension loads, ptmd_dump_setup) and merely rewound
 * afterwards. The buffer is reserved large (MAP_NORESERVE: untouched pages cost nothing) so that no
 * dump has to make a bigger one; only a ring of thousands of arenas does, before its walk. */
static FILE *mi_fp;
static char *mi_buf;
static size_t mi_cap;
static int mi_outgrown; /* a dump's output did not fit: the next one gets a larger stream */

static int mi_stream(size_t cap, ptmd_err *err)
{
    if (mi_fp && mi_cap >= cap)
        return fseek(mi_fp, 0, SEEK_SET) == 0 ? 0 : ptmd_fail_sys(err, errno, "malloc_info", "rewind the stream for");
    if (mi_fp) fclose(mi_fp);
    if (mi_buf) {
        ptmd_scratch_forget(mi_buf);
        munmap(mi_buf, mi_cap);
    }
    mi_fp = NULL;
    mi_buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mi_buf == MAP_FAILED) {
        mi_buf = NULL;
        return ptmd_fail_sys(err, errno, "malloc_info", "mmap a buffer for");
    }
    mi_cap = cap;
    ptmd_scratch_note(mi_buf, cap);
    mi_fp = fmemopen(mi_buf, cap, "w");
    if (!mi_fp) return ptmd_fail_sys(err, errno, "malloc_info", "fmemopen for");
    /* unbuffered: stdio would otherwise malloc a buffer on the first write */
    setvbuf(mi_fp, NULL, _IONBF, 0);
    return 0;
}

int ptmd_oracles_prepare(size_t arenas, ptmd_err *err)
{
    size_t cap = mi_cap ? mi_cap : PTMD_MALLOC_INFO_RESERVE;
    while (cap < PTMD_MALLOC_INFO_MAX && (cap < arenas * PTMD_MALLOC_INFO_PER_ARENA || mi_outgrown)) {
        cap *= 4;
        mi_outgrown = 0;
    }
    return mi_stream(cap, err);
}

int ptmd_oracles_capture(ptmd_dump_state *d)
{
    long n;
    if (!mi_fp) return -1;
    malloc_info(0, mi_fp);
    d->mallinfo_exact = ptmd_mallinfo(&d->mallinfo2);
    n = ftell(mi_fp);
    if (n < 0 || (size_t)n >= mi_cap - 1) {
        mi_outgrown = 1;
        return -1;
    }
    d->malloc_info = mi_buf;
    d->malloc_info_len = (size_t)n;
    return 0;
}

void ptmd_oracles_setup(void)
{
    ptmd_err ignored;
    memset(&ignored, 0, sizeof(ignored));
    mi_stream(PTMD_MALLOC_INFO_RESERVE, &ignored);
}
