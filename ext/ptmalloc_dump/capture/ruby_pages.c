/* Ruby's object pages found by their structure. rb_objspace_each_objects would list them, but it
 * mallocs its copy of the page list and first ends a pending lazy sweep, whose frees change the heap
 * before glibc's counters are captured. A page body is aligned to its size and begins with a
 * pointer to the GC's struct heap_page (gc.c: struct heap_page_header); that struct holds the
 * address of the body's first slot at a word learned from the GC's own list when the extension
 * loads. */
#include "capture/ruby_pages.h"
#include "format/format.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PTMD_RUBY_MIN_STRIDE 16
#define PTMD_RUBY_MAX_STRIDE 4096
#define PTMD_RUBY_BATCH 512 /* page starts read per process_vm_readv */
#define PTMD_RUBY_VEC 65536 /* pages whose residency one mincore() call asks */
#define PTMD_RUBY_NO_FIELD 0xffffffffu

static uint64_t stride_at(const ptmd_ruby_shape *s, uint64_t start)
{
    return s->const_stride ? s->const_stride : s->stride_of ? s->stride_of((uintptr_t)start) : 0;
}

/* The 16-bit fields among the struct's first two words equal to v, one bit per byte offset / 2. */
static uint32_t u16_fields(const uint64_t *words, uint64_t v)
{
    uint32_t mask = 0, i;
    uint16_t f[8];
    memcpy(f, words, sizeof(f));
    for (i = 0; i < 8; i++)
        if (f[i] == v) mask |= 1u << i;
    return mask;
}

void ptmd_ruby_pages_learn(ptmd_ruby_shape *s, uint64_t start, uint64_t end, uint64_t stride)
{
    uint64_t body, record, words[PTMD_RUBY_RECORD_WORDS];
    uint32_t mask = 0, nodes = 0, i;
    if (!s->pages_seen) {
        ptmd_err err;
        s->start_mask = s->node_mask = (1u << PTMD_RUBY_RECORD_WORDS) - 1;
        s->stride_mask = s->count_mask = 0xff;
        ptmd_maps maps;
        size_t k;
        if (ptmd_memreader_open(&s->mem, &err) != 0) s->bad = 1;
        memset(&maps, 0, sizeof(maps));
        if (ptmd_maps_load(&maps, &err) != 0) s->bad = 1;
        /* the break's range: one mapping or several side by side (a forked worker's break grown after
         * the fork is a mapping of its own beside the one it inherited) */
        for (k = 0; k < maps.count; k++) {
            const ptmd_map *m = PTMD_BUF_AT(&maps.maps, ptmd_map, k);
            if (m->kind != PTMD_MAPKIND_BRK) continue;
            if (!s->brk_hi || m->start < s->brk_lo) s->brk_lo = m->start;
            if (m->end > s->brk_hi) s->brk_hi = m->end;
        }
        ptmd_maps_release(&maps);
    }
    s->pages_seen++;
    if (s->bad || !s->page_size || !s->body_size || !stride) {
        s->bad = 1;
        return;
    }
    body = start & ~(s->page_size - 1);
    if (body >= s->brk_lo && body < s->brk_hi) s->in_brk = 1;
    /* a page the GC lists is mapped, and so is its struct (what its words point at may not be) */
    memcpy(&record, (const void *)(uintptr_t)body, sizeof(record));
    if (!ptmd_ruby_page_record_ok(record, body, s->body_size) || start - body > PTMD_RUBY_FIRST_SLOT_MAX ||
        stride_at(s, start) != stride || end <= start || end > body + s->body_size || (end - start) % stride) {
        s->bad = 1;
        return;
    }
    memcpy(words, (const void *)(uintptr_t)record, sizeof(words));
    for (i = 0; i < PTMD_RUBY_RECORD_WORDS; i++) {
        uint64_t back;
        if (words[i] == start) mask |= 1u << i;
        if (!(s->node_mask & (1u << i)) || !words[i] || (words[i] & 7)) continue;
        if (ptmd_safe_read(&s->mem, words[i] + 8, &back, sizeof(back)) == 0 && back == record + 8 * i) nodes |= 1u << i;
    }
    s->start_mask &= mask;
    s->node_mask &= nodes;
    s->stride_mask &= u16_fields(words, stride);
    s->count_mask &= u16_fields(words, (end - start) / stride);
}

void ptmd_ruby_pages_learned(ptmd_ruby_shape *s)
{
    if (s->pages_seen) ptmd_memreader_close(&s->mem);
    /* a record need not hold its slot size where every page has the same (Ruby 3.1 has it, 2.7 not) */
    s->usable = s->pages_seen && !s->bad && s->start_mask && (s->stride_mask || s->const_stride) && s->count_mask &&
                s->node_mask;
    if (!s->usable) return;
    s->start_word = (uint32_t)__builtin_ctz(s->start_mask);
    s->stride_at = s->stride_mask ? 2 * (uint32_t)__builtin_ctz(s->stride_mask) : PTMD_RUBY_NO_FIELD;
    s->count_at = 2 * (uint32_t)__builtin_ctz(s->count_mask);
    s->node_word = (uint32_t)__builtin_ctz(s->node_mask);
}

/* The page's past-the-last slot from the slot count its record holds, 0 when the record does not fit
 * the layout (its slot size, where it holds one, or a count the body cannot hold). */
static uint64_t record_end(const ptmd_ruby_shape *s, const uint64_t *words, uint64_t body, uint64_t start,
                           uint64_t stride)
{
    uint16_t f[8];
    uint64_t end;
    memcpy(f, words, sizeof(f));
    if (s->stride_at != PTMD_RUBY_NO_FIELD && f[s->stride_at / 2] != stride) return 0;
    end = start + (uint64_t)f[s->count_at / 2] * stride;
    return f[s->count_at / 2] && end <= body + s->body_size ? end : 0;
}

typedef struct {
    const ptmd_ruby_shape *s;
    ptmd_memreader mem;
    ptmd_buf *pages;
    uintptr_t bodies[PTMD_RUBY_BATCH], records[PTMD_RUBY_BATCH], backs[PTMD_RUBY_BATCH];
    uint64_t first[PTMD_RUBY_BATCH], words[PTMD_RUBY_BATCH][PTMD_RUBY_RECORD_WORDS], back[PTMD_RUBY_BATCH];
    ptmd_ruby_page found[PTMD_RUBY_BATCH];
    unsigned char resident[PTMD_RUBY_VEC];
    unsigned char ok[PTMD_RUBY_BATCH];
    size_t n;
} finder;

/* The batch of page-size boundaries: their first words, the structs those point at, and the node
 * that follows each struct's own in the GC's list of pages, which must point back at it. */
static int flush(finder *f, ptmd_err *err)
{
    const ptmd_ruby_shape *s = f->s;
    size_t i, k = 0, m = 0;
    ptmd_safe_read_many(&f->mem, f->bodies, f->n, sizeof(uint64_t), f->first, f->ok);
    for (i = 0; i < f->n; i++)
        if (f->ok[i] && ptmd_ruby_page_record_ok(f->first[i], f->bodies[i], s->body_size)) {
            f->bodies[k] = f->bodies[i];
            f->records[k++] = (uintptr_t)f->first[i];
        }
    ptmd_safe_read_many(&f->mem, f->records, k, sizeof(f->words[0]), f->words, f->ok);
    for (i = 0; i < k; i++) {
        uint64_t body = f->bodies[i], start = f->words[i][s->start_word], next = f->words[i][s->node_word];
        uint64_t stride, end;
        if (!f->ok[i] || start <= body || start - body > PTMD_RUBY_FIRST_SLOT_MAX || (start & 7) || !next || (next & 7))
            continue;
        stride = stride_at(s, start);
        if (stride < PTMD_RUBY_MIN_STRIDE || stride > PTMD_RUBY_MAX_STRIDE || (stride & 7)) continue;
        if (!(end = record_end(s, f->words[i], body, start, stride))) continue;
        f->found[m].start = start;
        f->found[m].end = end;
        f->found[m].stride = (uint32_t)stride;
        f->records[m] = f->records[i];
        f->backs[m++] = (uintptr_t)next + 8;
    }
    ptmd_safe_read_many(&f->mem, f->backs, m, sizeof(uint64_t), f->back, f->ok);
    for (i = 0; i < m; i++) {
        if (!f->ok[i] || f->back[i] != f->records[i] + 8 * s->node_word) continue;
        if (ptmd_buf_append(f->pages, &f->found[i], sizeof(f->found[i])) != 0)
            return ptmd_fail_sys(err, errno, "Ruby's page list", "mmap");
    }
    f->n = 0;
    return 0;
}

int ptmd_ruby_pages_find(const ptmd_ruby_shape *s, ptmd_buf *pages, ptmd_err *err)
{
    static finder f; /* 140 KiB: not on a stack that may be a thread's small one */
    const uint64_t sys_page = (uint64_t)sysconf(_SC_PAGESIZE);
    ptmd_maps maps;
    size_t i;
    int rc = 0;
    if (!s->usable) return ptmd_fail(err, PTMD_E_ARGUMENT, "the layout of Ruby's pages is not known");
    memset(&maps, 0, sizeof(maps));
    memset(&f, 0, sizeof(f));
    f.s = s;
    f.pages = pages;
    if (ptmd_memreader_open(&f.mem, err) != 0) return -1;
    if (ptmd_maps_load(&maps, err) != 0) {
        ptmd_memreader_close(&f.mem);
        return -1;
    }
    for (i = 0; i < maps.count && rc == 0; i++) {
        const ptmd_map *m = PTMD_BUF_AT(&maps.maps, ptmd_map, i);
        uint64_t a = (m->start + s->page_size - 1) & ~(s->page_size - 1);
        /* the GC maps its pages (3.1 on) or gets them from posix_memalign: private, anonymous, rw; the
         * break's mapping, often most of the heap, only where a page was seen there when learning */
        if ((m->prot & (PTMD_MAP_R | PTMD_MAP_W | PTMD_MAP_PRIVATE)) != (PTMD_MAP_R | PTMD_MAP_W | PTMD_MAP_PRIVATE) ||
            (m->kind != PTMD_MAPKIND_ANON && (m->kind != PTMD_MAPKIND_BRK || !s->in_brk)))
            continue;
        /* A body's first page holds the GC's header, so it is resident unless swapped out (and then
         * the count check below sends the pass to each_objects). A page never touched is not read:
         * the read would map the zero page there, which pagemap then reports present. */
        while (rc == 0 && a + s->page_size <= m->end) {
            uint64_t span = (m->end - a) / sys_page < PTMD_RUBY_VEC ? m->end - a : (uint64_t)PTMD_RUBY_VEC * sys_page;
            uint64_t lo = a;
            if (mincore((void *)(uintptr_t)lo, span, f.resident) != 0) break;
            for (; rc == 0 && a - lo < span && a + s->page_size <= m->end; a += s->page_size) {
                if (!(f.resident[(a - lo) / sys_page] & 1)) continue;
                f.bodies[f.n++] = (uintptr_t)a;
                if (f.n == PTMD_RUBY_BATCH) rc = flush(&f, err);
            }
        }
    }
    if (rc == 0 && f.n) rc = flush(&f, err);
    ptmd_maps_release(&maps);
    ptmd_memreader_close(&f.mem);
    /* its addresses would stay in this library's data, where the roots' scan (this dump's or a later
     * one's) would take them for pointers into the blocks that hold the candidates */
    memset(&f, 0, sizeof(f));
    return rc;
}
