/* format/index.c against brute force: the sort, the heaps' order, the chunk at an address. */
#include "check.h"
#include "synth.h"
#include "format/index.h"

#include <string.h>

static synth S;

typedef struct {
    uint64_t key;
    uint32_t tag, pad;
    uint64_t more;
} wide;

static int by_key(const void *a, const void *b, void *ctx)
{
    const wide *x = a, *y = b;
    (void)ctx;
    return x->key < y->key ? -1 : x->key > y->key;
}

static void sorts(void)
{
    static wide items[300];
    uint64_t r = 99;
    size_t n, i;
    unit_case = "ptmd_sort";
    for (n = 0; n <= 300; n += 7) {
        uint64_t sum = 0, after = 0;
        for (i = 0; i < n; i++) {
            items[i].key = synth_random(&r) % 50;
            items[i].tag = (uint32_t)i;
            sum += items[i].key * 1000003 + items[i].tag;
        }
        ptmd_sort(items, n, sizeof(items[0]), by_key, NULL);
        for (i = 0; i < n; i++) after += items[i].key * 1000003 + items[i].tag;
        for (i = 1; i < n && items[i - 1].key <= items[i].key; i++) continue;
        CHECK(n < 2 || i == n, "%zu elements in order (first out of order at %zu)", n, i);
        CHECK_EQ(after, sum);
    }
}

/* The chunk at (or containing) an address, by walking every chunk. */
static long brute_find(const ptmd_view *v, uint64_t addr, int containing)
{
    size_t i;
    for (i = 0; i < v->n_chunks; i++) {
        uint64_t lo = v->chunks[i].addr, hi = lo + ptmd_rec_size(&v->chunks[i]);
        if (addr == lo || (containing && addr > lo && addr < hi)) return (long)i;
    }
    return -1;
}

static void lookups(void)
{
    uint64_t seed;
    unit_case = "chunk lookup";
    for (seed = 1; seed <= 40; seed++) {
        synth_opts o = { 0, 0, 1 + (int)(seed & 1), (int)(seed % 4), 30, seed % 4 == 3 ? 65536 : 0 };
        const ptmd_view *v = &S.view;
        uint64_t r = seed, probes[4096];
        size_t n = 0, i, h;
        synth_build(&S, seed, &o);
        for (i = 1; i < v->n_heaps; i++)
            CHECK(v->heaps[S.heap_order[i - 1]].start < v->heaps[S.heap_order[i]].start, "heaps in address order");
        for (i = 0; i < v->n_chunks && n + 4 < 4096; i++) {
            uint64_t lo = v->chunks[i].addr, size = ptmd_rec_size(&v->chunks[i]);
            probes[n++] = lo;
            probes[n++] = lo + 1 + synth_random(&r) % (size - 1);
            probes[n++] = lo + size - 1;
            probes[n++] = lo - 1;
        }
        for (h = 0; h < v->n_heaps && n + 2 < 4096; h++) {
            probes[n++] = v->heaps[h].end;
            probes[n++] = v->heaps[h].start - 16;
        }
        for (i = 0; i < n; i++) {
            long a = ptmd_view_find_chunk(v, probes[i], 0), b = brute_find(v, probes[i], 0);
            long c = ptmd_view_find_chunk(v, probes[i], 1), d = brute_find(v, probes[i], 1);
            CHECK(a == b, "seed %llu: the chunk at %#llx is %ld, not %ld", (unsigned long long)seed,
                  (unsigned long long)probes[i], a, b);
            CHECK(c == d, "seed %llu: the chunk containing %#llx is %ld, not %ld", (unsigned long long)seed,
                  (unsigned long long)probes[i], c, d);
        }
        for (i = 0; i < v->n_chunks; i++) {
            long hi = ptmd_view_heap_of_chunk(v, i);
            CHECK(hi >= 0 && i >= v->heaps[hi].first_chunk && i < v->heaps[hi].first_chunk + v->heaps[hi].n_chunks,
                  "chunk %zu lies in heap %ld", i, hi);
        }
    }
}

void test_index(void)
{
    sorts();
    lookups();
}
