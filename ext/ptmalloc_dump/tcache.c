/* Threads and their tcaches. tcache chunks look in use to the arena; they are found by reading every
 * thread's `tcache` pointer from its static TLS, and by recognising tcache_perthread_structs among
 * in-use chunks by structure (counts, chained entries, keys). Another thread's tcache can change while
 * it is read: every read here is fault-free and every value is checked. */
#define _GNU_SOURCE
#include "walk.h"
#include "threads.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define PTMD_TCACHE_STRUCT_MAX (PTMD_TCACHE_MAX_BINS_MAX * 10)
#define PTMD_MAX_TCACHE_COUNT 65535

typedef struct {
    unsigned char raw[PTMD_TCACHE_STRUCT_MAX];
} tcache_image;

static uint64_t tc_count(const ptmd_walk *w, const tcache_image *t, int i)
{
    const ptmd_layout *L = w->L;
    uint64_t v;
    if (L->tcache_count_width == 1) v = t->raw[i];
    else {
        uint16_t c;
        memcpy(&c, t->raw + (size_t)i * 2, 2);
        v = c;
    }
    if (L->tcache_counts_are_slots) v = v <= w->tcache_count_max ? w->tcache_count_max - v : UINT64_MAX;
    return v;
}

static uint64_t tc_entry(const ptmd_walk *w, const tcache_image *t, int i)
{
    uint64_t e;
    memcpy(&e, t->raw + w->L->tcache_entries_off + (size_t)i * 8, 8);
    return e;
}

static int tc_bins(const ptmd_walk *w)
{
    return w->L->tcache_bins + w->L->tcache_large_bins;
}

/* Does chunk size `size` belong in tcache bin i? Large bins (2.42+) hold one power of two each:
 * large_csize2tidx (nb) = 64 + clz (MAX_TCACHE_SMALL_SIZE) - clz (nb), with 32-bit clz. */
static int tc_size_fits(const ptmd_walk *w, int i, uint64_t size)
{
    const uint32_t max_small = (uint32_t)ptmd_tidx2csize(w->L->tcache_bins - 1) - PTMD_SIZE_SZ;
    if (i < w->L->tcache_bins) return size == ptmd_tidx2csize(i);
    if (size <= max_small + PTMD_SIZE_SZ || size > UINT32_MAX) return 0;
    return w->L->tcache_bins + __builtin_clz(max_small) - __builtin_clz((uint32_t)size) == i;
}

int ptmd_tcache_is_dummy(ptmd_walk *w, uint64_t v)
{
    const ptmd_layout *L = w->L;
    const ptmd_libc *lc = w->lc;
    tcache_image t;
    size_t i;
    if (!L->tcache_dummy || !v) return 0;
    /* tcache_inactive () and tcache_disabled (): &__tcache_dummy.inactive, &__tcache_dummy.disabled
     * (after a char pad, so 8 bytes on) */
    if (lc->tcache_dummy) return v == lc->tcache_dummy || v == lc->tcache_dummy + 8;
    if (v < lc->image_start || v >= lc->image_end || L->tcache_struct_size > lc->image_end - v ||
        L->tcache_struct_size > sizeof(t.raw))
        return 0;
    if (ptmd_safe_read(&w->mem, v, t.raw, L->tcache_struct_size) != 0) return 0;
    for (i = 0; i < L->tcache_struct_size; i++)
        if (t.raw[i]) return 0;
    return 1;
}

/* Walks one tcache. With apply == 0 only checks it (strict: any fault fails); with apply != 0 marks
 * its entries' chunks as tcache and records anomalies. Returns 1 when it checks out. */
static int tcache_walk(ptmd_walk *w, uint64_t user, int apply, uint32_t *count_out, uint64_t *bytes_out)
{
    const ptmd_layout *L = w->L;
    tcache_image t;
    uint64_t key_value = 0, *key = &key_value;
    int key_seen_v = 0, *key_seen = &key_seen_v;
    int i, nonempty = 0, ok = 1;
    uint32_t count = 0;
    uint64_t bytes = 0;

    if (!user || (user & PTMD_MALLOC_ALIGN_MASK) || L->tcache_struct_size > sizeof(t.raw)) return 0;
    if (ptmd_safe_read(&w->mem, user, t.raw, L->tcache_struct_size) != 0) return 0;
    for (i = 0; i < tc_bins(w); i++) {
        uint64_t want = tc_count(w, &t, i), e = tc_entry(w, &t, i), n = 0;
        if (want > PTMD_MAX_TCACHE_COUNT) { if (!apply) return 0; want = PTMD_MAX_TCACHE_COUNT; ok = 0; }
        if ((want == 0) != (e == 0)) {
            if (!apply) return 0;
            ptmd_walk_anomaly(w, PTMD_AN_TCACHE_COUNT, user, (uint64_t)i, PTMD_NO_ARENA);
            ok = 0;
        }
        if (e) nonempty = 1;
        while (e && n <= want) {
            uint64_t words[2], size;
            long ci = (e & PTMD_MALLOC_ALIGN_MASK) ? -1 : ptmd_walk_find_chunk(w, e - PTMD_CHUNK_HDR_SZ);
            ptmd_chunk_rec *r = ci >= 0 ? PTMD_W_CHUNK(w, ci) : NULL;
            /* glibc 2.43's __libc_free caches mmapped chunks too (tcache_put_large) */
            int good = r && !(r->word & PTMD_CF_FREE_BIT) &&
                       (ptmd_rec_state(r) == PTMD_ST_IN_USE || ptmd_rec_state(r) == PTMD_ST_TCACHE ||
                        (L->tcache_holds_mmapped && ptmd_rec_state(r) == PTMD_ST_MMAPPED));
            if (good && ptmd_safe_read(&w->mem, e, words, sizeof(words)) != 0) good = 0;
            size = r ? ptmd_rec_size(r) : 0;
            if (good && !tc_size_fits(w, i, size)) good = 0;
            if (!good) {
                if (!apply) return 0;
                ptmd_walk_anomaly(w, PTMD_AN_LIST_NOT_CHUNK, e - PTMD_CHUNK_HDR_SZ, (uint64_t)i, PTMD_NO_ARENA);
                ok = 0;
                break;
            }
            if (L->tcache_entry_has_key) {
                uint64_t key_want;
                /* without the tcache_key symbol: every entry of every tcache carries the same key */
                if (L->tcache_key_is_random && !w->have_tcache_key && !*key_seen) {
                    *key = words[1];
                    *key_seen = 1;
                }
                key_want = !L->tcache_key_is_random ? user : w->have_tcache_key ? w->tcache_key : *key;
                if (words[1] != key_want) {
                    if (!apply) return 0;
                    ptmd_walk_anomaly(w, PTMD_AN_TCACHE_KEY, e - PTMD_CHUNK_HDR_SZ, words[1], PTMD_NO_ARENA);
                    ok = 0;
                }
            }
            if (apply) {
                if (ptmd_rec_state(r) == PTMD_ST_TCACHE) {
                    ptmd_walk_anomaly(w, PTMD_AN_DUPLICATE, e - PTMD_CHUNK_HDR_SZ, user, PTMD_NO_ARENA);
                    ok = 0;
                    break;
                }
                ptmd_rec_set_state(r, PTMD_ST_TCACHE);
            }
            count++;
            bytes += size;
            n++;
            e = L->safe_linking ? ptmd_reveal_ptr(e, words[0]) : words[0];
        }
        if (ok && n != want) {
            if (!apply) return 0;
            ptmd_walk_anomaly(w, PTMD_AN_TCACHE_COUNT, user, ((uint64_t)i << 32) | n, PTMD_NO_ARENA);
            ok = 0;
        }
    }
    if (!apply && !nonempty) return 0;     /* an all-zero block proves nothing */
    if (!apply && ok && key_seen_v && !w->have_tcache_key) {
        /* a whole tcache agreed on one key: that is tcache_key */
        w->tcache_key = key_value;
        w->have_tcache_key = 1;
    }
    if (count_out) *count_out = count;
    if (bytes_out) *bytes_out = bytes;
    return ok;
}

static ptmd_thread_rec *find_thread_by_tcache(ptmd_walk *w, uint64_t user)
{
    size_t i, n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    for (i = 0; i < n; i++)
        if (PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i)->tcache == user)
            return PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
    return NULL;
}

static void mark_struct(ptmd_walk *w, uint64_t user)
{
    long ci = ptmd_walk_find_chunk(w, user - PTMD_CHUNK_HDR_SZ);
    if (ci >= 0) PTMD_W_CHUNK(w, ci)->word |= PTMD_CF_TCACHE_STRUCT;
}

/* Without symbols the TLS offsets of `tcache` and `thread_arena` are unknown: find them in the calling
 * thread's own libc TLS block (the word that holds one of the tcaches found by structure, and the word
 * that holds the arena that tcache was allocated from), then read every listed thread's. */
static void adopt_scanned(ptmd_walk *w, size_t first_scanned)
{
    const ptmd_libc *lc = w->lc;
    uintptr_t block = ptmd_libc_tls_block_self(lc), self;
    size_t i, j, n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec), k;
    long tc_off = -1, ar_off = -1;
    uint64_t my_tcache = 0, my_arena = 0;
    if (!block || !lc->tls_size || first_scanned >= n) return;
    __asm__("mov %%fs:16, %0" : "=r"(self));
    for (k = 0; k + 8 <= lc->tls_size && tc_off < 0; k += 8) {
        uint64_t v = ptmd_rd64(block + k);
        for (j = first_scanned; j < n; j++)
            if (v && PTMD_BUF_AT(&w->threads, ptmd_thread_rec, j)->tcache == v) {
                tc_off = (long)k;
                my_tcache = v;
            }
    }
    if (tc_off < 0) return;
    /* the arena the tcache struct lives in is the thread's arena */
    {
        long ci = ptmd_walk_find_chunk(w, my_tcache - PTMD_CHUNK_HDR_SZ);
        size_t h, nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
        for (h = 0; ci >= 0 && h < nh; h++) {
            const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
            if ((uint64_t)ci >= hp->first_chunk && (uint64_t)ci < hp->first_chunk + hp->n_chunks && hp->arena != PTMD_NO_ARENA)
                my_arena = PTMD_W_ARENA(w, hp->arena)->address;
        }
        for (k = 0; my_arena && k + 8 <= lc->tls_size; k += 8)
            if (ptmd_rd64(block + k) == my_arena) {
                ar_off = (long)k;
                break;
            }
    }
    for (i = 0; i < first_scanned; i++) {
        ptmd_thread_rec *t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
        uint64_t tblock = t->pthread - lc->tls_offset, v = 0;
        if (!t->pthread || t->tcache) continue;
        if (ar_off >= 0 && ptmd_safe_read(&w->mem, tblock + (uint64_t)ar_off, &v, 8) == 0) t->arena = v;
        if (ptmd_safe_read(&w->mem, tblock + (uint64_t)tc_off, &v, 8) != 0 || !v || ptmd_tcache_is_dummy(w, v))
            continue;
        t->tcache = v;
        t->flags |= PTMD_TF_TLS;
        for (j = first_scanned; j < PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec); j++) {
            ptmd_thread_rec *s = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, j);
            if (s->tcache != v) continue;
            t->tcache = v;
            t->tcache_count = s->tcache_count;
            t->tcache_bytes = s->tcache_bytes;
            t->flags |= PTMD_TF_TLS | PTMD_TF_SCAN;
            /* the scanned record is now this thread's: drop it */
            *s = *PTMD_BUF_AT(&w->threads, ptmd_thread_rec, PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec) - 1);
            w->threads.len -= sizeof(ptmd_thread_rec);
            v = 0;
            break;
        }
        if (v) {
            /* a tcache the structural scan did not accept (it may be mid-change, or empty): the thread's
             * own pointer vouches for it, as with symbols */
            uint32_t c = 0;
            uint64_t b = 0;
            tcache_walk(w, v, 1, &c, &b);
            t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
            t->tcache_count = c;
            t->tcache_bytes = b;
            mark_struct(w, v);
        }
    }
    PTMD_UNUSED(self);
}

int ptmd_walk_threads(ptmd_walk *w, ptmd_err *err)
{
    if (!w->L->tcache_bins) return 0;
    if (ptmd_threads_collect(w) != 0) return ptmd_fail_sys(err, errno, "thread table", "mmap");
    return 0;
}

int ptmd_walk_tcaches(ptmd_walk *w, ptmd_err *err)
{
    size_t i, n, first_scanned;
    if (!w->L->tcache_bins) return 0;
    if (ptmd_walk_sort_heaps(w) != 0) return ptmd_fail_sys(err, errno, "heap index", "mmap");

    /* 1. every thread enumerated (ptmd_walk_threads): its tcache pointer from TLS */
    n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    for (i = 0; i < n; i++) {
        ptmd_thread_rec *t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
        uint32_t c = 0;
        uint64_t b = 0;
        if (!t->tcache) continue;
        /* an uninitialised tcache (all zero) is valid too: apply directly, anomalies recorded */
        tcache_walk(w, t->tcache, 1, &c, &b);
        t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
        t->tcache_count = c;
        t->tcache_bytes = b;
        mark_struct(w, t->tcache);
    }

    /* 2. tcache structs no thread pointer led to (threads not enumerable here, or no symbols) */
    first_scanned = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    n = PTMD_BUF_COUNT(&w->tcache_cands, uint64_t);
    for (i = 0; i < n; i++) {
        uint64_t user = *PTMD_BUF_AT(&w->tcache_cands, uint64_t, i) + PTMD_CHUNK_HDR_SZ;
        ptmd_thread_rec *t;
        uint32_t c = 0;
        uint64_t b = 0;
        if (find_thread_by_tcache(w, user)) continue;
        if (!tcache_walk(w, user, 0, NULL, NULL)) continue;
        tcache_walk(w, user, 1, &c, &b);
        mark_struct(w, user);
        t = ptmd_buf_push(&w->threads, sizeof(*t));
        if (!t) return ptmd_fail_sys(err, errno, "thread table", "mmap");
        t->tcache = user;
        t->flags = PTMD_TF_SCAN;
        t->tcache_count = c;
        t->tcache_bytes = b;
    }
    if (w->lc->tcache_tls < 0) adopt_scanned(w, first_scanned);
    return 0;
}
