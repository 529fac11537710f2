/* Benchmark helper loaded with Fiddle: builds a large fragmented heap on the calling thread, and the
 * floor a heap walk is measured against (hop from chunk to chunk, summing sizes, nothing else). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>

static void **blocks;
static size_t nblocks;

/* n chunks of 16..512 bytes (some of 4..64 KiB), then every third freed: bins, tcache and fastbins */
size_t bh_build(size_t n, unsigned seed)
{
    size_t i;
    blocks = calloc(n, sizeof(void *));
    nblocks = n;
    for (i = 0; i < n; i++) {
        unsigned r = (unsigned)rand_r(&seed);
        size_t size = r % 100 < 97 ? 16 + r % 497 : 4096 + r % 61440;
        blocks[i] = malloc(size);
        *(volatile char *)blocks[i] = 1;
    }
    for (i = 0; i < n; i += 3) {
        free(blocks[i]);
        blocks[i] = NULL;
    }
    return n;
}

void bh_release(void)
{
    size_t i;
    for (i = 0; i < nblocks; i++) free(blocks[i]);
    free(blocks);
    blocks = NULL;
    nblocks = 0;
}

/* chunks from first to end, by their size fields; returns the number of chunks, *sum their bytes */
size_t bh_floor_walk(uintptr_t first, uintptr_t end, uint64_t *sum)
{
    size_t n = 0;
    uint64_t s = 0;
    uintptr_t p = first;
    while (p < end) {
        uint64_t size = *(const uint64_t *)(p + 8) & ~(uint64_t)7;
        if (size < 16) break;
        s += size;
        p += size;
        n++;
    }
    *sum = s;
    return n;
}

int bh_malloc_info_devnull(void)
{
    FILE *f = fopen("/dev/null", "w");
    int r;
    if (!f) return -1;
    r = malloc_info(0, f);
    fclose(f);
    return r;
}
