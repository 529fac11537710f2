/* The tcaches of every thread. tcache chunks look in use to the arena; they are found through every
 * thread's `tcache` pointer (threads.c reads it from its static TLS), and by recognising tcache_perthread_structs among
 * in-use chunks by structure (counts, chained entries, keys). Another thread's tcache can change while
 * it is read: every read here is fault-free and every value is checked. */
#define _GNU_SOURCE
#include "capture/tcache.h"
#include "capture/threads.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

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

/* Records that the chunk ci is in bin i of thread `thread`'s tcache, at place n of its list. */
static void note_entry(ptmd_walk *w, long ci, uint32_t thread, int i, uint64_t n)
{
    ptmd_tcache_entry *e = ptmd_buf_push(&w->tcache_entries, sizeof(*e));
    if (!e) {
        w->tcache_entries_failed = 1;
        return;
    }
    e->chunk = (uint32_t)ci;
    e->thread = thread;
    e->bin = (uint16_t)i;
    e->position = (uint16_t)n;
    e->reserved = 0;
}

/* Walks one tcache. With apply == 0 only checks it (strict: any fault fails); with apply != 0 marks
 * its entries' chunks as tcache, records each as an entry of thread index `thread`, and records
 * anomalies. Returns 1 when it checks out. */
static int tcache_walk(ptmd_walk *w, uint64_t user, int apply, uint32_t thread, uint32_t *count_out,
                       uint64_t *bytes_out)
{
    const ptmd_layout *L = w->L;
    tcache_image t;
    uint64_t key_value = 0, *key = &key_value;
    int key_seen_v = 0, *key_seen = &key_seen_v;
    int i, nonempty = 0, ok = 1;
    uint32_t count = 0;
    uint64_t bytes = 0;

    if (!user || (user & PTMD_MALLOC_ALIGN_MASK) || L->tcache_struct_size > sizeof(t.raw)) return 0;
    if (ptmd_guarded_copy(w, user, t.raw, L->tcache_struct_size) != 0) return 0;
    for (i = 0; i < tc_bins(w); i++) {
        uint64_t want = tc_count(w, &t, i), e = tc_entry(w, &t, i), n = 0;
        if (want > PTMD_MAX_TCACHE_COUNT) { /* more than a count can be, or free slots past the fill */
            if (!apply) return 0;
            ptmd_walk_anomaly(w, PTMD_AN_TCACHE_COUNT, user, (uint64_t)i, PTMD_NO_ARENA);
            want = PTMD_MAX_TCACHE_COUNT;
            ok = 0;
        }
        if ((want == 0) != (e == 0)) {
            if (!apply) return 0;
            ptmd_walk_anomaly(w, PTMD_AN_TCACHE_COUNT, user, (uint64_t)i, PTMD_NO_ARENA);
            ok = 0;
        }
        if (e) nonempty = 1;
        while (e && n <= want) {
            uint64_t words[2], size;
            long ci = (e & PTMD_MALLOC_ALIGN_MASK) ? -1 : ptmd_walk_find_chunk(w, ptmd_mem2chunk(e));
            ptmd_chunk_rec *r = ci >= 0 ? PTMD_W_CHUNK(w, ci) : NULL;
            /* glibc 2.43's __libc_free caches mmapped chunks too (tcache_put_large) */
            int good = r && !(r->word & PTMD_CF_WORD(PTMD_CF_FREE_BIT)) &&
                       (ptmd_rec_state(r) == PTMD_ST_IN_USE || ptmd_rec_state(r) == PTMD_ST_TCACHE ||
                        (L->tcache_holds_mmapped && ptmd_rec_state(r) == PTMD_ST_MMAPPED));
            if (good && ptmd_guarded_copy(w, e, words, sizeof(words)) != 0) good = 0;
            size = r ? ptmd_rec_size(r) : 0;
            if (good && !tc_size_fits(w, i, size)) good = 0;
            if (!good) {
                if (!apply) return 0;
                ptmd_walk_anomaly(w, PTMD_AN_LIST_NOT_CHUNK, ptmd_mem2chunk(e), (uint64_t)i, PTMD_NO_ARENA);
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
                    ptmd_walk_anomaly(w, PTMD_AN_TCACHE_KEY, ptmd_mem2chunk(e), words[1], PTMD_NO_ARENA);
                    ok = 0;
                }
            }
            if (apply) {
                if (ptmd_rec_state(r) == PTMD_ST_TCACHE) {
                    ptmd_walk_anomaly(w, PTMD_AN_DUPLICATE, ptmd_mem2chunk(e), user, PTMD_NO_ARENA);
                    ok = 0;
                    break;
                }
                ptmd_rec_set_state(r, PTMD_ST_TCACHE);
                note_entry(w, ci, thread, i, n);
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
    if (!apply && !nonempty) return 0; /* an all-zero block proves nothing */
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
    long ci = ptmd_walk_find_chunk(w, ptmd_mem2chunk(user));
    if (ci >= 0 && ptmd_rec_state(PTMD_W_CHUNK(w, ci)) == PTMD_ST_IN_USE)
        PTMD_W_CHUNK(w, ci)->word |= PTMD_CF_WORD(PTMD_CF_TCACHE_STRUCT);
}

/* Thread i's `tcache` pointer as it is now, read again from its TLS block at tc_off (its first value
 * when that cannot be done); 0 when it has none. */
static uint64_t tcache_now(ptmd_walk *w, size_t i, long tc_off)
{
    const ptmd_thread_rec *t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
    return !t->pthread || tc_off < 0 ? t->tcache : ptmd_thread_tcache(w, t->pthread, tc_off);
}

/* Walks thread i's tcache (the pointer read from its TLS) and records what it holds. A thread that
 * exits runs tcache_thread_shutdown: it clears its `tcache` pointer first, then empties each list
 * without lowering its count, then frees the struct. So when the pointer is no longer the same
 * before or after the lists are read, the thread is exiting: it is marked so, and the count
 * mismatches its half-emptied lists show are not recorded as anomalies. The chunks read from its
 * lists stay tcache: they were there when read, on their way back to the arena. */
static void apply_thread_tcache(ptmd_walk *w, size_t i, long tc_off)
{
    uint64_t user = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i)->tcache;
    size_t mark = w->anomalies.len;
    uint32_t c = 0;
    uint64_t b = 0;
    int exiting = tcache_now(w, i, tc_off) != user;
    ptmd_thread_rec *t;
    if (!exiting) {
        /* an uninitialised tcache (all zero) is valid too: apply directly, anomalies recorded */
        tcache_walk(w, user, 1, (uint32_t)i, &c, &b);
        exiting = tcache_now(w, i, tc_off) != user;
        if (exiting) w->anomalies.len = mark;
    }
    t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
    if (exiting) t->flags |= PTMD_TF_EXITING;
    t->tcache_count = c;
    t->tcache_bytes = b;
    mark_struct(w, user);
}

/* Keeps in w->tcache_cands only the structs no thread pointer has led to that check out as tcaches
 * (checking them also learns tcache_key when there is no symbol for it). */
static void keep_valid_candidates(ptmd_walk *w)
{
    size_t i, k = 0, n = PTMD_BUF_COUNT(&w->tcache_cands, uint64_t);
    for (i = 0; i < n; i++) {
        uint64_t chunk = *PTMD_BUF_AT(&w->tcache_cands, uint64_t, i);
        if (find_thread_by_tcache(w, ptmd_chunk2mem(chunk))) continue;
        if (!tcache_walk(w, ptmd_chunk2mem(chunk), 0, 0, NULL, NULL)) continue;
        *PTMD_BUF_AT(&w->tcache_cands, uint64_t, k++) = chunk;
    }
    w->tcache_cands.len = k * sizeof(uint64_t);
}

static int is_candidate(ptmd_walk *w, uint64_t user)
{
    size_t i, n = PTMD_BUF_COUNT(&w->tcache_cands, uint64_t);
    for (i = 0; i < n; i++)
        if (ptmd_chunk2mem(*PTMD_BUF_AT(&w->tcache_cands, uint64_t, i)) == user) return 1;
    return 0;
}

/* Without symbols the TLS offsets of `tcache` and `thread_arena` are unknown: find them in the calling
 * thread's own libc TLS block (the word that holds one of the tcaches found by structure, and the word
 * that holds the arena that tcache was allocated from), then read every listed thread's tcache there
 * and walk it as with symbols. */
static void find_tls_tcaches(ptmd_walk *w)
{
    const ptmd_libc *lc = w->lc;
    uintptr_t block = ptmd_libc_tls_block_self(lc);
    size_t i, n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec), k;
    long tc_off = -1, ar_off = -1;
    uint64_t my_tcache = 0, my_arena = 0;
    /* the calling thread's own TLS: only where the walk reads this process */
    if (!w->src.in_place || !block || !lc->tls_size || !PTMD_BUF_COUNT(&w->tcache_cands, uint64_t)) return;
    for (k = 0; k + 8 <= lc->tls_size && tc_off < 0; k += 8) {
        uint64_t v = ptmd_mapped_word(w, block + k);
        if (v && is_candidate(w, v)) {
            tc_off = (long)k;
            my_tcache = v;
        }
    }
    if (tc_off < 0) return;
    /* the arena the tcache struct lives in is the thread's arena */
    {
        long ci = ptmd_walk_find_chunk(w, ptmd_mem2chunk(my_tcache));
        size_t h, nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
        for (h = 0; ci >= 0 && h < nh; h++) {
            const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
            if ((uint64_t)ci >= hp->first_chunk && (uint64_t)ci < hp->first_chunk + hp->n_chunks &&
                hp->arena != PTMD_NO_ARENA)
                my_arena = PTMD_W_ARENA(w, hp->arena)->address;
        }
        for (k = 0; my_arena && k + 8 <= lc->tls_size; k += 8)
            if (ptmd_mapped_word(w, block + k) == my_arena) {
                ar_off = (long)k;
                break;
            }
    }
    for (i = 0; i < n; i++) {
        ptmd_thread_rec *t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i);
        uint64_t v = 0;
        if (!t->pthread || t->tcache) continue;
        if (ar_off >= 0 && ptmd_guarded_copy(w, t->pthread - lc->tls_offset + (uint64_t)ar_off, &v, 8) == 0)
            t->arena = v;
        if (!(v = ptmd_thread_tcache(w, t->pthread, tc_off))) continue;
        t->tcache = v;
        t->flags |= PTMD_TF_TLS | (is_candidate(w, v) ? PTMD_TF_SCAN : 0);
        /* a tcache the structural check did not accept (mid-change, or empty): the thread's own
         * pointer vouches for it, as with symbols */
        apply_thread_tcache(w, i, tc_off);
    }
}

int ptmd_walk_tcaches(ptmd_walk *w, ptmd_err *err)
{
    size_t i, n;
    if (!w->L->tcache_bins) return 0;
    if (ptmd_walk_sort_heaps(w) != 0) return ptmd_fail_sys(err, errno, "heap index", "mmap");

    /* 1. every thread enumerated (ptmd_walk_threads): its tcache pointer from TLS */
    n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    for (i = 0; i < n; i++)
        if (PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i)->tcache) apply_thread_tcache(w, i, w->lc->tcache_tls);

    /* 2. without the `tcache` symbol, the same through the TLS offset the structs found reveal */
    keep_valid_candidates(w);
    if (w->lc->tcache_tls < 0) find_tls_tcaches(w);

    /* 3. tcache structs no thread pointer led to (threads not enumerable here, or exiting) */
    n = PTMD_BUF_COUNT(&w->tcache_cands, uint64_t);
    for (i = 0; i < n; i++) {
        uint64_t user = ptmd_chunk2mem(*PTMD_BUF_AT(&w->tcache_cands, uint64_t, i));
        size_t mark = w->anomalies.len;
        ptmd_thread_rec *t;
        uint32_t c = 0;
        uint64_t b = 0;
        int exiting;
        if (find_thread_by_tcache(w, user)) continue;
        /* its entries name the thread record pushed below */
        tcache_walk(w, user, 1, (uint32_t)PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec), &c, &b);
        /* it checked out just before: if it no longer does, it changed while read. No listed thread
         * points at it, so its thread has cleared its `tcache` pointer and is emptying it on exit. */
        exiting = w->anomalies.len != mark && !tcache_walk(w, user, 0, 0, NULL, NULL);
        if (exiting) w->anomalies.len = mark;
        mark_struct(w, user);
        t = ptmd_buf_push(&w->threads, sizeof(*t));
        if (!t) return ptmd_fail_sys(err, errno, "thread table", "mmap");
        t->tcache = user;
        t->flags = PTMD_TF_SCAN | (exiting ? PTMD_TF_EXITING : 0);
        t->tcache_count = c;
        t->tcache_bytes = b;
    }
    if (w->tcache_entries_failed) return ptmd_fail_sys(err, ENOMEM, "tcache entries", "mmap");
    return 0;
}
