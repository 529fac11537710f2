/* The allocation tracker's start (LD_PRELOAD): from the environment when the library loads, and its
 * part in fork. ptmalloc-dump --track -- CMD sets LD_PRELOAD to this library. */
#include "track.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MEAN (512u * 1024u) /* as tcmalloc's and jemalloc's heap profilers */

/* A fork while another thread holds the lock would leave the child's copy locked for ever, and one
 * while another thread unwinds its stack could leave the loader's lock held in the child (glibc resets
 * some of its locks across fork, not the one dl_iterate_phdr takes on older glibc): new records wait out
 * the fork, the ones in flight are waited for (a while: a thread stopped mid-record does not hold the
 * fork for ever), then the lock is taken. The forking thread is inside the tracker meanwhile: a signal
 * handler's malloc there passes straight to glibc. */
static void before_fork(void)
{
    struct timespec pause = { 0, 100000 };
    ptmd_track_busy = 1;
    __atomic_store_n(&ptmd_track_forking, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 1000 && __atomic_load_n(&ptmd_track_in_flight, __ATOMIC_SEQ_CST); i++) nanosleep(&pause, NULL);
    ptmd_track_lock();
}

static void after_fork_parent(void)
{
    ptmd_track_unlock();
    __atomic_store_n(&ptmd_track_forking, 0, __ATOMIC_SEQ_CST);
    ptmd_track_busy = 0;
}

static void after_fork_child(void)
{
    ptmd_track_in_flight = 0; /* the threads that had them are not in the child */
    ptmd_track_sampler_forked();
    ptmd_track_unlock();
    __atomic_store_n(&ptmd_track_forking, 0, __ATOMIC_SEQ_CST);
    ptmd_track_busy = 0;
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

/* Whether the malloc family as this process resolves it is this library's, and the rest of it
 * (malloc_usable_size, which Ruby calls on every free) glibc's: not when another allocator (jemalloc,
 * tcmalloc, mimalloc) comes before or after it in LD_PRELOAD or is linked into the program. */
static int malloc_is_ours(const char **other)
{
    static const char *const ours[] = { "malloc",        "free",           "calloc", "realloc", "memalign",
                                        "aligned_alloc", "posix_memalign", "valloc", "pvalloc" };
    static const char *const glibcs[] = { "malloc_usable_size", "malloc_trim", "mallopt", "malloc_info" };
    Dl_info mine, libc, theirs;
    void *own_libc = dlsym(RTLD_DEFAULT, "__libc_malloc");
    if (!dladdr((void *)&ptmd_track_lock, &mine) || !own_libc || !dladdr(own_libc, &libc)) return 1;
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]) + sizeof(glibcs) / sizeof(glibcs[0]); i++) {
        int is_ours = i < sizeof(ours) / sizeof(ours[0]);
        void *resolved = dlsym(RTLD_DEFAULT, is_ours ? ours[i] : glibcs[i - sizeof(ours) / sizeof(ours[0])]);
        if (!resolved || !dladdr(resolved, &theirs)) continue;
        if (theirs.dli_fbase != (is_ours ? mine.dli_fbase : libc.dli_fbase)) {
            *other = theirs.dli_fname;
            return 0;
        }
    }
    return 1;
}

__attribute__((constructor)) static void start(void)
{
    ptmd_track_state *s = &ptmalloc_dump_track;
    const char *other = NULL;
    /* strict for the command ptmalloc-dump --track started, not for what it starts in turn (a browser
     * with its own malloc, say, runs untracked) */
    int strict = getenv("PTMALLOC_DUMP_TRACK_STRICT") != NULL;
    unsetenv("PTMALLOC_DUMP_TRACK_STRICT");
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
