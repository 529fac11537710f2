/* The summary: one pass over the chunk records and their pages. */
#include "analysis/summary.h"
#include "format/glibc.h"

#include <string.h>

static void binstat_add(ptmd_binstat *b, uint64_t size)
{
    if (b->count == 0 || size < b->from) b->from = size;
    if (size > b->to) b->to = size;
    b->total += size;
    b->count++;
}

/* mallinfo2's rules (int_mallinfo): fordblks = top + fastbins + bins, ordblks = bin chunks + one top
 * per arena, uordblks = system_mem - fordblks; tcache chunks count as allocated. */
static void finish_mallinfo(ptmd_totals *t, uint64_t arenas)
{
    t->ordblks = t->count[PTMD_ST_UNSORTED] + t->count[PTMD_ST_SMALLBIN] + t->count[PTMD_ST_LARGEBIN] + arenas;
    t->smblks = t->count[PTMD_ST_FASTBIN];
    t->fsmblks = t->bytes[PTMD_ST_FASTBIN];
    t->fordblks = t->bytes[PTMD_ST_TOP] + t->bytes[PTMD_ST_FASTBIN] + t->bytes[PTMD_ST_UNSORTED] +
                  t->bytes[PTMD_ST_SMALLBIN] + t->bytes[PTMD_ST_LARGEBIN];
    t->uordblks = t->arena - t->fordblks;
    t->usmblks = 0;
}

void ptmd_summarize(const ptmd_view *v, ptmd_totals *total, ptmd_arena_summary *per_arena)
{
    size_t h, a;
    uint64_t ps = v->meta && v->meta->page_size ? v->meta->page_size : 4096;
    memset(total, 0, sizeof(*total));
    for (a = 0; a < v->n_arenas; a++) memset(&per_arena[a], 0, sizeof(per_arena[a]));

    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        ptmd_arena_summary *as = hp->arena < v->n_arenas ? &per_arena[hp->arena] : NULL;
        const uint8_t *pages =
            v->pages && hp->first_page + hp->n_pages <= v->n_pages ? v->pages + hp->first_page : NULL;
        uint64_t i, end = hp->first_chunk + hp->n_chunks;
        /* what the heap's first meta chunk holds below an unaligned sbrk_base is not glibc's */
        uint64_t pad = hp->kind == PTMD_HEAP_SBRK && v->meta ? ptmd_sbrk_pad(hp->start, v->meta->sbrk_base) : 0;
        total->heap_count++;
        total->arena -= pad;
        if (as) as->t.arena -= pad;
        if (as) as->t.heap_count++;
        if (end > v->n_chunks) end = v->n_chunks;
        for (i = hp->first_chunk; i < end; i++) {
            const ptmd_chunk_rec *c = &v->chunks[i];
            uint64_t size = ptmd_rec_size(c), lo = c->addr, hi = c->addr + size;
            uint64_t res = 0, swp = 0, abs_ = 0, shr = 0, unk = 0;
            int st = ptmd_rec_state(c), is_free;
            if (st >= PTMD_ST_COUNT) continue;
            is_free = ptmd_state_is_free(st);
            /* residency of [lo, hi), page by page */
            if (pages && hi > lo && lo >= hp->page_base) {
                uint64_t p = (lo - hp->page_base) / ps, last = (hi - 1 - hp->page_base) / ps;
                if (last >= hp->n_pages) last = hp->n_pages - 1;
                for (; p <= last; p++) {
                    uint64_t pl = hp->page_base + p * ps, ph = pl + ps;
                    uint64_t ov = (ph < hi ? ph : hi) - (pl > lo ? pl : lo);
                    uint8_t f = pages[p];
                    if (f & PTMD_PAGE_PRESENT) {
                        res += ov;
                        if (ptmd_page_shared(v->meta, f)) shr += ov;
                        else if (!ptmd_page_sharing_known(v->meta, f)) unk += ov;
                    } else if (f & PTMD_PAGE_SWAPPED) swp += ov;
                    else abs_ += ov;
                }
            } else {
                abs_ = size;
            }
            {
                ptmd_totals *ts[2] = { total, as ? &as->t : NULL };
                int k;
                for (k = 0; k < 2; k++) {
                    ptmd_totals *t = ts[k];
                    if (!t) continue;
                    t->count[st]++;
                    t->bytes[st] += size;
                    t->chunk_count++;
                    t->resident_bytes += res;
                    t->swapped_bytes += swp;
                    t->absent_bytes += abs_;
                    t->shared_bytes += shr;
                    t->sharing_unknown_bytes += unk;
                    if (is_free) {
                        t->free_resident_bytes += res;
                        t->free_swapped_bytes += swp;
                        t->free_released_bytes += abs_;
                        if (st != PTMD_ST_TOP && size > t->largest_free) t->largest_free = size;
                    }
                    if (hp->kind != PTMD_HEAP_MMAPPED_CHUNK) t->arena += size;
                }
            }
            if (as) {
                if (st == PTMD_ST_FASTBIN) {
                    int fi = ptmd_fastbin_index(size);
                    if (fi >= 0 && fi < 10) binstat_add(&as->fast[fi], size);
                } else if (st == PTMD_ST_UNSORTED) binstat_add(&as->bins[1], size | ptmd_rec_raw_bits(c));
                else if (st == PTMD_ST_SMALLBIN || st == PTMD_ST_LARGEBIN) {
                    int bi = ptmd_bin_index(size);
                    if (bi >= 2 && bi < 128) binstat_add(&as->bins[bi], size | ptmd_rec_raw_bits(c));
                }
                if (st == PTMD_ST_UNSORTED || st == PTMD_ST_SMALLBIN || st == PTMD_ST_LARGEBIN)
                    as->t.malloc_info_rest_size += size | ptmd_rec_raw_bits(c);
            }
        }
        if (hp->kind == PTMD_HEAP_MMAPPED_CHUNK) {
            total->hblks++;
            total->hblkhd += hp->end - hp->start;
        }
    }
    for (a = 0; a < v->n_arenas; a++) {
        per_arena[a].t.malloc_info_rest_size += per_arena[a].t.bytes[PTMD_ST_TOP];
        total->malloc_info_rest_size += per_arena[a].t.malloc_info_rest_size;
        finish_mallinfo(&per_arena[a].t, 1);
        if (v->arenas[a].flags & PTMD_AF_MAIN) per_arena[a].t.keepcost = per_arena[a].t.bytes[PTMD_ST_TOP];
    }
    finish_mallinfo(total, v->n_arenas);
    for (a = 0; a < v->n_arenas; a++)
        if (v->arenas[a].flags & PTMD_AF_MAIN) total->keepcost = per_arena[a].t.bytes[PTMD_ST_TOP];
}
