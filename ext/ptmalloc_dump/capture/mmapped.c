/* Mmapped chunks: no arena lists them, so they are found among the process's anonymous private
 * read-write mappings. The kernel merges neighbouring mappings, so every resident page start is a
 * candidate header. Each header is validated the way munmap_chunk checks it (block and total
 * page-aligned, IS_MMAPPED only), and the result is checked against mp_.n_mmaps and
 * mp_.mmapped_mem. Headers are read fault-free: another thread may munmap a chunk at any moment.
 *
 * memalign and its kin above the mmap threshold (_int_memalign) take an mmapped chunk and move its
 * header to mem2chunk (ALIGN_UP (mem, alignment)), with prev_size the offset from the mapping's
 * start; the header malloc wrote at that start stays there, stale, and still reads as a chunk of
 * the whole mapping. So a header found at a page start is only the chunk when none of the places
 * an aligned header can be holds one that describes the same mapping. */
#define _GNU_SOURCE
#include "capture/ruby_pages.h"
#include "capture/mmapped.h"
#include "format/index.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define PTMD_SCAN_WINDOW 512

typedef struct {
    uint64_t start, end;
} range;

/* Offsets inside a page where a memalign'd mmapped chunk header can sit: alignment - CHUNK_HDR_SZ for
 * each alignment from 64 to the page (4 KiB; 16 KiB or 64 KiB on arm64 kernels), at most 11 of them. */
#define N_ALIGNED 11
static size_t aligned_offsets(uint64_t page_size, uintptr_t base, uintptr_t *out)
{
    uint64_t a;
    size_t n = 0;
    for (a = 64; a <= page_size && n < N_ALIGNED; a <<= 1) out[n++] = base + a - PTMD_CHUNK_HDR_SZ;
    return n;
}

/* Ranges are sorted and merged before the scan (ranges_sort), so lookups are a binary search. */
static int excluded(const ptmd_buf *ex, uint64_t lo, uint64_t hi)
{
    const range *r = (const range *)(const void *)ex->base;
    size_t a = 0, b = PTMD_BUF_COUNT(ex, range);
    while (a < b) { /* first range ending after lo */
        size_t mid = a + (b - a) / 2;
        if (r[mid].end <= lo) a = mid + 1;
        else b = mid;
    }
    return a < PTMD_BUF_COUNT(ex, range) && r[a].start < hi;
}

static int by_range_start(const void *a, const void *b, void *ctx)
{
    uint64_t x = ((const range *)a)->start, y = ((const range *)b)->start;
    PTMD_UNUSED(ctx);
    return x < y ? -1 : x > y;
}

/* Sorts, then merges overlapping or touching ranges. */
static void ranges_sort(ptmd_buf *ex)
{
    range *r = (range *)(void *)ex->base;
    size_t n = PTMD_BUF_COUNT(ex, range), i, k = 0;
    if (n < 2) return;
    ptmd_sort(r, n, sizeof(range), by_range_start, NULL);
    for (i = 1; i < n; i++) {
        if (r[i].start <= r[k].end) {
            if (r[i].end > r[k].end) r[k].end = r[i].end;
        } else {
            r[++k] = r[i];
        }
    }
    ex->len = (k + 1) * sizeof(range);
}

static int add_range(ptmd_buf *ex, uint64_t start, uint64_t end)
{
    range r = { start, end };
    return ptmd_buf_append(ex, &r, sizeof(r));
}

/* The chunk's offset in its mapping (mmap_base_offset): prev_size, less the MMAP_HP bit from 2.43. */
static uint64_t base_offset(const ptmd_walk *w, uint64_t prev_size)
{
    return w->L->mmap_chunk_tail_hdr ? prev_size & ~(uint64_t)PTMD_MMAP_HP : prev_size;
}

/* munmap_chunk's own checks, plus: the block lies inside the mapping [vs, ve). Returns the mapping's
 * length: mmap_size (), offset + size, and since 2.43 the trailing CHUNK_HDR_SZ too. */
static uint64_t valid_header(const ptmd_walk *w, uint64_t q, const uint64_t hdr[2], uint64_t vs, uint64_t ve)
{
    uint64_t ps = base_offset(w, hdr[0]), sw = hdr[1], sz = ptmd_chunksize(sw), block = q - ps;
    uint64_t total = ps + sz + (w->L->mmap_chunk_tail_hdr ? PTMD_CHUNK_HDR_SZ : 0);
    uint64_t mask = w->page_size - 1, mem = q + PTMD_CHUNK_HDR_SZ, mis = mem & mask;
    /* an aligned chunk that realloc shrank (mremap_chunk) can be smaller than a page, not its mapping */
    if ((sw & PTMD_SIZE_BITS) != PTMD_IS_MMAPPED || sz < PTMD_MINSIZE || total < w->page_size) return 0;
    if (ps > q || block < vs || (block & mask) || (total & mask) || total < sz) return 0;
    if (block + total > ve || block + total < block) return 0;
    if (mis & (mis - 1)) return 0; /* mem & (pagesize - 1) must be 0 or a power of two */
    return total;
}

/* Without the Ruby pass's list of Ruby's object pages, a header found at a page start is checked
 * against the structure of the object page that would hold it: a page body (ruby_page_size bytes,
 * aligned to its size) begins with a pointer to the GC's struct heap_page, and that struct holds the
 * body's address or its first slot's (at most a slot and the header past it) among its first words
 * (measured: Ruby 3.1's word 4, start; Ruby 3.4's words 4 and 5, body and start). A chunk's own
 * header there cannot pass: prev_size is 0 or an offset below a page, and no Ruby page overlaps a
 * chunk. */
/* Whether the page holding addr was ever touched: reading one that was not would map the zero page
 * there and change what pagemap reports (the body below a header is often the untouched end of the
 * mapping before it). */
static int touched(ptmd_walk *w, uint64_t addr)
{
    uint8_t f = 0;
    return ptmd_source_pages(&w->src, addr & ~(uint64_t)(w->page_size - 1), 1, &f) == 0 &&
           (f & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED));
}

static int in_ruby_page(ptmd_walk *w, uint64_t addr)
{
    uint64_t body, page, words[PTMD_RUBY_RECORD_WORDS];
    size_t i;
    if (!w->ruby_page_size) return 0;
    body = addr & ~(w->ruby_page_size - 1);
    if (!touched(w, body) || ptmd_guarded_copy(w, body, &page, sizeof(page)) != 0 ||
        !ptmd_ruby_page_record_ok(page, body, w->ruby_page_size))
        return 0;
    if (!touched(w, page) || ptmd_guarded_copy(w, page, words, sizeof(words)) != 0) return 0;
    for (i = 0; i < PTMD_RUBY_RECORD_WORDS; i++)
        if (words[i] >= body && words[i] - body <= PTMD_RUBY_FIRST_SLOT_MAX) return 1;
    return 0;
}

static int push_rec(ptmd_walk *w, uint64_t addr, uint64_t size, int state, ptmd_err *err)
{
    ptmd_chunk_rec *c = ptmd_buf_push(&w->chunks, sizeof(*c));
    if (!c) return ptmd_fail_sys(err, errno, "chunk table", "mmap");
    c->addr = addr;
    c->word = (size & PTMD_SIZE_MASK) | (uint64_t)state;
    return 0;
}

/* One heap record for the mapping: the lead of a memalign'd chunk (meta), the chunk, and from 2.43
 * the next-chunk header slot mmap_set_chunk leaves at the end (meta). */
static int record_chunk(ptmd_walk *w, uint64_t block, uint64_t q, uint64_t total, ptmd_err *err)
{
    ptmd_heap_rec *h = ptmd_buf_push(&w->heaps, sizeof(*h));
    const uint64_t tail = w->L->mmap_chunk_tail_hdr ? PTMD_CHUNK_HDR_SZ : 0;
    if (!h) return ptmd_fail_sys(err, errno, "heap table", "mmap");
    h->start = block;
    h->end = h->reserved_end = block + total;
    h->arena = PTMD_NO_ARENA;
    h->kind = PTMD_HEAP_MMAPPED_CHUNK;
    h->first_chunk = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec);
    h->n_chunks = (q > block ? 1 : 0) + 1 + (tail ? 1 : 0);
    if (q > block && push_rec(w, block, q - block, PTMD_ST_META, err) != 0) return -1;
    if (push_rec(w, q, block + total - tail - q, PTMD_ST_MMAPPED, err) != 0) return -1;
    if (tail && push_rec(w, block + total - tail, tail, PTMD_ST_META, err) != 0) return -1;
    return 0;
}

/* Where _int_memalign can have put the header of an aligned chunk in the mapping at block (page
 * aligned, total bytes long): mem2chunk (ALIGN_UP (block + 16, alignment)) for each power-of-two
 * alignment that fits, and before 2.43, alignment further on when that lead is under MINSIZE. */
static size_t aligned_candidates(const ptmd_walk *w, uint64_t block, uint64_t total, uintptr_t *out, size_t cap)
{
    uint64_t a;
    size_t n = 0;
    /* a is a power of two below total, which the caller bounds by the mapping */
    for (a = PTMD_MINSIZE; a && a < total && n + 2 <= cap; a <<= 1) {
        uint64_t q = ((block + PTMD_CHUNK_HDR_SZ + a - 1) & ~(a - 1)) - PTMD_CHUNK_HDR_SZ;
        if (!w->L->mmap_chunk_tail_hdr && q - block < PTMD_MINSIZE) q += a;
        if (q > block && q + PTMD_MINSIZE <= block + total && (n == 0 || out[n - 1] != q)) out[n++] = q;
    }
    return n;
}

/* The first of the k candidates whose header names the mapping at block: its offset is its distance
 * from block and its extent fits. Sets *total to that extent; 0 when none does. */
static uint64_t own_header(ptmd_walk *w, uint64_t block, const uintptr_t *cand, size_t k, uint64_t *total, uint64_t vs,
                           uint64_t ve)
{
    uint64_t hdrs[64][2], t;
    unsigned char ok[64];
    size_t i;
    ptmd_guarded_copy_many(w, cand, k, 16, hdrs, ok);
    for (i = 0; i < k; i++)
        if (ok[i] && base_offset(w, hdrs[i][0]) == cand[i] - block &&
            (t = valid_header(w, cand[i], hdrs[i], vs, ve)) != 0) {
            *total = t;
            return cand[i];
        }
    return 0;
}

/* The chunk in the mapping whose page-start header (offset 0) says it is *total bytes long: the
 * first aligned candidate whose header names this mapping, else block itself. A realloc of an
 * aligned chunk (mremap_chunk) resizes the mapping and leaves the stale header's size as it was:
 * the candidate's own extent is the mapping's, and *total becomes it. A candidate on a page that
 * was never touched is not read: reading it would map the zero page and change what pagemap
 * reports. */
static uint64_t aligned_header(ptmd_walk *w, uint64_t block, uint64_t *total, uint64_t vs, uint64_t ve)
{
    uintptr_t cand[64];
    uint8_t f[64];
    size_t n = aligned_candidates(w, block, *total, cand, 64), i, k = 0;
    uint64_t q, m, last;
    for (i = 0; i < n; i++)
        if ((cand[i] & ~(uint64_t)(w->page_size - 1)) == block || touched(w, cand[i])) cand[k++] = cand[i];
    if ((q = own_header(w, block, cand, k, total, vs, ve)) != 0) return q;
    /* mremap_chunk may move the mapping (glibc 2.36 malloc.c, MREMAP_MAYMOVE) and keeps the chunk's
     * offset, which _int_memalign chose for the old block: above a page of alignment the header is
     * then at the end of any page of the new one (offset m * pagesize - CHUNK_HDR_SZ). The offset is
     * below the stale header's extent, which is the size before the first remap. Nothing writes the
     * lead after the mapping is made but alloc_perturb (the whole request, one byte repeated), so a
     * mapping whose first user bytes are not one byte repeated is block's own chunk: its pages are
     * not swept. */
    if (ptmd_guarded_copy(w, block + PTMD_CHUNK_HDR_SZ, f, 16) != 0) return block;
    for (i = 1; i < 16; i++)
        if (f[i] != f[0]) return block;
    last = *total / w->page_size;
    if (last > (ve - block) / w->page_size) last = (ve - block) / w->page_size;
    for (m = 1; m <= last; m += n) {
        n = last - m + 1 < 64 ? (size_t)(last - m + 1) : 64;
        if (ptmd_source_pages(&w->src, block + (m - 1) * w->page_size, n, f) != 0) break;
        for (i = 0, k = 0; i < n; i++)
            if (f[i] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED))
                cand[k++] = block + (m + i) * w->page_size - PTMD_CHUNK_HDR_SZ;
        if ((q = own_header(w, block, cand, k, total, vs, ve)) != 0) return q;
    }
    return block;
}

/* Scans [vs, ve) page by page; returns -1 on a hard error. */
static int scan_mapping(ptmd_walk *w, uint64_t vs, uint64_t ve, const ptmd_buf *ex, uint64_t *found, uint64_t *bytes,
                        ptmd_err *err)
{
    uint8_t flags[PTMD_SCAN_WINDOW];
    uintptr_t addrs[PTMD_SCAN_WINDOW];
    uint64_t hdrs[PTMD_SCAN_WINDOW][2];
    unsigned char ok[PTMD_SCAN_WINDOW];
    uint64_t pos = vs;

    while (pos < ve) {
        size_t npages = (ve - pos) / w->page_size, i, n = 0, k;
        uint64_t jump = 0;
        if (npages > PTMD_SCAN_WINDOW) npages = PTMD_SCAN_WINDOW;
        if (npages == 0) break;
        ptmd_source_pages(&w->src, pos, npages, flags);
        for (i = 0; i < npages; i++) {
            uint64_t p = pos + i * w->page_size;
            if ((flags[i] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED)) && !excluded(ex, p, p + w->page_size))
                addrs[n++] = p;
        }
        ptmd_guarded_copy_many(w, addrs, n, 16, hdrs, ok);
        for (i = 0; i < n && !jump; i++) {
            uint64_t total, q;
            if (!ok[i]) continue;
            if (base_offset(w, hdrs[i][0]) == 0 && (hdrs[i][1] & PTMD_SIZE_BITS) == PTMD_IS_MMAPPED) {
                /* a stale header whose extent no longer fits (mremap shrank its mapping) still
                 * bounds where the aligned chunk can be */
                uint64_t stale = valid_header(w, addrs[i], hdrs[i], vs, ve);
                total = stale ? stale : ptmd_chunksize(hdrs[i][1]);
                /* any size word can sit at a page start: no chunk reaches past its mapping */
                if (total > ve - addrs[i]) total = ve - addrs[i];
                q = aligned_header(w, addrs[i], &total, vs, ve);
                if (q == addrs[i] && !stale) continue;
                if (in_ruby_page(w, addrs[i])) continue;
                if (record_chunk(w, addrs[i], q, total, err) != 0) return -1;
                (*found)++;
                *bytes += total;
                jump = addrs[i] + total;
            } else if (hdrs[i][0] == 0 && hdrs[i][1] == 0) {
                /* an untouched page start: maybe the lead of a memalign'd chunk */
                uintptr_t sub[N_ALIGNED];
                uint64_t sh[N_ALIGNED][2];
                unsigned char sok[N_ALIGNED];
                size_t na = aligned_offsets(w->page_size, addrs[i], sub);
                ptmd_guarded_copy_many(w, sub, na, 16, sh, sok);
                for (k = 0; k < na; k++) {
                    if (sok[k] && base_offset(w, sh[k][0]) && (total = valid_header(w, sub[k], sh[k], vs, ve))) {
                        uint64_t block = sub[k] - base_offset(w, sh[k][0]);
                        if (in_ruby_page(w, block)) break;
                        if (record_chunk(w, block, sub[k], total, err) != 0) return -1;
                        (*found)++;
                        *bytes += total;
                        jump = block + total;
                        break;
                    }
                }
            }
        }
        pos = jump ? jump : pos + npages * w->page_size;
    }
    return 0;
}

/* Where the scan of mapping m starts. A thread's stack block holds its stack (any data at all) with
 * struct pthread at the very top (allocate_stack, nptl/allocatestack.c: pd = (mem + size -
 * TLS_TCB_SIZE) & ~align) and its guard page below; it is not scanned, but mappings the kernel merged
 * above it are: a chunk mmapped right above a stack shares its VMA. The main thread's struct pthread
 * is no stack: ld.so's minimal malloc placed it in a few anonymous pages (_dl_allocate_tls_storage),
 * and small mmapped chunks merge with them on either side (mmap_threshold=4096), so that mapping is
 * scanned whole, the page of the struct excluded. */
static uint64_t scan_start(const ptmd_walk *w, const ptmd_map *m, uint32_t pid)
{
    size_t t, nt = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    uint64_t lo = m->start;
    for (t = 0; t < nt; t++) {
        const ptmd_thread_rec *th = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, t);
        uint64_t top = (th->pthread | (w->page_size - 1)) + 1;
        if (th->pthread >= m->start && th->pthread < m->end && th->tid != pid && top > lo) lo = top;
    }
    return lo;
}

/* mp_.mmapped_mem against the mappings found. glibc 2.43's mremap_chunk adds new_size - size -
 * offset, which counts the old mapping's trailing CHUNK_HDR_SZ as growth: every remap leaves
 * mmapped_mem 16 bytes above the mappings, even after the chunk is freed. */
static int mmapped_mem_agrees(const ptmd_walk *w, uint64_t bytes)
{
    if (!w->L->mremap_overcounts) return bytes == w->mmapped_mem;
    return w->mmapped_mem >= bytes && (w->mmapped_mem - bytes) % PTMD_CHUNK_HDR_SZ == 0;
}

int ptmd_walk_mmapped(ptmd_walk *w, ptmd_err *err)
{
    ptmd_buf ex = { 0 };
    uint64_t found = 0, bytes = 0, lo;
    /* the process dumped: a snapshot child describes its parent */
    uint32_t pid = (uint32_t)(!w->src.in_place ? w->src.pid : w->given_threads ? getppid() : getpid());
    size_t i, n;
    int rc = -1;

    /* room for the records up front, so our own buffers stay put while mappings are read */
    if (ptmd_buf_reserve(&w->heaps, (w->n_mmaps + 256) * sizeof(ptmd_heap_rec)) != 0 ||
        ptmd_buf_reserve(&w->chunks, (w->n_mmaps + 256) * 3 * sizeof(ptmd_chunk_rec)) != 0 ||
        ptmd_buf_reserve(&w->anomalies, 64 * sizeof(ptmd_anomaly_rec)) != 0 ||
        ptmd_buf_reserve(&ex, (PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec) + PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec) +
                               PTMD_BUF_COUNT(&w->exclude, range) + 64) *
                                  sizeof(range)) != 0) {
        rc = ptmd_fail_sys(err, errno, "mmapped-chunk scan", "mmap");
        goto out;
    }
    n = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    for (i = 0; i < n; i++) {
        const ptmd_heap_rec *h = PTMD_W_HEAP(w, i);
        if (add_range(&ex, h->start, h->reserved_end) != 0) goto oom;
    }
    n = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    for (i = 0; i < n; i++) {
        uint64_t t = PTMD_BUF_AT(&w->threads, ptmd_thread_rec, i)->pthread;
        if (t && add_range(&ex, t, t + 1) != 0) goto oom;
    }
    if (w->src.in_place) {
        /* the dump's own buffers, in this process only: another's memory at those addresses is its own */
        const ptmd_buf *own[] = { PTMD_WALK_BUFFERS(w), &w->maps.text, &w->maps.maps, &ex };
        for (i = 0; i < sizeof(own) / sizeof(own[0]); i++)
            if (own[i]->base &&
                add_range(&ex, (uint64_t)(uintptr_t)own[i]->base, (uint64_t)(uintptr_t)own[i]->base + own[i]->cap) != 0)
                goto oom;
        if (w->src.pagemap.entries &&
            add_range(&ex, (uint64_t)(uintptr_t)w->src.pagemap.entries,
                      (uint64_t)(uintptr_t)w->src.pagemap.entries + w->src.pagemap.cap * 8) != 0)
            goto oom;
    }
    n = PTMD_BUF_COUNT(&w->exclude, range);
    for (i = 0; i < n; i++) {
        const range *r = PTMD_BUF_AT(&w->exclude, range, i);
        if (add_range(&ex, r->start, r->end) != 0) goto oom;
    }
    ranges_sort(&ex);
    /* mappings as they are now (the walk's own scratch has been mapped since prepare) */
    if (ptmd_source_maps_again(&w->src, &w->maps, err) < 0) goto out;
    for (i = 0; i < w->maps.count; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&w->maps.maps, ptmd_map, i);
        if (m->kind != PTMD_MAPKIND_ANON) continue;
        if ((m->prot & (PTMD_MAP_R | PTMD_MAP_W | PTMD_MAP_PRIVATE)) != (PTMD_MAP_R | PTMD_MAP_W | PTMD_MAP_PRIVATE))
            continue;
        if ((lo = scan_start(w, m, pid)) < m->end && scan_mapping(w, lo, m->end, &ex, &found, &bytes, err) != 0)
            goto out;
    }
    if (w->have_mp && (found != w->n_mmaps || !mmapped_mem_agrees(w, bytes)))
        ptmd_walk_anomaly(w, PTMD_AN_MMAPPED_MISMATCH, (found << 32) | (w->n_mmaps & 0xffffffffu), bytes,
                          PTMD_NO_ARENA);
    rc = 0;
    goto out;
oom:
    rc = ptmd_fail_sys(err, errno, "mmapped-chunk scan", "mmap");
out:
    ptmd_buf_release(&ex);
    return rc;
}
