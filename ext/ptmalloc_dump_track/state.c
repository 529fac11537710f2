/* The allocation tracker's state (read by a dump at the symbol ptmalloc_dump_track, track_abi.h), its
 * lock, its mappings, and its one way to speak (a line to stderr). */
#include "track.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((visibility("default"))) ptmd_track_state ptmalloc_dump_track;
PTMD_TRACK_TLS __thread int ptmd_track_busy;

void ptmd_track_lock(void)
{
    while (__atomic_exchange_n(&ptmalloc_dump_track.lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&ptmalloc_dump_track.lock, __ATOMIC_RELAXED)) sched_yield();
}

void ptmd_track_unlock(void)
{
    __atomic_store_n(&ptmalloc_dump_track.lock, 0, __ATOMIC_RELEASE);
}

void ptmd_track_say(const char *a, const char *b)
{
    static const char head[] = "ptmalloc-dump --track: ";
    ssize_t r = write(2, head, sizeof head - 1);
    r = write(2, a, strlen(a));
    if (b) r = write(2, b, strlen(b));
    r = write(2, "\n", 1);
    (void)r;
}

void *ptmd_track_map(size_t bytes)
{
    ptmd_track_state *s = &ptmalloc_dump_track;
    if (s->n_regions == PTMD_TRACK_MAX_REGIONS) return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    s->regions[s->n_regions++] = (ptmd_track_region){ (uint64_t)(uintptr_t)p, bytes };
    s->mapped_bytes += bytes;
    return p;
}

void ptmd_track_unmap(void *p, size_t bytes)
{
    ptmd_track_state *s = &ptmalloc_dump_track;
    for (uint32_t i = 0; i < s->n_regions; i++) {
        if (s->regions[i].start != (uint64_t)(uintptr_t)p) continue;
        s->regions[i] = s->regions[--s->n_regions];
        s->regions[s->n_regions] = (ptmd_track_region){ 0, 0 };
        s->mapped_bytes -= bytes;
        break;
    }
    munmap(p, bytes);
}
