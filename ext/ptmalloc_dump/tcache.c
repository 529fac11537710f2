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

/* Does chunk size `size` belong in tcache bin i? */
static int tc_size_fits(const ptmd_walk *w, int i, uint64_t size)
{
    if (i < w->L->tcache_bins) return size == ptmd_tidx2csize(i);
    return size > ptmd_tidx2csize(w->L->tcache_bins - 1);
}

/* Walks one tcache. With apply == 0 only checks it (strict: any fault fails); with apply != 0 marks
 * its entries' chunks as tcache and records anomalies. Returns 1 when it checks out. */
static int tcache_walk(ptmd_walk *w, uint64_t user, int apply, uint32_t *count_out, uint64_t *bytes_out)
{
    const ptmd_layout *L = w->L;
    tcache_image t;
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
            int good = r && !(r->word & PTMD_CF_FREE_BIT) &&
                       (ptmd_rec_state(r) == PTMD_ST_IN_USE || ptmd_rec_state(r) == PTMD_ST_TCACHE);
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
                uint64_t key_want = L->tcache_key_is_random ? w->tcache_key : user;
                if ((!L->tcache_key_is_random || w->have_tcache_key) && words[1] != key_want) {
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

int ptmd_walk_tcaches(ptmd_walk *w, ptmd_err *err)
{
    size_t i, n;
    if (!w->L->tcache_bins) return 0;
    if (ptmd_walk_sort_heaps(w) != 0) return ptmd_fail_sys(err, errno, "heap index", "mmap");

    /* 1. every thread we can enumerate: its tcache pointer from TLS */
    if (ptmd_threads_collect(w) != 0) return ptmd_fail_sys(err, errno, "thread table", "mmap");
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

    /* 2. tcache structs no thread pointer led to (threads not enumerable here) */
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
    return 0;
}
