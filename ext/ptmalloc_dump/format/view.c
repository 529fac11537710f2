/* What the writer writes of a view: each section's count and bytes, made from PTMD_SECTIONS; and the
 * names sections' entries one by one, and a Ruby object's slot size. */
#include "format/view.h"

#include <string.h>

#define PTMD_SECTION_FITS(constant, value, ...)                                                                        \
    _Static_assert((value) < 64, #constant " has a bit in ptmd_view.sections");
PTMD_SECTIONS(PTMD_SECTION_FITS)

static void add(ptmd_section_payload *p, const void *data, uint64_t len)
{
    p->part[p->n_parts].data = data;
    p->part[p->n_parts++].len = len;
    p->length += len;
}

#define PAYLOAD_ONE(record, f)                                                                                         \
    p->count = 1;                                                                                                      \
    add(p, v->f, sizeof(record));
#define PAYLOAD_RECORDS(record, f, n)                                                                                  \
    p->count = v->n;                                                                                                   \
    add(p, v->f, (uint64_t)v->n * sizeof(record));
#define PAYLOAD_PAIRS(record, f, len)                                                                                  \
    p->count = 0;                                                                                                      \
    add(p, v->f, v->len);
#define PAYLOAD_TEXT(record, f, len)                                                                                   \
    p->count = v->len;                                                                                                 \
    add(p, v->f, v->len);
#define PAYLOAD_NAMES(record, f, len, n)                                                                               \
    p->count = v->n;                                                                                                   \
    add(p, v->f, v->len);
#define PAYLOAD_MAPPINGS(record, head, f, n, paths)                                                                    \
    p->count = v->n;                                                                                                   \
    add(p, v->head, sizeof(*v->head));                                                                                 \
    add(p, v->f, (uint64_t)v->n * sizeof(record));                                                                     \
    add(p, v->paths, v->head->paths_len);
#define PAYLOAD(constant, value, name, required, record, rule, shape, ...)                                             \
    case constant: PAYLOAD_##shape(record, __VA_ARGS__) return 0;

int ptmd_view_section(const ptmd_view *v, uint32_t type, ptmd_section_payload *p)
{
    memset(p, 0, sizeof(*p));
    switch (type) {
        PTMD_SECTIONS(PAYLOAD)
    }
    return -1;
}

int ptmd_view_next_name(const unsigned char *names, size_t len, size_t *off, ptmd_view_name *out)
{
    if (*off + 16 > len) return 0;
    memcpy(&out->key, names + *off, 8);
    memcpy(&out->kind, names + *off + 8, 4);
    memcpy(&out->len, names + *off + 12, 4);
    out->name = (const char *)names + *off + 16;
    *off += 16 + ((out->len + 7u) & ~7u);
    return 1;
}

uint32_t ptmd_view_slot_size(const ptmd_view *v, uint64_t address)
{
    size_t lo = 0, hi = v->n_ruby_pages;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_ruby_page *p = &v->ruby_pages[mid];
        if (address < p->start) hi = mid;
        else if (address >= p->end) lo = mid + 1;
        else return p->stride;
    }
    return 0;
}

size_t ptmd_view_find_address(const void *records, size_t n, size_t stride, uint64_t key)
{
    const unsigned char *base = records;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t a;
        memcpy(&a, base + mid * stride, sizeof(a));
        if (a == key) return mid;
        if (a < key) lo = mid + 1;
        else hi = mid;
    }
    return n;
}
