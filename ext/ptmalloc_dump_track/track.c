/* The allocation tracker (LD_PRELOAD): its state, lock and mappings, and its start from the
 * environment. ptmalloc-dump --track -- CMD sets LD_PRELOAD to this library; a dump reads the state at
 * the symbol ptmalloc_dump_track (track_abi.h). */
#include "track.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

__attribute__((visibility("default"))) ptmd_track_state ptmalloc_dump_track;
PTMD_TRACK_TLS __thread int ptmd_track_busy;

#define DEFAULT_MEAN (512u * 1024u) /* as tcmalloc's and jemalloc's heap profilers */

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

/* A fork while another thread holds the lock would leave the child's copy locked for ever. */
static void before_fork(void)
{
    ptmd_track_lock();
}

static void after_fork_parent(void)
{
    ptmd_track_unlock();
}

static void after_fork_child(void)
{
    ptmalloc_dump_track.flags |= PTMD_TRACK_F_FORKED;
    ptmd_track_unlock();
}

/* A positive decimal number, or 0. */
static uint64_t number(const char *s)
{
    uint64_t v = 0;
    if (!s || !*s) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > UINT64_MAX / 10 - 9) return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    return v;
}

/* Whether malloc as this process resolves it is this library's: not when another allocator
 * (jemalloc, tcmalloc, mimalloc) comes first in LD_PRELOAD or is linked into the program. */
static int malloc_is_ours(const char **other)
{
    void *resolved = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info mine, theirs;
    if (!dladdr((void *)&ptmd_track_lock, &mine) || !resolved || !dladdr(resolved, &theirs)) return 1;
    *other = theirs.dli_fname;
    return theirs.dli_fbase == mine.dli_fbase;
}

__attribute__((constructor)) static void start(void)
{
    ptmd_track_state *s = &ptmalloc_dump_track;
    const char *other = NULL;
    int strict = getenv("PTMALLOC_DUMP_TRACK_STRICT") != NULL;
    const char *mean_text = getenv("PTMALLOC_DUMP_TRACK_BYTES");
    uint64_t mean = mean_text ? number(mean_text) : DEFAULT_MEAN;
    ptmd_track_busy = 1;
    if (!mean) {
        ptmd_track_say("PTMALLOC_DUMP_TRACK_BYTES must be a positive number of bytes, not ", mean_text);
        if (strict) _exit(127);
        goto off;
    }
    if (!malloc_is_ours(&other)) {
        ptmd_track_say("malloc here is not glibc's, it comes from ", other ? other : "another library");
        if (strict) _exit(127);
        goto off;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    s->mean_bytes = mean;
    s->started_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    s->pid = (uint32_t)getpid();
    s->abi = PTMD_TRACK_ABI;
    if (ptmd_track_tables_start() != 0) {
        ptmd_track_say("could not map its tables: ", strerror(errno));
        if (strict) _exit(127);
        goto off;
    }
    ptmd_track_stacks_start();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    ptmd_track_sampler_start(mean, number(getenv("PTMALLOC_DUMP_TRACK_SEED")));
    __atomic_store_n(&s->magic, PTMD_TRACK_MAGIC, __ATOMIC_RELEASE);
off:
    ptmd_track_busy = 0;
}
