/* The one dump reader every tool shares. A corrupt, truncated or foreign file is reported, never
 * trusted: nothing is dereferenced before its bounds are checked. */
#include "format/reader.h"
#include "format/crc32.h"
#include "format/glibc.h"

#include <string.h>

#define FAIL(...) return ptmd_fail(err, PTMD_E_FORMAT, __VA_ARGS__)

/* malloc_info() writes XML in plain ASCII: tabs, newlines and printable characters only. */
static int check_text(const unsigned char *p, uint64_t n)
{
    uint64_t i;
    for (i = 0; i < n; i++)
        if (!(p[i] == '\n' || p[i] == '\t' || (p[i] >= 0x20 && p[i] < 0x7f))) return 0;
    return 1;
}

static int check_strings(const unsigned char *p, size_t len)
{
    size_t off = 0;
    while (off < len) {
        uint16_t kl;
        uint32_t vl;
        if (len - off < 2) return 0;
        memcpy(&kl, p + off, 2);
        off += 2;
        if (len - off < kl) return 0;
        off += kl;
        if (len - off < 4) return 0;
        memcpy(&vl, p + off, 4);
        off += 4;
        if (len - off < vl) return 0;
        off += vl;
    }
    return 1;
}

/* A page size a Linux kernel can have (4 KiB to 1 GiB, a power of two is checked too). */
#define PTMD_MIN_PAGE_SIZE 256ull
#define PTMD_MAX_PAGE_SIZE (1ull << 30)
/* Ruby pages hold at most 64 KiB of 40-byte slots (Ruby 3.4) or 16 KiB of them before: far fewer. */
#define PTMD_MAX_SLOTS_PER_PAGE 65536ull

/* Each heap: a known kind, an arena exactly when it is no mmapped chunk (the main arena exactly when it
 * is a brk or main_mmap region), start <= end <= reserved_end,
 * the pages the walk gives it (page_base the page holding start, n_pages to the page holding end),
 * the heaps' pages one after another in file order, together the PAGES section. */
static int check_heaps(const ptmd_view *v, const char *name, ptmd_err *err)
{
    uint64_t ps = v->meta->page_size, next_page = 0;
    size_t i;
    for (i = 0; i < v->n_heaps; i++) {
        const ptmd_heap_rec *h = &v->heaps[i];
        uint64_t pages;
        if (h->kind < PTMD_HEAP_SBRK || h->kind >= PTMD_HEAP_KIND_COUNT)
            FAIL("%s: heap %zu has an unknown kind %u", name, i, h->kind);
        if ((h->kind == PTMD_HEAP_MMAPPED_CHUNK) != (h->arena == PTMD_NO_ARENA) ||
            (h->arena != PTMD_NO_ARENA && h->arena >= v->n_arenas))
            FAIL("%s: heap %zu names arena %u, which does not fit its kind or does not exist", name, i, h->arena);
        /* the brk region and the regions mmapped in its place are the main arena's; heap_info regions are not */
        if (h->arena != PTMD_NO_ARENA &&
            ((h->kind == PTMD_HEAP_MMAP_HEAP) == ((v->arenas[h->arena].flags & PTMD_AF_MAIN) != 0)))
            FAIL("%s: heap %zu is a %s region of arena %u, which is %sthe main arena", name, i,
                 h->kind == PTMD_HEAP_MMAP_HEAP ? "heap_info" : "main arena", h->arena,
                 h->kind == PTMD_HEAP_MMAP_HEAP ? "" : "not ");
        if (h->end < h->start || h->reserved_end < h->end)
            FAIL("%s: heap %zu has bad bounds (start %#llx, end %#llx, reserved end %#llx)", name, i,
                 (unsigned long long)h->start, (unsigned long long)h->end, (unsigned long long)h->reserved_end);
        if (h->page_base != (h->start & ~(ps - 1)))
            FAIL("%s: heap %zu has page_base %#llx, not the page of its start", name, i,
                 (unsigned long long)h->page_base);
        pages = h->end > h->page_base ? (h->end - h->page_base - 1) / ps + 1 : 0;
        if (h->n_pages != pages)
            FAIL("%s: heap %zu has n_pages %llu where its bounds span %llu", name, i, (unsigned long long)h->n_pages,
                 (unsigned long long)pages);
        if (h->first_page != next_page)
            FAIL("%s: heap %zu has first_page %llu, not %llu", name, i, (unsigned long long)h->first_page,
                 (unsigned long long)next_page);
        if (h->n_pages > v->n_pages - next_page) FAIL("%s: heap %zu has more pages than the PAGES section", name, i);
        next_page += h->n_pages;
    }
    if (next_page != v->n_pages)
        FAIL("%s: %llu pages belong to no heap", name, (unsigned long long)(v->n_pages - next_page));
    return 0;
}

static int check_names(const unsigned char *p, size_t len, uint64_t count)
{
    size_t off = 0;
    uint64_t n = 0;
    while (off < len) {
        uint32_t l;
        if (len - off < 16) return 0;
        memcpy(&l, p + off + 12, 4);
        off += 16;
        if (l > len - off) return 0;
        off += (l + 7) & ~7u;
        if (off > len) return 0;
        n++;
    }
    return n == count;
}

/* MAPPINGS: the head, `count` records and the paths area, exactly; each record a range in address order
 * after the one before, no more resident or swapped bytes than it spans, a known kind, its path inside
 * the paths area. */
static int read_mappings(const unsigned char *p, uint64_t count, uint64_t length, ptmd_view *v, const char *name,
                         ptmd_err *err)
{
    const ptmd_mappings_head *h = (const void *)p;
    uint64_t i, prev_end = 0;
    if (length < sizeof(*h) || count > (length - sizeof(*h)) / sizeof(ptmd_mapping_rec))
        FAIL("%s: the mappings section holds %llu records in %llu bytes", name, (unsigned long long)count,
             (unsigned long long)length);
    if (h->paths_len != length - sizeof(*h) - count * sizeof(ptmd_mapping_rec))
        FAIL("%s: the mappings section's paths do not fill it", name);
    v->mappings_head = h;
    v->mappings = (const void *)(p + sizeof(*h));
    v->n_mappings = count;
    v->mapping_paths = (const char *)(p + sizeof(*h) + count * sizeof(ptmd_mapping_rec));
    for (i = 0; i < count; i++) {
        const ptmd_mapping_rec *r = &v->mappings[i];
        if (r->end <= r->start || r->start < prev_end || r->kind >= PTMD_MK_COUNT || r->rss > r->end - r->start ||
            r->swap > r->end - r->start || r->private_bytes > r->rss || r->shared_bytes > r->rss - r->private_bytes ||
            r->path_off > h->paths_len || r->path_len > h->paths_len - r->path_off)
            FAIL("%s: mapping %llu has bad bounds, figures, kind or path", name, (unsigned long long)i);
        prev_end = r->end;
    }
    return 0;
}

/* GC and RUBY_PAGE_RSS come with the Ruby sections; a page's resident bytes are at most the pages its
 * slots span. */
static int check_rss_sections(const ptmd_view *v, const char *name, ptmd_err *err)
{
    uint64_t ps = v->meta->page_size;
    size_t i;
    if ((v->gc || v->ruby_page_rss) && !v->ruby_meta) FAIL("%s: GC figures without the Ruby sections", name);
    if (!v->ruby_page_rss) return 0;
    if (v->n_ruby_page_rss != v->n_ruby_pages) FAIL("%s: the Ruby page residency does not cover every Ruby page", name);
    for (i = 0; i < v->n_ruby_pages; i++) {
        const ptmd_ruby_page *p = &v->ruby_pages[i];
        uint64_t span = ((p->end + ps - 1) & ~(ps - 1)) - (p->start & ~(ps - 1));
        if (v->ruby_page_rss[i] > span || v->ruby_page_rss[i] % ps)
            FAIL("%s: Ruby page %zu has %llu resident bytes, more than it spans or not whole pages", name, i,
                 (unsigned long long)v->ruby_page_rss[i]);
    }
    return 0;
}

/* Roots: a known kind, start < end, a NUL-terminated name; each root reference names an existing
 * root and chunk and a word inside its root; chunk references through Integers name chunks. The
 * reference sections come only with the roots. */
static int check_roots(const ptmd_view *v, const char *name, ptmd_err *err)
{
    size_t i;
    if ((v->root_refs || v->int_refs || v->inner_refs || v->root_inner_refs) && !v->roots)
        FAIL("%s: root, Integer or interior references without a roots section", name);
    for (i = 0; i < v->n_roots; i++) {
        const ptmd_root_rec *r = &v->roots[i];
        if (r->kind < PTMD_ROOT_DATA || r->kind >= PTMD_ROOT_KIND_COUNT)
            FAIL("%s: root %zu has an unknown kind %u", name, i, r->kind);
        if (r->end <= r->start) FAIL("%s: root %zu has bad bounds", name, i);
        if (!memchr(r->name, 0, sizeof(r->name))) FAIL("%s: root %zu has an unterminated name", name, i);
    }
    for (i = 0; i < v->n_root_refs; i++) {
        const ptmd_root_ref *rr = &v->root_refs[i];
        if (rr->root >= v->n_roots || rr->chunk >= v->n_chunks)
            FAIL("%s: root reference %zu names a root or chunk that does not exist", name, i);
        if (rr->where < v->roots[rr->root].start || rr->where >= v->roots[rr->root].end)
            FAIL("%s: root reference %zu lies outside its root", name, i);
    }
    for (i = 0; i < v->n_int_refs; i++)
        if (v->int_refs[i].from >= v->n_chunks || v->int_refs[i].to >= v->n_chunks)
            FAIL("%s: Integer reference %zu names a chunk that does not exist", name, i);
    for (i = 0; i < v->n_inner_refs; i++)
        if (v->inner_refs[i].from >= v->n_chunks || v->inner_refs[i].to >= v->n_chunks)
            FAIL("%s: interior reference %zu names a chunk that does not exist", name, i);
    for (i = 0; i < v->n_root_inner_refs; i++) {
        const ptmd_root_ref *rr = &v->root_inner_refs[i];
        if (rr->root >= v->n_roots || rr->chunk >= v->n_chunks)
            FAIL("%s: root interior reference %zu names a root or chunk that does not exist", name, i);
        if (rr->where < v->roots[rr->root].start || rr->where >= v->roots[rr->root].end)
            FAIL("%s: root interior reference %zu lies outside its root", name, i);
    }
    return 0;
}

/* The dump's own mappings: each a range no larger than the address space, resident within it. */
static int check_scratch(const ptmd_view *v, const char *name, ptmd_err *err)
{
    size_t i;
    for (i = 0; i < v->n_scratch; i++) {
        const ptmd_scratch_rec *r = &v->scratch[i];
        if (!r->length || r->start + r->length < r->start || r->resident > r->length)
            FAIL("%s: scratch mapping %zu has bad bounds or residency", name, i);
    }
    return 0;
}

/* Each tcache entry names a chunk of state tcache, a thread record and a tcache bin glibc can have. */
static int check_tcache_entries(const ptmd_view *v, const char *name, ptmd_err *err)
{
    size_t i;
    for (i = 0; i < v->n_tcache_entries; i++) {
        const ptmd_tcache_entry *e = &v->tcache_entries[i];
        if (e->chunk >= v->n_chunks || e->thread >= v->n_threads)
            FAIL("%s: tcache entry %zu names a chunk or thread that does not exist", name, i);
        if ((v->chunk_words[e->chunk] & 0xf) != PTMD_ST_TCACHE)
            FAIL("%s: tcache entry %zu names chunk %u, which is not in a tcache", name, i, e->chunk);
        if (e->bin >= PTMD_TCACHE_MAX_BINS_MAX) FAIL("%s: tcache entry %zu has bin %u", name, i, e->bin);
    }
    return 0;
}

/* The code records come with the Ruby sections and their own names, in strictly increasing address
 * order (the load looks objects up in them by address), each kind known and each name index in range. */
static int check_code(const ptmd_view *v, const char *name, ptmd_err *err)
{
    size_t i;
    if (!v->ruby_code && !v->ruby_code_names) return 0;
    if (!v->ruby_code || !v->ruby_code_names || !v->ruby_objects)
        FAIL("%s: the Ruby code sections come without each other or without the Ruby objects", name);
    for (i = 0; i < v->n_ruby_code; i++) {
        const ptmd_ruby_code *c = &v->ruby_code[i];
        if (c->kind < PTMD_CODE_MODULE || c->kind >= PTMD_CODE_KIND_COUNT)
            FAIL("%s: Ruby code record %zu has an unknown kind %u", name, i, c->kind);
        if ((c->module != PTMD_NO_NAME && c->module >= v->n_ruby_code_names) ||
            (c->method != PTMD_NO_NAME && c->method >= v->n_ruby_code_names) ||
            (c->path != PTMD_NO_NAME && c->path >= v->n_ruby_code_names))
            FAIL("%s: Ruby code record %zu names a module, method or path that does not exist", name, i);
        if (i && c->address <= v->ruby_code[i - 1].address)
            FAIL("%s: Ruby code record %zu is out of address order", name, i);
    }
    return 0;
}

/* SOURCE: a known kind, the reserved field zero. */
static int check_source(const ptmd_view *v, const char *name, ptmd_err *err)
{
    if (v->source->kind < PTMD_SOURCE_KIND_SELF || v->source->kind >= PTMD_SOURCE_KIND_COUNT)
        FAIL("%s: source section: unknown kind %u", name, v->source->kind);
    if (v->source->reserved) FAIL("%s: source section: reserved field not zero", name);
    return 0;
}

static int check_graph_rec(const ptmd_view *v, const char *name, ptmd_err *err)
{
    if (v->ruby_graph->reserved) FAIL("%s: ruby_graph section: reserved field not zero", name);
    return 0;
}

static int check_alloc_trace_rec(const ptmd_view *v, const char *name, ptmd_err *err)
{
    const ptmd_alloc_trace_rec *t = v->alloc_trace;
    if (t->reserved) FAIL("%s: alloc_trace section: reserved field not zero", name);
    if (!t->every || t->sampled > t->seen || t->dropped > t->sampled)
        FAIL("%s: alloc_trace section: its counts do not hold together", name);
    return 0;
}

static int check_native_track_rec(const ptmd_view *v, const char *name, ptmd_err *err)
{
    const ptmd_native_track_rec *t = v->native_track;
    uint32_t i;
    if (t->reserved) FAIL("%s: native_track section: reserved field not zero", name);
    if (!t->mean_bytes || t->dropped > t->sampled || t->freed > t->sampled || t->n_regions > PTMD_NATIVE_MAX_REGIONS)
        FAIL("%s: native_track section: its counts do not hold together", name);
    for (i = 0; i < PTMD_NATIVE_MAX_REGIONS; i++) {
        const ptmd_native_region *r = &t->regions[i];
        if (i >= t->n_regions ? (r->start || r->length || r->resident)
                              : (r->resident > r->length || r->start + r->length < r->start))
            FAIL("%s: native_track section: region %u does not hold together", name, i);
    }
    return 0;
}

static int check_snapshot(const ptmd_view *v, const char *name, ptmd_err *err)
{
    if (v->snapshot->reserved) FAIL("%s: snapshot section: reserved field not zero", name);
    return 0;
}

typedef struct {
    uint32_t type;
    size_t rec; /* fixed record size, 0 for byte sections */
    int required;
    int (*rule)(const ptmd_view *v, const char *name, ptmd_err *err);
} section_rule;

#define RULE(constant, value, sname, required, record, rule, shape, ...)                                               \
    { constant, PTMD_SHAPE_RECORD_SIZE(shape, record), required, rule },
static const section_rule rules[] = { PTMD_SECTIONS(RULE) };
#define N_RULES (sizeof(rules) / sizeof(rules[0]))

/* Each shape's payload onto the view's fields (v, payload, sh, name and err are read_section's). */
#define READ_ONE(sname, record, f)                                                                                     \
    v->f = (const void *)payload;                                                                                      \
    if (sh->count != 1) FAIL("%s: bad " sname " section", name);
#define READ_RECORDS(sname, record, f, n)                                                                              \
    v->f = (const void *)payload;                                                                                      \
    v->n = sh->count;
#define READ_PAIRS(sname, record, f, len)                                                                              \
    if (!check_strings(payload, sh->length)) FAIL("%s: damaged " sname " section", name);                              \
    v->f = payload;                                                                                                    \
    v->len = sh->length;
#define READ_TEXT(sname, record, f, len)                                                                               \
    if (!check_text(payload, sh->length)) FAIL("%s: damaged " sname " section (not ASCII text)", name);                \
    v->f = (const void *)payload;                                                                                      \
    v->len = sh->length;
#define READ_NAMES(sname, record, f, len, n)                                                                           \
    v->f = payload;                                                                                                    \
    v->len = sh->length;                                                                                               \
    v->n = sh->count;                                                                                                  \
    if (!check_names(payload, sh->length, sh->count)) FAIL("%s: damaged " sname " section", name);
#define READ_MAPPINGS(sname, record, head, f, n, paths)                                                                \
    if (read_mappings(payload, sh->count, sh->length, v, name, err) != 0) return -1;
#define READ(constant, value, sname, required, record, rule, shape, ...)                                               \
    case constant: READ_##shape(sname, record, __VA_ARGS__) break;

/* One section of a known type: its records against its length, its fields in the view, its rule. */
static int read_section(const section_rule *r, const ptmd_section_hdr *sh, const unsigned char *payload, ptmd_view *v,
                        const char *name, ptmd_err *err)
{
    if (r->rec && (sh->count > sh->length / r->rec || sh->count * r->rec != sh->length))
        FAIL("%s: section %s has %llu records in %llu bytes", name, ptmd_section_name(sh->type),
             (unsigned long long)sh->count, (unsigned long long)sh->length);
    switch (sh->type) {
        PTMD_SECTIONS(READ)
    }
    v->sections |= PTMD_SECTION_BIT(sh->type);
    return r->rule ? r->rule(v, name, err) : 0;
}

/* The preamble and the end section: the file is a dump of a version this reader knows, whole, with
 * its checksum right. Sets *body to the length before the end section and *footer to the footer. */
static int check_frame(const unsigned char *data, size_t len, const char *name, size_t *body,
                       const ptmd_footer **footer, ptmd_err *err)
{
    uint32_t version, mark;
    const ptmd_section_hdr *eh;
    const ptmd_footer *f;

    if (len == 0) FAIL("%s: empty file, not a ptmalloc_dump dump", name);
    if (len < PTMD_PREAMBLE_SIZE || memcmp(data, PTMD_MAGIC, 8) != 0)
        FAIL("%s: not a ptmalloc_dump dump (bad magic)", name);
    memcpy(&version, data + 8, 4);
    memcpy(&mark, data + 12, 4);
    if (mark != PTMD_ENDIAN_MARK) FAIL("%s: written with a foreign byte order", name);
    if (version > PTMD_FORMAT_VERSION)
        FAIL("%s: format version %u is newer than this ptmalloc_dump reads (%u); upgrade the gem", name, version,
             PTMD_FORMAT_VERSION);
    if (version == 0) FAIL("%s: invalid format version 0", name);
    if (len < PTMD_PREAMBLE_SIZE + PTMD_END_SIZE || (len & 7))
        FAIL("%s: truncated (%zu bytes, no end section)", name, len);
    *body = len - PTMD_END_SIZE;
    eh = (const ptmd_section_hdr *)(const void *)(data + *body);
    f = (const ptmd_footer *)(const void *)(data + *body + sizeof(*eh));
    if (eh->type != PTMD_SEC_END || eh->length != sizeof(ptmd_footer) || f->magic != PTMD_FOOTER_MAGIC)
        FAIL("%s: truncated or damaged (no end section at byte %zu)", name, *body);
    if (f->body_length != *body)
        FAIL("%s: truncated (the end section says %llu bytes come before it, found %zu)", name,
             (unsigned long long)f->body_length, *body);
#ifndef PTMD_FUZZ_NO_CRC /* the fuzzer turns the checksum off so that mutations reach the structure checks */
    if (ptmd_crc32(0, data, *body) != f->crc32) FAIL("%s: checksum mismatch: the file is corrupt", name);
#endif
    *footer = f;
    return 0;
}

/* Every section before the end one, each checked against its rule; then the required ones and the
 * footer's counts. */
static int read_sections(const unsigned char *data, size_t body, const ptmd_footer *f, const char *name, ptmd_view *v,
                         ptmd_err *err)
{
    int seen[N_RULES];
    uint64_t sections = 0;
    size_t off, i;

    memset(seen, 0, sizeof(seen));
    for (off = PTMD_PREAMBLE_SIZE; off < body;) {
        const ptmd_section_hdr *sh;
        const unsigned char *payload;
        uint64_t padded;
        if (body - off < sizeof(*sh)) FAIL("%s: damaged section header at byte %zu", name, off);
        sh = (const ptmd_section_hdr *)(const void *)(data + off);
        off += sizeof(*sh);
        padded = (sh->length + 7) & ~7ull;
        if (sh->length > body - off || padded > body - off)
            FAIL("%s: section %s at byte %zu runs past the end of the file", name, ptmd_section_name(sh->type),
                 off - sizeof(*sh));
        payload = data + off;
        off += padded;
        sections++;
        for (i = 0; i < N_RULES; i++) {
            if (rules[i].type != sh->type) continue;
            if (seen[i]++) FAIL("%s: section %s appears twice", name, ptmd_section_name(sh->type));
            if (read_section(&rules[i], sh, payload, v, name, err) != 0) return -1;
        }
        /* unknown section types of the same format version are skipped */
    }
    for (i = 0; i < N_RULES; i++)
        if (rules[i].required && !seen[i])
            FAIL("%s: the %s section is missing", name, ptmd_section_name(rules[i].type));
    if (sections != f->n_sections)
        FAIL("%s: %llu sections found, the end section says %llu", name, (unsigned long long)sections,
             (unsigned long long)f->n_sections);
    if (v->n_chunks != f->n_chunks) FAIL("%s: chunk count differs from the end section", name);
    if (v->meta->page_size < PTMD_MIN_PAGE_SIZE || v->meta->page_size > PTMD_MAX_PAGE_SIZE ||
        (v->meta->page_size & (v->meta->page_size - 1)))
        FAIL("%s: bad page size %llu", name, (unsigned long long)v->meta->page_size);
    return 0;
}

/* The arenas name their heaps, and the heaps continue the chunk table to its end. */
static int check_arena_heaps(const ptmd_view *v, const char *name, ptmd_err *err)
{
    uint64_t next_chunk = 0;
    size_t i;
    for (i = 0; i < v->n_arenas; i++) {
        const ptmd_arena_rec *a = &v->arenas[i];
        uint64_t k;
        if ((uint64_t)a->first_heap + a->n_heaps > v->n_heaps)
            FAIL("%s: arena %zu names heaps that do not exist", name, i);
        for (k = a->first_heap; k < (uint64_t)a->first_heap + a->n_heaps; k++)
            if (v->heaps[k].arena != i)
                FAIL("%s: arena %zu names heap %llu, which belongs to another arena", name, i, (unsigned long long)k);
    }
    for (i = 0; i < v->n_heaps; i++) {
        if (v->heaps[i].first_chunk != next_chunk || v->heaps[i].n_chunks > v->n_chunks - next_chunk)
            FAIL("%s: heap %zu does not continue the chunk table", name, i);
        next_chunk += v->heaps[i].n_chunks;
    }
    if (next_chunk != v->n_chunks)
        FAIL("%s: %llu chunks belong to no heap", name, (unsigned long long)(v->n_chunks - next_chunk));
    return 0;
}

/* The Ruby sections whole, their pages in order with sane slot counts, their names and words. */
static int check_ruby(const ptmd_view *v, const char *name, ptmd_err *err)
{
    uint64_t words = 0;
    size_t i;
    if ((v->ruby_objects || v->ruby_pages || v->ruby_words || v->ruby_names) &&
        !(v->ruby_meta && v->ruby_objects && v->ruby_pages && v->ruby_words && v->ruby_names))
        FAIL("%s: the Ruby sections are incomplete", name);
    for (i = 0; i < v->n_ruby_pages; i++) {
        const ptmd_ruby_page *p = &v->ruby_pages[i];
        if (p->end <= p->start || !p->stride || p->stride > p->end - p->start ||
            (p->end - p->start) / p->stride > PTMD_MAX_SLOTS_PER_PAGE || p->total > (p->end - p->start) / p->stride ||
            p->live > p->total || p->free > p->total - p->live)
            FAIL("%s: Ruby page %zu has bad bounds or slot counts", name, i);
        if (i && p->start < v->ruby_pages[i - 1].end) FAIL("%s: Ruby page %zu is out of address order", name, i);
    }
    for (i = 0; i < v->n_ruby_objects; i++) {
        const ptmd_ruby_object *o = &v->ruby_objects[i];
        words += o->n_words;
        if ((o->klass != PTMD_NO_NAME && o->klass >= v->n_ruby_names) ||
            (o->data_type != PTMD_NO_NAME && o->data_type >= v->n_ruby_names))
            FAIL("%s: Ruby object %zu names a class that does not exist", name, i);
    }
    if (words != v->n_ruby_words) FAIL("%s: the Ruby objects' words do not add up", name);
    return 0;
}

/* The object graph whole: a count per object adding up to the references, every index an object, one
 * name at most per reference, in their order. */
static int check_graph(const ptmd_view *v, const char *name, ptmd_err *err)
{
    uint64_t edges = 0;
    size_t i;
    if (!v->ruby_graph && !v->ruby_edge_counts && !v->ruby_edges && !v->ruby_roots && !v->ruby_edge_names) return 0;
    if (!v->ruby_graph || !v->ruby_edge_counts || !v->ruby_edges || !v->ruby_roots || !v->ruby_edge_names ||
        !v->ruby_objects)
        FAIL("%s: the Ruby graph sections are incomplete", name);
    if (v->n_ruby_edge_counts != v->n_ruby_objects)
        FAIL("%s: the Ruby graph counts %zu objects' references where the dump has %zu objects", name,
             v->n_ruby_edge_counts, v->n_ruby_objects);
    for (i = 0; i < v->n_ruby_edge_counts; i++) edges += v->ruby_edge_counts[i];
    if (edges != v->n_ruby_edges) FAIL("%s: the Ruby objects' references do not add up", name);
    for (i = 0; i < v->n_ruby_edges; i++)
        if (v->ruby_edges[i] >= v->n_ruby_objects) FAIL("%s: Ruby reference %zu names no object", name, i);
    for (i = 0; i < v->n_ruby_roots; i++) {
        const ptmd_ruby_root *r = &v->ruby_roots[i];
        if (r->object >= v->n_ruby_objects || r->category >= v->n_ruby_names ||
            (r->name != PTMD_NO_NAME && r->name >= v->n_ruby_names) || (r->flags & ~PTMD_RRF_CONSERVATIVE))
            FAIL("%s: Ruby root %zu names an object or a name that does not exist", name, i);
    }
    for (i = 0; i < v->n_ruby_edge_names; i++) {
        const ptmd_ruby_edge_name *e = &v->ruby_edge_names[i];
        int by_name = e->kind != PTMD_EDGE_INDEX && e->kind != PTMD_EDGE_KEY_INTEGER && e->kind != PTMD_EDGE_STACK;
        if (e->edge >= v->n_ruby_edges || !e->kind || e->kind >= PTMD_EDGE_KIND_COUNT ||
            (by_name && e->detail >= v->n_ruby_names) || e->reserved)
            FAIL("%s: Ruby reference name %zu names a reference, a kind or a name that does not exist", name, i);
        if (i && e->edge <= v->ruby_edge_names[i - 1].edge)
            FAIL("%s: Ruby reference name %zu is out of order", name, i);
    }
    return 0;
}

static int site_name_ok(const ptmd_view *v, uint32_t i)
{
    return i == PTMD_NO_NAME || i < v->n_ruby_site_names;
}

/* The allocation sites whole: every stack a run of frames, every name a site name, every traced
 * object a stack, by address. */
static int check_sites(const ptmd_view *v, const char *name, ptmd_err *err)
{
    size_t i;
    if (!v->alloc_trace && !v->ruby_stacks && !v->ruby_frames && !v->ruby_traced && !v->ruby_site_names) return 0;
    if (!v->alloc_trace || !v->ruby_stacks || !v->ruby_frames || !v->ruby_traced || !v->ruby_site_names ||
        !v->ruby_objects)
        FAIL("%s: the allocation site sections are incomplete", name);
    for (i = 0; i < v->n_ruby_stacks; i++) {
        const ptmd_ruby_stack *s = &v->ruby_stacks[i];
        if (s->first > v->n_ruby_frames || s->n_frames > v->n_ruby_frames - s->first ||
            s->n_frames > v->alloc_trace->max_frames)
            FAIL("%s: traced stack %zu names frames that do not exist", name, i);
    }
    for (i = 0; i < v->n_ruby_frames; i++) {
        const ptmd_ruby_frame *f = &v->ruby_frames[i];
        if (!site_name_ok(v, f->path) || !site_name_ok(v, f->label) || !site_name_ok(v, f->owner) || f->line < 0)
            FAIL("%s: traced frame %zu names a name that does not exist", name, i);
    }
    for (i = 0; i < v->n_ruby_traced; i++) {
        const ptmd_ruby_traced *t = &v->ruby_traced[i];
        if (t->stack >= v->n_ruby_stacks || t->reserved)
            FAIL("%s: traced object %zu names a stack that does not exist", name, i);
        if (i && t->address <= v->ruby_traced[i - 1].address) FAIL("%s: traced object %zu is out of order", name, i);
    }
    return 0;
}

static int native_name_ok(const ptmd_view *v, uint32_t i)
{
    return i == PTMD_NO_NAME || i < v->n_native_names;
}

/* The tracker's sections whole: every stack runs of pcs and frames, every frame's names present,
 * every sample a stack, by address. */
static int check_native(const ptmd_view *v, const char *name, ptmd_err *err)
{
    size_t i;
    if (!v->native_track && !v->native_samples && !v->native_stacks && !v->native_pcs && !v->native_frames &&
        !v->native_names)
        return 0;
    if (!v->native_track || !v->native_samples || !v->native_stacks || !v->native_pcs || !v->native_frames ||
        !v->native_names)
        FAIL("%s: the allocation tracker's sections are incomplete", name);
    for (i = 0; i < v->n_native_stacks; i++) {
        const ptmd_native_stack *s = &v->native_stacks[i];
        if (s->first_pc > v->n_native_pcs || s->n_pcs > v->n_native_pcs - s->first_pc ||
            s->first_frame > v->n_native_frames || s->n_frames > v->n_native_frames - s->first_frame ||
            s->n_pcs > PTMD_NATIVE_MAX_PCS || s->n_frames > PTMD_NATIVE_MAX_FRAMES)
            FAIL("%s: tracked stack %zu names frames that do not exist", name, i);
    }
    for (i = 0; i < v->n_native_frames; i++) {
        const ptmd_ruby_frame *f = &v->native_frames[i];
        if (!native_name_ok(v, f->path) || !native_name_ok(v, f->label) || !native_name_ok(v, f->owner) || f->line < 0)
            FAIL("%s: tracked frame %zu names a name that does not exist", name, i);
    }
    for (i = 0; i < v->n_native_samples; i++) {
        const ptmd_native_sample *t = &v->native_samples[i];
        if (t->stack >= v->n_native_stacks || t->reserved)
            FAIL("%s: tracked block %zu names a stack that does not exist", name, i);
        if (i && t->address <= v->native_samples[i - 1].address) FAIL("%s: tracked block %zu is out of order", name, i);
    }
    return 0;
}

int ptmd_read_view(const unsigned char *data, size_t len, const char *name, ptmd_view *v, ptmd_err *err)
{
    const ptmd_footer *f = NULL;
    size_t body = 0, i;

    memset(v, 0, sizeof(*v));
    if (check_frame(data, len, name, &body, &f, err) != 0) return -1;
    if (read_sections(data, body, f, name, v, err) != 0) return -1;
    /* cross references: every number a later stage uses as a count, an index or a bound is checked
     * here, against the sections it names */
    if (check_arena_heaps(v, name, err) != 0) return -1;
    if (check_heaps(v, name, err) != 0) return -1;
    if (check_ruby(v, name, err) != 0) return -1;
    if (check_rss_sections(v, name, err) != 0) return -1;
    if (check_code(v, name, err) != 0) return -1;
    if (check_graph(v, name, err) != 0) return -1;
    if (check_sites(v, name, err) != 0) return -1;
    if (check_native(v, name, err) != 0) return -1;
    if (v->trim_released && v->n_trim_released != v->n_arenas)
        FAIL("%s: the trim check does not cover every arena", name);
    for (i = 0; i < v->n_refs; i++)
        if (v->refs[i].from >= v->n_chunks || v->refs[i].to >= v->n_chunks)
            FAIL("%s: reference %zu names a chunk that does not exist", name, i);
    if (check_roots(v, name, err) != 0) return -1;
    if (check_scratch(v, name, err) != 0) return -1;
    if (check_tcache_entries(v, name, err) != 0) return -1;
    for (i = 0; i < v->n_anomalies; i++)
        if (v->anomalies[i].arena != PTMD_NO_ARENA && v->anomalies[i].arena >= v->n_arenas)
            FAIL("%s: anomaly %zu names an arena that does not exist", name, i);
    return 0;
}

size_t ptmd_view_index_size(const ptmd_view *v)
{
    return v->n_chunks * sizeof(ptmd_chunk_rec) + (v->n_heaps + 1) * sizeof(uint32_t);
}

int ptmd_view_build_index(ptmd_view *v, void *mem, const char *name, ptmd_err *err)
{
    ptmd_chunk_rec *recs = mem;
    uint32_t *order = (uint32_t *)(void *)(recs + v->n_chunks);
    size_t i;
    for (i = 0; i < v->n_heaps; i++) {
        const ptmd_heap_rec *h = &v->heaps[i];
        uint64_t c, at = h->start;
        for (c = h->first_chunk; c < h->first_chunk + h->n_chunks; c++) {
            uint64_t word = v->chunk_words[c], size = word & PTMD_SIZE_MASK;
            if ((int)(word & 0xf) >= PTMD_ST_COUNT)
                FAIL("%s: chunk %llu has an unknown state", name, (unsigned long long)c);
            if (size == 0 || size > h->end - at)
                FAIL("%s: chunk %llu at %#llx runs past its heap", name, (unsigned long long)c, (unsigned long long)at);
            recs[c].addr = at;
            recs[c].word = word;
            at += size;
        }
        if (at != h->end)
            FAIL("%s: the chunks of heap %zu end at %#llx, the heap at %#llx", name, i, (unsigned long long)at,
                 (unsigned long long)h->end);
    }
    v->chunks = recs;
    ptmd_heap_order(v->heaps, v->n_heaps, order);
    for (i = 1; i < v->n_heaps; i++) /* every lookup by address assumes it */
        if (v->heaps[order[i]].start < v->heaps[order[i - 1]].end)
            FAIL("%s: heaps %u and %u overlap", name, order[i - 1], order[i]);
    v->heap_order = order;
    return 0;
}

long ptmd_view_heap_of_chunk(const ptmd_view *v, uint64_t ci)
{
    size_t lo = 0, hi = v->n_heaps;
    /* heaps are stored in walk order, their chunk ranges ascending and contiguous */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_heap_rec *h = &v->heaps[mid];
        if (ci < h->first_chunk) hi = mid;
        else if (ci >= h->first_chunk + h->n_chunks) lo = mid + 1;
        else return (long)mid;
    }
    return -1;
}

long ptmd_view_find_chunk(const ptmd_view *v, uint64_t addr, int containing)
{
    ptmd_chunk_index ix = { v->heaps, v->heap_order, v->n_heaps, v->chunks };
    return ptmd_chunk_find(&ix, addr, containing);
}
