/* The byte sampler: each thread counts the bytes it allocates down from an exponential draw of mean
 * PTMALLOC_DUMP_TRACK_BYTES; the block that crosses zero is sampled, so a block of n bytes is sampled
 * with probability 1 - exp(-n / mean) whatever came before it (a Poisson process over bytes). */
#include "track.h"

#include <math.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

PTMD_TRACK_TLS __thread int64_t ptmd_track_countdown;
static PTMD_TRACK_TLS __thread uint64_t rng;
static uint64_t mean_bytes, seed, threads;
static int on;

static uint64_t next_random(void)
{
    uint64_t x = rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void seed_thread(void)
{
    uint64_t n = __atomic_add_fetch(&threads, 1, __ATOMIC_RELAXED);
    if (seed) {
        rng = seed * 0x9e3779b97f4a7c15ull + n;
    } else {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        rng = ((uint64_t)t.tv_nsec << 20) ^ (uint64_t)t.tv_sec ^ ((uint64_t)syscall(SYS_gettid) << 32) ^
              (uint64_t)(uintptr_t)&rng;
    }
    if (!rng) rng = 0x853c49e6748fea9bull;
}

/* bytes to the next sample: -ln(u) * mean for u uniform in (0, 1] */
static int64_t draw(void)
{
    double u = (double)((next_random() >> 11) + 1) * (1.0 / 9007199254740992.0);
    double bytes = -log(u) * (double)mean_bytes;
    return bytes >= 9.0e18 ? INT64_MAX / 2 : (int64_t)bytes + 1;
}

int ptmd_track_draw(void)
{
    if (!__atomic_load_n(&on, __ATOMIC_ACQUIRE)) {
        ptmd_track_countdown = 4096; /* before the start, or when off: look again soon */
        return 0;
    }
    if (!rng) { /* a thread's first block: its count starts before it */
        seed_thread();
        ptmd_track_countdown += draw();
        if (ptmd_track_countdown > 0) return 0;
    }
    ptmd_track_countdown = draw();
    return !ptmd_track_busy;
}

void ptmd_track_sampler_forked(void)
{
    if (!seed) rng = 0; /* drawn again from the clock and this thread's id: workers sample apart */
}

void ptmd_track_sampler_start(uint64_t mean, uint64_t s)
{
    mean_bytes = mean;
    seed = s;
    __atomic_store_n(&on, 1, __ATOMIC_RELEASE);
}
