/* analysis/ against brute-force oracles on synthetic dumps: the summary's counts and residency, the
 * page usage, the free histogram and runs, attribution by slot words and references, the diff. */
#include "check.h"
#include "synth.h"
#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/diff.h"
#include "analysis/retention.h"
#include "analysis/rss.h"

#include <stdlib.h>
#include <string.h>

static synth S, T;

/* The flags byte of the page holding addr in heap h. */
static uint8_t page_flags(const ptmd_view *v, const ptmd_heap_rec *h, uint64_t addr)
{
    return v->pages[h->first_page + (addr - h->page_base) / v->meta->page_size];
}

static void summary(const ptmd_view *v, uint64_t seed)
{
    ptmd_totals t, b;
    ptmd_arena_summary per[2];
    size_t h, i;
    int st;
    memset(&b, 0, sizeof(b));
    ptmd_summarize(v, &t, per);
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        if (hp->kind == PTMD_HEAP_MMAPPED_CHUNK) {
            b.hblks++;
            b.hblkhd += hp->end - hp->start;
        }
        for (i = hp->first_chunk; i < hp->first_chunk + hp->n_chunks; i++) {
            const ptmd_chunk_rec *c = &v->chunks[i];
            uint64_t size = ptmd_rec_size(c), a;
            st = ptmd_rec_state(c);
            b.count[st]++;
            b.bytes[st] += size;
            if (hp->kind != PTMD_HEAP_MMAPPED_CHUNK) b.arena += size;
            if (ptmd_state_is_free(st) && st != PTMD_ST_TOP && size > b.largest_free) b.largest_free = size;
            for (a = c->addr; a < c->addr + size; a++) { /* byte by byte */
                uint8_t f = page_flags(v, hp, a);
                if (f & PTMD_PAGE_PRESENT) {
                    /* sharing is known from pagemap, in a snapshot only from its parent's reading */
                    int known =
                        v->meta->residency_source == PTMD_RESIDENCY_PAGEMAP &&
                        (!(v->meta->flags & PTMD_MF_FORK_CHILD) || (v->meta->flags & PTMD_MF_SHARING_BEFORE_FORK)) &&
                        !(f & PTMD_PAGE_SHARING_UNKNOWN);
                    b.resident_bytes++;
                    if (known && !(f & PTMD_PAGE_EXCLUSIVE)) b.shared_bytes++;
                    if (!known) b.sharing_unknown_bytes++;
                    if (ptmd_state_is_free(st)) b.free_resident_bytes++;
                } else if (f & PTMD_PAGE_SWAPPED) b.swapped_bytes++;
                else b.absent_bytes++;
            }
        }
    }
    for (st = 0; st < PTMD_ST_COUNT; st++) {
        CHECK_EQ(t.count[st], b.count[st]);
        CHECK_EQ(t.bytes[st], b.bytes[st]);
        CHECK_EQ(t.count[st], (v->n_arenas > 0 ? per[0].t.count[st] : 0) + (v->n_arenas > 1 ? per[1].t.count[st] : 0) +
                                  (st == PTMD_ST_MMAPPED ? b.hblks : 0));
    }
    CHECK_EQ(t.arena, b.arena);
    CHECK_EQ(t.hblks, b.hblks);
    CHECK_EQ(t.hblkhd, b.hblkhd);
    CHECK_EQ(t.resident_bytes, b.resident_bytes);
    CHECK_EQ(t.shared_bytes, b.shared_bytes);
    CHECK_EQ(t.sharing_unknown_bytes, b.sharing_unknown_bytes);
    CHECK_EQ(t.swapped_bytes, b.swapped_bytes);
    CHECK_EQ(t.absent_bytes, b.absent_bytes);
    CHECK_EQ(t.free_resident_bytes, b.free_resident_bytes);
    CHECK_EQ(t.largest_free, b.largest_free);
    CHECK_EQ(t.ordblks,
             b.count[PTMD_ST_UNSORTED] + b.count[PTMD_ST_SMALLBIN] + b.count[PTMD_ST_LARGEBIN] + v->n_arenas);
    CHECK_EQ(t.fordblks + t.uordblks, b.arena);
    CHECK(t.chunk_count == v->n_chunks, "seed %llu: every chunk counted", (unsigned long long)seed);
}

static void pages(const ptmd_view *v)
{
    ptmd_page_usage *u = calloc(v->n_pages, sizeof(*u));
    uint64_t ps = v->meta->page_size, counts[PTMD_HIST_BUCKETS], bytes[PTMD_HIST_BUCKETS];
    uint64_t bc[PTMD_HIST_BUCKETS], bb[PTMD_HIST_BUCKETS], best = 0;
    ptmd_free_run runs[4];
    size_t h, i, p, n;
    if (!u) return;
    ptmd_page_usage_fill(v, u);
    memset(bc, 0, sizeof(bc));
    memset(bb, 0, sizeof(bb));
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t run_lo = 0, run_res = 0;
        int open = 0;
        for (p = 0; p < hp->n_pages; p++) {
            uint64_t pl = hp->page_base + p * ps, held = 0;
            const ptmd_page_usage *pu = &u[hp->first_page + p];
            for (i = hp->first_chunk; i < hp->first_chunk + hp->n_chunks; i++) {
                uint64_t lo = v->chunks[i].addr, hi = lo + ptmd_rec_size(&v->chunks[i]);
                if (hi > pl && lo < pl + ps) held += (hi < pl + ps ? hi : pl + ps) - (lo > pl ? lo : pl);
            }
            CHECK_EQ((uint64_t)pu->in_use + pu->free + pu->top + pu->meta, held);
        }
        for (i = hp->first_chunk; i <= hp->first_chunk + hp->n_chunks; i++) {
            int end = i == hp->first_chunk + hp->n_chunks;
            int st = end ? PTMD_ST_IN_USE : ptmd_rec_state(&v->chunks[i]);
            uint64_t size = end ? 0 : ptmd_rec_size(&v->chunks[i]), a, k = 0;
            if (!end && ptmd_state_is_free(st) && st != PTMD_ST_TOP) {
                while (k + 1 < PTMD_HIST_BUCKETS && (2ull << k) <= size) k++;
                bc[k]++;
                bb[k] += size;
            }
            if (!end && ptmd_state_is_free(st)) {
                if (!open) run_lo = v->chunks[i].addr, run_res = 0, open = 1;
                for (a = v->chunks[i].addr; a < v->chunks[i].addr + size; a++)
                    if (page_flags(v, hp, a) & PTMD_PAGE_PRESENT) run_res++;
            } else if (open) {
                if (run_res > best) best = run_res;
                open = 0;
            }
            (void)run_lo;
        }
    }
    ptmd_free_histogram(v, counts, bytes);
    for (i = 0; i < PTMD_HIST_BUCKETS; i++) {
        CHECK_EQ(counts[i], bc[i]);
        CHECK_EQ(bytes[i], bb[i]);
    }
    n = ptmd_largest_free_runs(v, runs, 4);
    CHECK_EQ(n ? runs[0].resident : 0, best);
    for (i = 1; i < n; i++) CHECK(runs[i - 1].resident >= runs[i].resident, "the runs come largest first");
    free(u);
}

/* Direct owners: the first object whose slot word is the chunk's user address. Through references:
 * what the owned chunks reach, and nothing else. */
static void attribution(const ptmd_view *v, uint64_t seed)
{
    size_t nc = v->n_chunks, i, w = 0, changed = 1;
    ptmd_attribution a;
    uint32_t *oracle = calloc(nc, sizeof(uint32_t));
    uint8_t *reach = calloc(nc, 1);
    a.owner = calloc(nc, sizeof(uint32_t));
    a.category = calloc(nc, 1);
    a.direct = calloc(nc, 1);
    if (!oracle || !reach || !a.owner || !a.category || !a.direct || ptmd_attribute(v, &a) != 0) {
        CHECK(0, "attribution ran");
        goto out;
    }
    for (i = 0; i < v->n_ruby_objects; i++) {
        uint16_t k;
        for (k = 0; k < v->ruby_objects[i].n_words; k++, w++) {
            long ci = ptmd_view_find_chunk(v, v->ruby_words[w] - 16, 0);
            if (ci >= 0 && ptmd_rec_is_allocated(&v->chunks[ci]) && !oracle[ci]) oracle[ci] = (uint32_t)(i + 1);
        }
    }
    for (i = 0; i < nc; i++) {
        if (oracle[i])
            CHECK(a.owner[i] == oracle[i] && a.direct[i], "seed %llu: chunk %zu is object %u's, found %u",
                  (unsigned long long)seed, i, oracle[i] - 1, a.owner[i]);
        CHECK(!a.owner[i] || ptmd_rec_is_allocated(&v->chunks[i]), "only allocated chunks have owners");
    }
    /* what spreads: owned chunks other than the buffers of strings, arrays and objects */
    for (i = 0; i < nc; i++) {
        int t = oracle[i] ? v->ruby_objects[oracle[i] - 1].type : 0;
        reach[i] = oracle[i] && !(t == 0x05 || t == 0x07 || t == 0x01);
    }
    while (changed) {
        changed = 0;
        for (i = 0; i < v->n_refs; i++) {
            uint32_t f = v->refs[i].from, to = v->refs[i].to;
            if (reach[f] && !reach[to] && !oracle[to] && ptmd_rec_is_allocated(&v->chunks[to])) reach[to] = changed = 1;
        }
    }
    for (i = 0; i < nc; i++)
        if (!oracle[i])
            CHECK((a.owner[i] != 0) == (reach[i] != 0),
                  "seed %llu: chunk %zu owned through references: %u, reached: %u", (unsigned long long)seed, i,
                  a.owner[i], reach[i]);
out:
    free(oracle);
    free(reach);
    free(a.owner);
    free(a.category);
    free(a.direct);
}

/* Bytes of the page at pl in v by what holds them, and its flags, counted over every chunk of every heap
 * (no page usage, no index): returns 0 when v has no such page. */
static int brute_page(const ptmd_view *v, uint64_t pl, uint64_t *live, uint64_t *free_bytes, uint8_t *flags)
{
    uint64_t ps = v->meta->page_size;
    size_t h, i;
    int found = 0;
    *live = *free_bytes = 0;
    *flags = 0;
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        if (pl < hp->page_base || pl >= hp->page_base + hp->n_pages * ps) continue;
        found = 1;
        *flags = v->pages[hp->first_page + (pl - hp->page_base) / ps];
        for (i = hp->first_chunk; i < hp->first_chunk + hp->n_chunks; i++) {
            const ptmd_chunk_rec *c = &v->chunks[i];
            uint64_t lo = c->addr > pl ? c->addr : pl, hi = c->addr + ptmd_rec_size(c);
            int st = ptmd_rec_state(c);
            if (hi > pl + ps) hi = pl + ps;
            if (hi <= lo) continue;
            if (st == PTMD_ST_IN_USE || st == PTMD_ST_MMAPPED) *live += hi - lo;
            else if (st != PTMD_ST_META) *free_bytes += hi - lo;
        }
    }
    return found;
}

/* Every page of b classified by what it holds now against what it held in a, by brute force: resident
 * and more than half free now, not before, is new free resident whatever it held; more than half live
 * now and not before, new in use. */
static void page_changes(const ptmd_view *a, const ptmd_view *b, const uint8_t *change, const ptmd_diff_totals *t,
                         uint64_t seed)
{
    uint64_t ps = b->meta->page_size, counts[PTMD_PCHG_COUNT] = { 0 };
    size_t h, p;
    int c;
    for (h = 0; h < b->n_heaps; h++) {
        const ptmd_heap_rec *hp = &b->heaps[h];
        for (p = 0; p < hp->n_pages; p++) {
            uint64_t pl = hp->page_base + p * ps, la, fa, lb, fb;
            uint8_t ga, gb;
            int had = brute_page(a, pl, &la, &fa, &ga), pa = had && (ga & PTMD_PAGE_PRESENT);
            int pb = (brute_page(b, pl, &lb, &fb, &gb), (gb & PTMD_PAGE_PRESENT) != 0);
            int expect;
            if (pa && !pb && !(gb & PTMD_PAGE_SWAPPED)) expect = PTMD_PCHG_RELEASED;
            else if (pb && 2 * lb > ps && !(pa && 2 * la > ps)) expect = PTMD_PCHG_NEW_IN_USE;
            else if (pb && 2 * fb > ps && !(pa && 2 * fa > ps)) expect = PTMD_PCHG_NEW_FREE_RESIDENT;
            else expect = had ? PTMD_PCHG_UNCHANGED : PTMD_PCHG_NEW_PAGE;
            CHECK(change[hp->first_page + p] == expect, "seed %llu: page 0x%llx is %s, expected %s",
                  (unsigned long long)seed, (unsigned long long)pl,
                  ptmd_page_change_names[change[hp->first_page + p] % PTMD_PCHG_COUNT], ptmd_page_change_names[expect]);
            counts[expect]++;
        }
    }
    for (c = 0; c < PTMD_PCHG_COUNT; c++) CHECK_EQ(t->pages[c], counts[c]);
}

static void diff(uint64_t seed, const synth_opts *o)
{
    ptmd_view *a = &S.view, *b = &T.view;
    ptmd_page_usage *ua = calloc(a->n_pages, sizeof(*ua)), *ub = calloc(a->n_pages, sizeof(*ub));
    uint8_t *change = calloc(a->n_pages, 1);
    ptmd_diff_totals t;
    uint64_t r = seed * 7919, freed_live = 0;
    size_t k, i;
    synth_build(&T, seed, o);
    k = (size_t)(seed % b->n_chunks);
    if (!ua || !ub || !change) goto out;
    ptmd_page_usage_fill(a, ua);
    CHECK(ptmd_first_difference(a, a) == -1, "a dump differs from itself nowhere");
    ptmd_diff(a, ua, a, ua, &t, change);
    CHECK_EQ(t.same_count, a->n_chunks);
    CHECK_EQ(t.new_count + t.gone_count, 0);
    CHECK_EQ(t.pages[PTMD_PCHG_UNCHANGED], a->n_pages);
    ptmd_rec_set_state(&T.chunks[k],
                       ptmd_rec_state(&T.chunks[k]) == PTMD_ST_IN_USE ? PTMD_ST_SMALLBIN : PTMD_ST_IN_USE);
    ptmd_page_usage_fill(b, ub);
    CHECK(ptmd_first_difference(a, b) == (long)k, "seed %llu: chunk %zu is the first difference",
          (unsigned long long)seed, k);
    ptmd_diff(a, ua, b, ub, &t, change);
    CHECK_EQ(t.same_count, a->n_chunks - 1);
    CHECK_EQ(t.new_count, 1);
    CHECK_EQ(t.gone_count, 1);
    page_changes(a, b, change, &t, seed);

    /* the heap changed all over: a third of the in-use chunks freed, a sixth of the free ones taken,
     * an eighth of the pages' residency turned over */
    for (i = 0; i < b->n_chunks; i++) {
        int st = ptmd_rec_state(&T.chunks[i]), roll = (int)(synth_random(&r) % 6);
        if (st == PTMD_ST_IN_USE && roll < 2) {
            ptmd_rec_set_state(&T.chunks[i], PTMD_ST_SMALLBIN);
            freed_live += ptmd_rec_size(&T.chunks[i]);
        } else if ((st == PTMD_ST_SMALLBIN || st == PTMD_ST_TCACHE) && roll == 0)
            ptmd_rec_set_state(&T.chunks[i], PTMD_ST_IN_USE);
    }
    for (i = 0; i < b->n_pages; i++)
        if (synth_random(&r) % 8 == 0) T.pages[i] ^= PTMD_PAGE_PRESENT;
    ptmd_page_usage_fill(b, ub);
    ptmd_diff(a, ua, b, ub, &t, change);
    page_changes(a, b, change, &t, seed);
    if (freed_live > 4 * b->meta->page_size)
        CHECK(t.pages[PTMD_PCHG_NEW_FREE_RESIDENT] > 0, "seed %llu: %llu live bytes freed, no page newly free",
              (unsigned long long)seed, (unsigned long long)freed_live);
out:
    free(ua);
    free(ub);
    free(change);
}

/* Whatever the reader accepts goes through the figures without harm. */
/* Which objects the roots reach with object `cut` taken out of the graph (UINT32_MAX: none). */
static void reach_without(const ptmd_view *v, const uint64_t *start, uint32_t cut, uint8_t *seen, uint32_t *queue)
{
    size_t n = v->n_ruby_objects, head = 0, tail = 0, i;
    memset(seen, 0, n);
    for (i = 0; i < v->n_ruby_roots; i++) {
        uint32_t o = v->ruby_roots[i].object;
        if (o != cut && !seen[o]) seen[o] = 1, queue[tail++] = o;
    }
    while (head < tail) {
        uint32_t u = queue[head++];
        uint64_t k;
        for (k = start[u]; k < start[u + 1]; k++) {
            uint32_t w = v->ruby_edges[k];
            if (w != cut && !seen[w]) seen[w] = 1, queue[tail++] = w;
        }
    }
}

/* What each object retains, against brute force: u retains v when no root reaches v with u taken out
 * (or v is u); its bytes are those of the allocated chunks the attribution gives those objects. Also
 * every path: from a root, along recorded references, to the object. */
static void retention(const ptmd_view *v, uint64_t seed)
{
    size_t n = v->n_ruby_objects, nc = v->n_chunks ? v->n_chunks : 1, i, j;
    ptmd_attribution a;
    ptmd_retention r;
    uint64_t *start = calloc(n + 1, sizeof(uint64_t)), *bytes = calloc(n, sizeof(uint64_t));
    uint8_t *all = malloc(n), *without = malloc(n);
    uint32_t *queue = malloc(n * sizeof(uint32_t));
    a.owner = calloc(nc, sizeof(uint32_t));
    a.category = calloc(nc, 1);
    a.direct = calloc(nc, 1);
    if (!start || !bytes || !all || !without || !queue || !a.owner || !a.category || !a.direct ||
        ptmd_attribute(v, &a) != 0 || ptmd_retention_build(v, &a, &r) != 0) {
        CHECK(0, "retention ran");
        goto out;
    }
    for (i = 0; i < n; i++) start[i + 1] = start[i] + v->ruby_edge_counts[i];
    for (i = 0; i < v->n_chunks; i++)
        if (a.owner[i] && ptmd_rec_is_allocated(&v->chunks[i])) bytes[a.owner[i] - 1] += ptmd_rec_size(&v->chunks[i]);
    reach_without(v, start, UINT32_MAX, all, queue);
    for (i = 0; i < n; i++) {
        uint64_t expect_bytes = 0, expect_objects = 0;
        const uint64_t *got = &r.retained[i * PTMD_RET_COLUMNS];
        if (!all[i]) {
            CHECK(r.dom.idom[i] == PTMD_DOM_NONE && got[PTMD_RET_BYTES] == 0 && r.parent[i] == PTMD_RET_NONE,
                  "seed %llu: object %zu, which no root reaches, retains nothing", (unsigned long long)seed, i);
            continue;
        }
        reach_without(v, start, (uint32_t)i, without, queue);
        for (j = 0; j < n; j++)
            if (all[j] && (j == i || !without[j])) expect_bytes += bytes[j], expect_objects++;
        CHECK(got[PTMD_RET_BYTES] == expect_bytes && got[PTMD_RET_OBJECTS] == expect_objects,
              "seed %llu: object %zu retains %llu B in %llu objects, brute force %llu B in %llu",
              (unsigned long long)seed, i, (unsigned long long)got[PTMD_RET_BYTES],
              (unsigned long long)got[PTMD_RET_OBJECTS], (unsigned long long)expect_bytes,
              (unsigned long long)expect_objects);
        {
            uint32_t u = (uint32_t)i;
            size_t steps = 0;
            while (r.parent[u] != r.n_objects && steps++ < n) {
                uint32_t p = r.parent[u];
                CHECK(r.via[u] >= start[p] && r.via[u] < start[p + 1] && v->ruby_edges[r.via[u]] == u,
                      "seed %llu: the path to %zu goes through a reference %u holds", (unsigned long long)seed, i, p);
                u = p;
            }
            CHECK(r.parent[u] == r.n_objects && v->ruby_roots[r.via[u]].object == u,
                  "seed %llu: the path to object %zu starts at a root", (unsigned long long)seed, i);
        }
    }
    {
        uint32_t holders[16];
        size_t k, found = ptmd_retention_holders(&r, 16, holders);
        for (k = 0; k < found; k++)
            CHECK(holders[k] < n && all[holders[k]] &&
                      (k == 0 ||
                       r.retained[holders[k] * PTMD_RET_COLUMNS] <= r.retained[holders[k - 1] * PTMD_RET_COLUMNS]),
                  "seed %llu: holders are reached objects, largest first", (unsigned long long)seed);
    }
    ptmd_retention_free(&r);
out:
    free(start);
    free(bytes);
    free(all);
    free(without);
    free(queue);
    free(a.owner);
    free(a.category);
    free(a.direct);
}

void exercise(const ptmd_view *v)
{
    ptmd_totals t;
    ptmd_arena_summary *per = calloc(v->n_arenas ? v->n_arenas : 1, sizeof(*per));
    ptmd_page_usage *u = calloc(v->n_pages ? v->n_pages : 1, sizeof(*u));
    ptmd_attribution a;
    ptmd_size_classes sc;
    ptmd_rss rss;
    uint64_t *files = calloc(v->n_mappings ? v->n_mappings : 1, sizeof(uint64_t));
    size_t nc = v->n_chunks ? v->n_chunks : 1;
    a.owner = calloc(nc, sizeof(uint32_t));
    a.category = calloc(nc, 1);
    a.direct = calloc(nc, 1);
    if (per && u && files && a.owner && a.category && a.direct) {
        ptmd_summarize(v, &t, per);
        ptmd_page_usage_fill(v, u);
        ptmd_size_classes_fill(v, &sc);
        ptmd_attribute(v, &a);
        ptmd_rss_account(v, &rss, files);
    }
    free(per);
    free(u);
    free(files);
    free(a.owner);
    free(a.category);
    free(a.direct);
}

void test_analysis(void)
{
    uint64_t seed;
    unit_case = "analysis";
    for (seed = 1; seed <= 60; seed++) {
        /* every fifth dump with the 16 KiB or 64 KiB pages of arm64 kernels */
        synth_opts o = { (int)(seed & 1), 0,  1 + (int)(seed % 3 != 0),
                         (int)(seed % 3), 24, seed % 5 ? 0 : (seed % 10 ? 16384 : 65536) };
        synth_build(&S, seed, &o);
        summary(&S.view, seed);
        pages(&S.view);
        if (o.ruby) attribution(&S.view, seed);
        if (S.view.ruby_graph) retention(&S.view, seed);
        exercise(&S.view);
        diff(seed, &o);
    }
}
