/* Page accounting and report figures over a view. */
#include "analysis/analysis.h"
#include "format/glibc.h"

#include <string.h>

#define PTMD_MALLOC_CHUNK_SIZE 48 /* sizeof (struct malloc_chunk) on 64-bit, used by mtrim */

const char *const ptmd_page_class_names[PTMD_PC_COUNT] = { PTMD_PAGE_CLASSES(PTMD_ENUM_NAME) };

static uint64_t page_size_of(const ptmd_view *v)
{
    return v->meta && v->meta->page_size ? v->meta->page_size : 4096;
}

void ptmd_page_usage_fill(const ptmd_view *v, ptmd_page_usage *usage)
{
    uint64_t ps = page_size_of(v);
    size_t h;
    memset(usage, 0, v->n_pages * sizeof(*usage));
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t i;
        for (i = hp->first_chunk; i < hp->first_chunk + hp->n_chunks; i++) {
            const ptmd_chunk_rec *c = &v->chunks[i];
            uint64_t lo = c->addr, hi = c->addr + ptmd_rec_size(c), p;
            int st = ptmd_rec_state(c);
            if (hi <= lo || lo < hp->page_base) continue;
            for (p = (lo - hp->page_base) / ps; p < hp->n_pages; p++) {
                uint64_t pl = hp->page_base + p * ps, ph = pl + ps;
                uint32_t ov;
                ptmd_page_usage *u = &usage[hp->first_page + p];
                if (pl >= hi) break;
                ov = (uint32_t)((ph < hi ? ph : hi) - (pl > lo ? pl : lo));
                if (ptmd_state_is_allocated(st)) u->in_use += ov;
                else if (st == PTMD_ST_TOP) u->top += ov;
                else if (st == PTMD_ST_META) u->meta += ov;
                else u->free += ov;
            }
        }
    }
}

ptmd_page_class ptmd_page_classify(const ptmd_page_usage *u, uint8_t flags, uint64_t page_size)
{
    uint32_t free = u->free + u->top;
    if (flags & PTMD_PAGE_SWAPPED) return PTMD_PC_SWAPPED;
    if (!(flags & PTMD_PAGE_PRESENT)) return u->in_use ? PTMD_PC_UNTOUCHED : PTMD_PC_RELEASED;
    if (!u->in_use && !free) return PTMD_PC_META;
    if (!u->in_use) return u->free ? PTMD_PC_FREE_RESIDENT : PTMD_PC_TOP;
    if (!free) return PTMD_PC_IN_USE;
    if ((uint64_t)u->in_use * 10 < page_size) return PTMD_PC_PINNED;
    return PTMD_PC_MIXED;
}

/* Resident bytes of [lo, hi) inside heap hp. */
static uint64_t resident_in(const ptmd_view *v, const ptmd_heap_rec *hp, uint64_t lo, uint64_t hi)
{
    uint64_t ps = page_size_of(v), r = 0, p;
    if (hi <= lo || lo < hp->page_base) return 0;
    for (p = (lo - hp->page_base) / ps; p < hp->n_pages; p++) {
        uint64_t pl = hp->page_base + p * ps, ph = pl + ps;
        if (pl >= hi) break;
        if (v->pages[hp->first_page + p] & PTMD_PAGE_PRESENT) r += (ph < hi ? ph : hi) - (pl > lo ? pl : lo);
    }
    return r;
}

static void keep_largest(ptmd_free_run *out, size_t n, size_t *have, const ptmd_free_run *r)
{
    size_t i;
    if (*have < n) out[(*have)++] = *r;
    else if (r->resident > out[n - 1].resident) out[n - 1] = *r;
    else return;
    /* bubble the new entry up: n is small */
    for (i = *have - 1; i > 0 && out[i].resident > out[i - 1].resident; i--) {
        ptmd_free_run t = out[i];
        out[i] = out[i - 1];
        out[i - 1] = t;
    }
}

size_t ptmd_largest_free_runs(const ptmd_view *v, ptmd_free_run *out, size_t n)
{
    size_t have = 0, h;
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t i, end = hp->first_chunk + hp->n_chunks;
        ptmd_free_run run;
        int open = 0;
        for (i = hp->first_chunk; i <= end; i++) {
            int is_free = i < end && ptmd_state_is_free(ptmd_rec_state(&v->chunks[i]));
            if (is_free) {
                const ptmd_chunk_rec *c = &v->chunks[i];
                if (!open) {
                    memset(&run, 0, sizeof(run));
                    run.start = c->addr;
                    run.heap = (uint32_t)h;
                    open = 1;
                }
                run.end = c->addr + ptmd_rec_size(c);
                run.chunks++;
            } else if (open) {
                run.resident = resident_in(v, hp, run.start, run.end);
                if (run.resident && n) keep_largest(out, n, &have, &run);
                open = 0;
            }
        }
    }
    return have;
}

size_t ptmd_pinned_pages(const ptmd_view *v, const ptmd_page_usage *usage, ptmd_pinned_page *out, size_t n,
                         uint64_t *pinned_bytes)
{
    uint64_t ps = page_size_of(v);
    size_t total = 0, have = 0, h;
    *pinned_bytes = 0;
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t p, ci = hp->first_chunk, cend = hp->first_chunk + hp->n_chunks;
        for (p = 0; p < hp->n_pages; p++) {
            const ptmd_page_usage *u = &usage[hp->first_page + p];
            uint64_t pl = hp->page_base + p * ps, ph = pl + ps;
            ptmd_pinned_page pg;
            size_t k;
            if (ptmd_page_classify(u, v->pages[hp->first_page + p], ps) != PTMD_PC_PINNED) continue;
            total++;
            *pinned_bytes += ps;
            /* the chunks of this heap are in address order: advance to those touching the page */
            while (ci < cend && v->chunks[ci].addr + ptmd_rec_size(&v->chunks[ci]) <= pl) ci++;
            memset(&pg, 0, sizeof(pg));
            pg.address = pl;
            pg.heap = (uint32_t)h;
            pg.in_use = u->in_use;
            for (k = ci; k < cend && v->chunks[k].addr < ph; k++) {
                if (!ptmd_state_is_allocated(ptmd_rec_state(&v->chunks[k]))) continue;
                if (!pg.n_chunks) pg.first_chunk = k;
                pg.n_chunks++;
            }
            if (have < n) out[have++] = pg;
            else if (n && pg.in_use < out[n - 1].in_use) out[n - 1] = pg;
            else continue;
            for (k = have - 1; k > 0 && out[k].in_use < out[k - 1].in_use; k--) {
                ptmd_pinned_page t = out[k];
                out[k] = out[k - 1];
                out[k - 1] = t;
            }
        }
    }
    return total;
}

/* Resident bytes madvise(MADV_DONTNEED) would drop from a free chunk [lo, lo+size) (mtrim). */
static uint64_t trim_interior(const ptmd_view *v, const ptmd_heap_rec *hp, uint64_t lo, uint64_t size)
{
    uint64_t ps = page_size_of(v), psm1 = ps - 1, aligned, len;
    if (size <= psm1 + PTMD_MALLOC_CHUNK_SIZE) return 0;
    aligned = (lo + PTMD_MALLOC_CHUNK_SIZE + psm1) & ~psm1;
    len = size - (aligned - lo);
    if (len <= psm1) return 0;
    return resident_in(v, hp, aligned, aligned + (len & ~psm1));
}

void ptmd_trim_estimate(const ptmd_view *v, uint64_t *per_arena)
{
    uint64_t ps = page_size_of(v);
    size_t h;
    memset(per_arena, 0, v->n_arenas * sizeof(*per_arena));
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t i, end = hp->first_chunk + hp->n_chunks, run_lo = 0, run_size = 0;
        if (hp->arena >= v->n_arenas) continue;
        /* malloc_consolidate merges fastbin chunks with free neighbours (tcache chunks stay): so
         * take runs of adjacent arena-free chunks; a run that reaches top joins it */
        for (i = hp->first_chunk; i <= end; i++) {
            int st = i < end ? ptmd_rec_state(&v->chunks[i]) : -1;
            int arena_free =
                st == PTMD_ST_FASTBIN || st == PTMD_ST_UNSORTED || st == PTMD_ST_SMALLBIN || st == PTMD_ST_LARGEBIN;
            if (arena_free) {
                if (!run_size) run_lo = v->chunks[i].addr;
                run_size += ptmd_rec_size(&v->chunks[i]);
                continue;
            }
            if (st == PTMD_ST_TOP) {
                const ptmd_chunk_rec *top = &v->chunks[i];
                uint64_t top_lo = run_size ? run_lo : top->addr, top_size = ptmd_rec_size(top) + run_size;
                /* systrim (main arena only): top shrinks to MINSIZE + 1 rounded up to a page */
                if (v->arenas[hp->arena].flags & PTMD_AF_MAIN) {
                    uint64_t area = top_size - PTMD_MINSIZE - 1, extra = area & ~(ps - 1);
                    if (top_size > PTMD_MINSIZE + 1 && extra)
                        per_arena[hp->arena] += resident_in(v, hp, top_lo + top_size - extra, top_lo + top_size);
                }
                run_size = 0;
                continue;
            }
            if (run_size) per_arena[hp->arena] += trim_interior(v, hp, run_lo, run_size);
            run_size = 0;
        }
    }
}

void ptmd_free_histogram(const ptmd_view *v, uint64_t *counts, uint64_t *bytes)
{
    size_t i;
    memset(counts, 0, PTMD_HIST_BUCKETS * sizeof(*counts));
    memset(bytes, 0, PTMD_HIST_BUCKETS * sizeof(*bytes));
    for (i = 0; i < v->n_chunks; i++) {
        const ptmd_chunk_rec *c = &v->chunks[i];
        int st = ptmd_rec_state(c), k;
        uint64_t size = ptmd_rec_size(c);
        if (!ptmd_state_is_free(st) || st == PTMD_ST_TOP || !size) continue;
        k = 63 - __builtin_clzll(size);
        if (k >= PTMD_HIST_BUCKETS) k = PTMD_HIST_BUCKETS - 1;
        counts[k]++;
        bytes[k] += size;
    }
}

void ptmd_page_class_counts(const ptmd_view *v, const ptmd_page_usage *usage, uint64_t *per_heap,
                            uint64_t pages[PTMD_PC_COUNT], uint64_t shared[PTMD_PC_COUNT])
{
    uint64_t ps = page_size_of(v);
    size_t h;
    memset(per_heap, 0, v->n_heaps * PTMD_PC_COUNT * sizeof(uint64_t));
    memset(pages, 0, PTMD_PC_COUNT * sizeof(uint64_t));
    memset(shared, 0, PTMD_PC_COUNT * sizeof(uint64_t));
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t p;
        for (p = 0; p < hp->n_pages; p++) {
            uint8_t f = v->pages[hp->first_page + p];
            int pc = (int)ptmd_page_classify(&usage[hp->first_page + p], f, ps);
            per_heap[h * PTMD_PC_COUNT + (size_t)pc]++;
            pages[pc]++;
            if (ptmd_page_shared(v->meta, f)) shared[pc]++;
        }
    }
}

size_t ptmd_pinned_page_chunks(const ptmd_view *v, const ptmd_pinned_page *pin, uint64_t *out, size_t max)
{
    uint64_t k, end = pin->address + page_size_of(v);
    size_t n = 0;
    for (k = pin->first_chunk; n < pin->n_chunks && n < max && k < v->n_chunks && v->chunks[k].addr < end; k++)
        if (ptmd_rec_is_allocated(&v->chunks[k])) out[n++] = k;
    return n;
}

void ptmd_size_classes_fill(const ptmd_view *v, ptmd_size_classes *out)
{
    size_t i;
    memset(out, 0, sizeof(*out));
    for (i = 0; i < v->n_chunks; i++) {
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        if (!ptmd_rec_is_allocated(&v->chunks[i])) continue;
        if (size < PTMD_EXACT_CLASSES * 16) {
            out->exact_count[size / 16]++;
            out->exact_bytes[size / 16] += size;
        } else {
            int k = 64 - __builtin_clzll(size - 1);
            out->pow2_count[k]++;
            out->pow2_bytes[k] += size;
        }
    }
}
