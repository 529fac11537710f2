/* Synthetic dumps for the unit tests: random heaps that keep every rule the reader checks. */
#include "synth.h"
#include "format/crc32.h"
#include "format/glibc.h"
#include "format/index.h"

#include <string.h>

#define MAIN_START 0x555555560000ull
#define HEAP_START 0x7f0000000000ull
#define MMAP_START 0x7f1000000000ull
#define RUBY_PAGE 0x7f2000000000ull
#define FILE_MAP 0x7f3000000000ull
#define NAME_COUNT 3

uint64_t synth_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static uint64_t below(uint64_t *r, uint64_t n)
{
    return n ? synth_random(r) % n : 0;
}

static uint64_t random_size(uint64_t *r)
{
    return below(r, 8) ? 32 + 16 * below(r, 64) : 1024 + 16 * below(r, 512);
}

/* One heap: its chunks tiled from start, the last one top for an arena's heap. */
static void add_heap(synth *s, uint64_t *r, const synth_opts *o, uint64_t start, uint32_t arena, uint32_t kind)
{
    static const int free_states[] = { PTMD_ST_TCACHE, PTMD_ST_FASTBIN, PTMD_ST_UNSORTED, PTMD_ST_SMALLBIN,
                                       PTMD_ST_LARGEBIN };
    ptmd_view *v = &s->view;
    ptmd_heap_rec *h = &s->heaps[v->n_heaps];
    uint64_t at = start, n, i;
    memset(h, 0, sizeof(*h));
    h->start = start;
    h->first_chunk = v->n_chunks;
    h->arena = arena;
    h->kind = kind;
    n = kind == PTMD_HEAP_MMAPPED_CHUNK ? 1 : 2 + below(r, (uint64_t)o->max_chunks_per_heap - 1);
    for (i = 0; i < n && v->n_chunks < SYNTH_MAX_CHUNKS; i++) {
        ptmd_chunk_rec *c = &s->chunks[v->n_chunks++];
        uint64_t size = random_size(r);
        int st = below(r, 2) ? PTMD_ST_IN_USE : free_states[below(r, 5)];
        if (kind == PTMD_HEAP_MMAPPED_CHUNK) {
            size = s->ps * (1 + below(r, 3));
            st = PTMD_ST_MMAPPED;
        } else if (i == 0 && kind == PTMD_HEAP_MMAP_HEAP) {
            st = PTMD_ST_META;
        } else if (i == n - 1) {
            st = PTMD_ST_TOP;
        }
        c->addr = at;
        c->word = size | (uint64_t)st | ((uint64_t)1 << PTMD_CF_RAW_SHIFT);
        if (st == PTMD_ST_SMALLBIN && below(r, 4) == 0) c->word |= PTMD_CF_WORD(PTMD_CF_FREE_BIT);
        at += size;
    }
    h->n_chunks = v->n_chunks - h->first_chunk;
    h->end = at;
    h->reserved_end = kind == PTMD_HEAP_MMAP_HEAP ? start + (64ull << 20) : (at + s->ps - 1) & ~(s->ps - 1);
    h->page_base = start & ~(s->ps - 1);
    h->n_pages = (h->end - h->page_base - 1) / s->ps + 1;
    h->first_page = v->n_pages;
    for (i = 0; i < h->n_pages && v->n_pages < SYNTH_MAX_PAGES; i++) {
        uint64_t k = below(r, 8);
        s->pages[v->n_pages++] = (uint8_t)((k < 6    ? PTMD_PAGE_PRESENT
                                            : k == 6 ? PTMD_PAGE_SWAPPED
                                                     : 0) |
                                           (below(r, 4) ? PTMD_PAGE_EXCLUSIVE : 0) |
                                           /* a snapshot's page its parent's reading did not cover */
                                           (k < 6 && i % 7 == 3 ? PTMD_PAGE_SHARING_UNKNOWN : 0));
    }
    v->n_heaps++;
}

static void add_arena(synth *s, uint32_t index, uint64_t address, int main)
{
    ptmd_arena_rec *a = &s->arenas[index];
    const ptmd_heap_rec *h = &s->heaps[s->view.n_heaps - 1];
    const ptmd_chunk_rec *top = &s->chunks[h->first_chunk + h->n_chunks - 1];
    memset(a, 0, sizeof(*a));
    a->address = address;
    a->top = top->addr;
    a->top_size = ptmd_rec_size(top);
    a->system_mem = a->max_system_mem = h->end - h->start;
    a->flags = (main ? PTMD_AF_MAIN : 0) | PTMD_AF_LOCKED;
    a->first_heap = (uint32_t)(s->view.n_heaps - 1);
    a->n_heaps = 1;
    s->view.n_arenas++;
}

static void add_tcache(synth *s)
{
    ptmd_view *v = &s->view;
    size_t i;
    uint16_t position = 0;
    memset(s->threads, 0, sizeof(s->threads));
    s->threads[0].tid = 1;
    s->threads[0].flags = PTMD_TF_CURRENT | PTMD_TF_TLS;
    for (i = 0; i < v->n_chunks; i++) {
        ptmd_tcache_entry *e;
        if (ptmd_rec_state(&s->chunks[i]) != PTMD_ST_TCACHE) continue;
        e = &s->tcache[v->n_tcache_entries++];
        memset(e, 0, sizeof(*e));
        e->chunk = (uint32_t)i;
        e->bin = (uint16_t)((ptmd_rec_size(&s->chunks[i]) - 32) / 16 % 64);
        e->position = position++;
        s->threads[0].tcache_count++;
    }
    v->threads = s->threads;
    v->n_threads = 1;
    v->tcache_entries = s->tcache;
    v->sections |= PTMD_SECTION_BIT(PTMD_SEC_TCACHE_ENTRIES);
}

static size_t add_name(unsigned char *p, size_t off, uint64_t key, uint32_t kind, const char *name)
{
    uint32_t len = (uint32_t)strlen(name);
    memcpy(p + off, &key, 8);
    memcpy(p + off + 8, &kind, 4);
    memcpy(p + off + 12, &len, 4);
    memcpy(p + off + 16, name, len);
    return off + 16 + ((len + 7) & ~7u);
}

/* Ruby's heap: one page of objects whose slot words name chunks (or nothing), their class names, the
 * references between chunks, one root and the GC's counts. */
static void add_ruby(synth *s, uint64_t *r)
{
    static const uint8_t types[] = { 0x01, 0x05, 0x07, 0x08, 0x0c, 0x1a, 0x03 };
    static const char *const classes[NAME_COUNT] = { "String", "Array", "Synth::Thing" };
    ptmd_view *v = &s->view;
    size_t i, n = 1 + below(r, 64), words = 0, off = 0;
    memset(&s->ruby_meta, 0, sizeof(s->ruby_meta));
    memset(s->ruby_pages, 0, sizeof(s->ruby_pages));
    s->ruby_pages[0].start = RUBY_PAGE;
    s->ruby_pages[0].end = RUBY_PAGE + 40 * 100;
    s->ruby_pages[0].stride = 40;
    s->ruby_pages[0].total = 100;
    s->ruby_pages[0].live = (uint32_t)n;
    s->ruby_pages[0].free = (uint32_t)(100 - n);
    for (i = 0; i < n; i++) {
        ptmd_ruby_object *o = &s->objects[i];
        uint16_t k, nw = (uint16_t)below(r, 3);
        memset(o, 0, sizeof(*o));
        o->address = RUBY_PAGE + 40 * i;
        o->type = types[below(r, sizeof(types))];
        o->klass = below(r, 4) ? (uint32_t)below(r, NAME_COUNT) : PTMD_NO_NAME;
        o->data_type = PTMD_NO_NAME;
        o->flags = below(r, 3) ? 0 : PTMD_OF_OLD;
        for (k = 0; k < nw; k++) {
            uint64_t c = below(r, v->n_chunks);
            s->ruby_words[words++] = below(r, 5) ? s->chunks[c].addr + 16 : 0x1000 + 16 * below(r, 1000);
        }
        o->n_words = nw;
    }
    for (i = 0; i < NAME_COUNT; i++) off = add_name(s->names, off, 0x1000 + i, PTMD_NAME_CLASS, classes[i]);
    s->ruby_meta.heap_allocated_pages = 1;
    s->ruby_meta.heap_live_slots = n;
    s->ruby_meta.heap_free_slots = 100 - n;
    s->ruby_meta.flags = PTMD_RF_REFERENCES;
    s->ruby_page_rss[0] = s->ps;
    memset(&s->gc, 0, sizeof(s->gc));
    s->gc.count = 3;
    s->gc.heap_live_slots = n;
    v->ruby_meta = &s->ruby_meta;
    v->ruby_pages = s->ruby_pages;
    v->n_ruby_pages = 1;
    v->ruby_objects = s->objects;
    v->n_ruby_objects = n;
    v->ruby_words = s->ruby_words;
    v->n_ruby_words = words;
    v->ruby_names = s->names;
    v->ruby_names_len = off;
    v->n_ruby_names = NAME_COUNT;
    v->gc = &s->gc;
    v->ruby_page_rss = s->ruby_page_rss;
    v->n_ruby_page_rss = 1;

    v->n_refs = below(r, SYNTH_MAX_REFS / 4) * (v->n_chunks > 1);
    for (i = 0; i < v->n_refs; i++) {
        s->refs[i].from = (uint32_t)below(r, v->n_chunks);
        s->refs[i].to = (uint32_t)below(r, v->n_chunks);
    }
    v->refs = s->refs;
    v->n_int_refs = 2;
    for (i = 0; i < v->n_int_refs; i++) {
        s->int_refs[i].from = (uint32_t)below(r, v->n_chunks);
        s->int_refs[i].to = (uint32_t)below(r, v->n_chunks);
    }
    v->int_refs = s->int_refs;
    memset(s->roots, 0, sizeof(s->roots));
    s->roots[0].start = 0x600000;
    s->roots[0].end = 0x601000;
    s->roots[0].kind = PTMD_ROOT_DATA;
    strcpy(s->roots[0].name, "/usr/bin/synth");
    v->roots = s->roots;
    v->n_roots = 1;
    v->n_root_refs = 1 + below(r, 8);
    for (i = 0; i < v->n_root_refs; i++) {
        s->root_refs[i].where = 0x600000 + 8 * i;
        s->root_refs[i].root = 0;
        s->root_refs[i].chunk = (uint32_t)below(r, v->n_chunks);
    }
    v->root_refs = s->root_refs;
    v->sections |= PTMD_SECTION_BIT(PTMD_SEC_RUBY_META) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_PAGES) |
                   PTMD_SECTION_BIT(PTMD_SEC_RUBY_OBJECTS) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_WORDS) |
                   PTMD_SECTION_BIT(PTMD_SEC_RUBY_NAMES) | PTMD_SECTION_BIT(PTMD_SEC_GC) |
                   PTMD_SECTION_BIT(PTMD_SEC_RUBY_PAGE_RSS) | PTMD_SECTION_BIT(PTMD_SEC_REFS) |
                   PTMD_SECTION_BIT(PTMD_SEC_INT_REFS) | PTMD_SECTION_BIT(PTMD_SEC_ROOTS) |
                   PTMD_SECTION_BIT(PTMD_SEC_ROOT_REFS);
}

/* Ruby's object graph over the objects: up to four references each, a few roots (one a global
 * variable's), names for some references. Its own random stream, so that the rest of the heap is the
 * same with or without it. */
static void add_graph(synth *s, uint64_t seed)
{
    ptmd_view *v = &s->view;
    uint64_t g = seed * 0x9E3779B97F4A7C15ull + 7, *r = &g;
    size_t i, n = v->n_ruby_objects, e = 0, names = 0, off = v->ruby_names_len;
    uint32_t category = (uint32_t)v->n_ruby_names, symbol = category + 1;
    off = add_name(s->names, off, 0, PTMD_NAME_ROOT_CATEGORY, "vm");
    off = add_name(s->names, off, 0x1234, PTMD_NAME_SYMBOL, "@items");
    v->ruby_names_len = off;
    v->n_ruby_names += 2;
    for (i = 0; i < n; i++) {
        uint32_t k, m = (uint32_t)below(r, 5);
        for (k = 0; k < m; k++) {
            s->edges[e] = (uint32_t)below(r, n);
            if (below(r, 4) == 0) {
                ptmd_ruby_edge_name *en = &s->edge_names[names++ % SYNTH_MAX_OBJECTS];
                memset(en, 0, sizeof(*en));
                en->edge = (uint32_t)e;
                en->kind = below(r, 2) ? PTMD_EDGE_IVAR : PTMD_EDGE_INDEX;
                en->detail = en->kind == PTMD_EDGE_IVAR ? symbol : k;
            }
            e++;
        }
        s->edge_counts[i] = m;
    }
    memset(&s->graph, 0, sizeof(s->graph));
    s->graph.named_limit = 4096;
    v->ruby_graph = &s->graph;
    v->ruby_edge_counts = s->edge_counts;
    v->n_ruby_edge_counts = n;
    v->ruby_edges = s->edges;
    v->n_ruby_edges = e;
    v->n_ruby_roots = 1 + below(r, 3);
    for (i = 0; i < v->n_ruby_roots; i++) {
        memset(&s->ruby_roots[i], 0, sizeof(s->ruby_roots[i]));
        s->ruby_roots[i].object = (uint32_t)below(r, n);
        s->ruby_roots[i].category = category;
        s->ruby_roots[i].name = i == 0 ? symbol : PTMD_NO_NAME;
        s->ruby_roots[i].flags = i == 2 ? PTMD_RRF_CONSERVATIVE : 0;
    }
    v->ruby_roots = s->ruby_roots;
    v->ruby_edge_names = s->edge_names;
    v->n_ruby_edge_names = names < SYNTH_MAX_OBJECTS ? names : 0;
    v->sections |= PTMD_SECTION_BIT(PTMD_SEC_RUBY_GRAPH) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_EDGE_COUNTS) |
                   PTMD_SECTION_BIT(PTMD_SEC_RUBY_EDGES) | PTMD_SECTION_BIT(PTMD_SEC_RUBY_ROOTS) |
                   PTMD_SECTION_BIT(PTMD_SEC_RUBY_EDGE_NAMES);
}

/* The main heap's mapping and a file's, as smaps would list them. */
static void add_mappings(synth *s)
{
    ptmd_view *v = &s->view;
    const ptmd_heap_rec *h = &s->heaps[0];
    memset(&s->mappings_head, 0, sizeof(s->mappings_head));
    memset(s->mappings, 0, sizeof(s->mappings));
    memcpy(s->mapping_paths, "[heap]/lib/x.so", 15);
    s->mappings[0].start = h->page_base;
    s->mappings[0].end = h->reserved_end;
    s->mappings[0].rss = s->mappings[0].private_bytes = h->reserved_end - h->page_base;
    s->mappings[0].path_len = 6;
    s->mappings[0].prot = PTMD_MP_READ | PTMD_MP_WRITE;
    s->mappings[0].kind = PTMD_MK_BRK;
    s->mappings[1].start = FILE_MAP;
    s->mappings[1].end = FILE_MAP + 4 * s->ps;
    s->mappings[1].rss = s->mappings[1].shared_bytes = 2 * s->ps;
    s->mappings[1].path_off = 6;
    s->mappings[1].path_len = 9;
    s->mappings[1].prot = PTMD_MP_READ | PTMD_MP_EXEC;
    s->mappings[1].kind = PTMD_MK_FILE;
    s->mappings_head.paths_len = 15;
    s->mappings_head.vm_rss = s->mappings[0].rss + s->mappings[1].rss;
    v->mappings_head = &s->mappings_head;
    v->mappings = s->mappings;
    v->n_mappings = 2;
    v->mapping_paths = s->mapping_paths;
    v->sections |= PTMD_SECTION_BIT(PTMD_SEC_MAPPINGS);
}

void synth_build(synth *s, uint64_t seed, const synth_opts *o)
{
    ptmd_view *v = &s->view;
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
    int k;
    memset(v, 0, sizeof(*v));
    memset(&s->meta, 0, sizeof(s->meta));
    s->ps = o->page_size ? o->page_size : 4096;
    memset(&s->mallinfo2, 0, sizeof(s->mallinfo2));
    v->sections =
        PTMD_SECTION_BIT(PTMD_SEC_META) | PTMD_SECTION_BIT(PTMD_SEC_STRINGS) | PTMD_SECTION_BIT(PTMD_SEC_MALLINFO2) |
        PTMD_SECTION_BIT(PTMD_SEC_MALLOC_INFO) | PTMD_SECTION_BIT(PTMD_SEC_ARENAS) | PTMD_SECTION_BIT(PTMD_SEC_HEAPS) |
        PTMD_SECTION_BIT(PTMD_SEC_CHUNKS) | PTMD_SECTION_BIT(PTMD_SEC_PAGES) | PTMD_SECTION_BIT(PTMD_SEC_THREADS) |
        PTMD_SECTION_BIT(PTMD_SEC_ANOMALIES) | PTMD_SECTION_BIT(PTMD_SEC_TRIM_CHECK);
    add_heap(s, &r, o, MAIN_START + 16 * below(&r, 4), 0, PTMD_HEAP_SBRK);
    add_arena(s, 0, 0x7f00001000ull, 1);
    if (o->arenas > 1) {
        add_heap(s, &r, o, HEAP_START, 1, PTMD_HEAP_MMAP_HEAP);
        add_arena(s, 1, HEAP_START + 32, 0);
    }
    for (k = 0; k < o->mmapped && v->n_heaps < SYNTH_MAX_HEAPS; k++)
        add_heap(s, &r, o, MMAP_START + 0x100000ull * (uint64_t)k, PTMD_NO_ARENA, PTMD_HEAP_MMAPPED_CHUNK);
    s->meta.pid = 4242;
    s->meta.page_size = s->ps;
    s->meta.main_arena = s->arenas[0].address;
    s->meta.sbrk_base = s->heaps[0].start;
    s->meta.heap_max_size = 64ull << 20;
    s->meta.tcache_bins = 64;
    s->meta.tcache_count = 7;
    s->meta.symbol_source = PTMD_SYMSRC_SYMTAB;
    s->meta.residency_source = PTMD_RESIDENCY_PAGEMAP;
    s->meta.glibc_major = 2;
    s->meta.glibc_minor = 36;
    s->meta.flags = PTMD_MF_TCACHE | PTMD_MF_MP | PTMD_MF_NO_ORACLES; /* MALLINFO2 zero, MALLOC_INFO empty */
    /* a third are fork snapshots with their parent's sharing, a third older snapshots without it */
    if (seed % 3) s->meta.flags |= PTMD_MF_FORK_CHILD | (seed % 3 == 1 ? PTMD_MF_SHARING_BEFORE_FORK : 0);
    s->meta.n_mmaps = (uint64_t)o->mmapped;
    memcpy(s->strings, "\1\0k\1\0\0\0v", 8);
    for (k = 0; k < SYNTH_MAX_CHUNKS && (size_t)k < v->n_chunks; k++) s->words[k] = s->chunks[k].word;
    memset(s->trim, 0, sizeof(s->trim));
    v->meta = &s->meta;
    v->mallinfo2 = &s->mallinfo2;
    v->malloc_info = s->malloc_info;
    v->malloc_info_len = 0;
    v->strings = s->strings;
    v->strings_len = 8;
    v->arenas = s->arenas;
    v->heaps = s->heaps;
    v->chunks = s->chunks;
    v->chunk_words = s->words;
    v->pages = s->pages;
    v->anomalies = s->anomalies;
    v->trim_released = s->trim;
    v->n_trim_released = v->n_arenas;
    ptmd_heap_order(s->heaps, v->n_heaps, s->heap_order);
    v->heap_order = s->heap_order;
    add_tcache(s);
    if (o->ruby) {
        add_ruby(s, &r);
        if (seed % 3 != 0) add_graph(s, seed);
    }
    add_mappings(s);
    if (o->outside) {
        memset(&s->source, 0, sizeof(s->source));
        s->source.kind = PTMD_SOURCE_KIND_PID;
        s->source.flags = PTMD_SRCF_NO_RUBY | PTMD_SRCF_NO_REFERENCES | PTMD_SRCF_NO_ORACLES;
        s->source.pid = 4242;
        s->source.attempts = 1;
        v->source = &s->source;
        v->sections |= PTMD_SECTION_BIT(PTMD_SEC_SOURCE);
    }
}

static int put(unsigned char *out, size_t cap, size_t *at, const void *data, uint64_t len)
{
    if (len > cap - *at) return -1;
    if (len) memcpy(out + *at, data, (size_t)len);
    *at += (size_t)len;
    return 0;
}

size_t synth_image(const ptmd_view *v, unsigned char *out, size_t cap)
{
    static const unsigned char zeros[8];
    uint32_t version = PTMD_FORMAT_VERSION, mark = PTMD_ENDIAN_MARK, type;
    ptmd_section_hdr h;
    ptmd_footer f;
    size_t at = 0;
    memset(&f, 0, sizeof(f));
    if (put(out, cap, &at, PTMD_MAGIC, 8) || put(out, cap, &at, &version, 4) || put(out, cap, &at, &mark, 4)) return 0;
    for (type = 0; type < 64; type++) {
        ptmd_section_payload p;
        size_t k;
        if (!ptmd_view_has(v, type) || ptmd_view_section(v, type, &p) != 0) continue;
        memset(&h, 0, sizeof(h));
        h.type = type;
        h.count = p.count;
        h.length = p.length;
        if (put(out, cap, &at, &h, sizeof(h))) return 0;
        for (k = 0; k < p.n_parts; k++)
            if (put(out, cap, &at, p.part[k].data, p.part[k].len)) return 0;
        if (put(out, cap, &at, zeros, (8 - (p.length & 7)) & 7)) return 0;
        f.n_sections++;
    }
    f.n_chunks = v->n_chunks;
    f.body_length = at;
    f.magic = PTMD_FOOTER_MAGIC;
    memset(&h, 0, sizeof(h));
    h.type = PTMD_SEC_END;
    h.count = 1;
    h.length = sizeof(f);
    if (put(out, cap, &at, &h, sizeof(h)) || put(out, cap, &at, &f, sizeof(f))) return 0;
    synth_reseal(out, at);
    return at;
}

void synth_reseal(unsigned char *img, size_t len)
{
    ptmd_footer f;
    size_t body = len - PTMD_END_SIZE;
    memcpy(&f, img + body + sizeof(ptmd_section_hdr), sizeof(f));
    f.crc32 = ptmd_crc32(0, img, body);
    memcpy(img + body + sizeof(ptmd_section_hdr), &f, sizeof(f));
}
