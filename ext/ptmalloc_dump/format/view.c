/* What the writer writes of a view: each section's count and bytes, made from PTMD_SECTIONS; and the
 * RUBY_NAMES entries one by one. */
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

int ptmd_view_next_name(const ptmd_view *v, size_t *off, ptmd_view_name *out)
{
    if (*off + 16 > v->ruby_names_len) return 0;
    memcpy(&out->key, v->ruby_names + *off, 8);
    memcpy(&out->kind, v->ruby_names + *off + 8, 4);
    memcpy(&out->len, v->ruby_names + *off + 12, 4);
    out->name = (const char *)v->ruby_names + *off + 16;
    *off += 16 + ((out->len + 7u) & ~7u);
    return 1;
}
