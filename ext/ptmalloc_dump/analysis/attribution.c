/* Attribution: objects -> chunks by slot words, then along references (breadth first). */
#include "analysis/attribution.h"
#include "format/glibc.h"
#include "format/index.h"
#include "format/reader.h"

#include <stdlib.h>
#include <string.h>

/* ruby_value_type values (include/ruby/internal/value_type.h); stable since Ruby 2.x. */
#define RT_OBJECT 0x01
#define RT_STRING 0x05
#define RT_ARRAY 0x07
#define RT_HASH 0x08
#define RT_DATA 0x0c
#define RT_IMEMO 0x1a

const char *const ptmd_owner_category_names[PTMD_OWN_COUNT] = { PTMD_OWNER_CATEGORIES(PTMD_ENUM_NAME) };

int ptmd_owner_category(int t)
{
    switch (t) {
    case RT_STRING: return PTMD_OWN_STRING;
    case RT_ARRAY: return PTMD_OWN_ARRAY;
    case RT_HASH: return PTMD_OWN_HASH;
    case RT_OBJECT: return PTMD_OWN_OBJECT;
    case RT_DATA: return PTMD_OWN_DATA;
    case RT_IMEMO: return PTMD_OWN_IMEMO;
    default: return PTMD_OWN_OTHER_RUBY;
    }
}

int ptmd_attribute(const ptmd_view *v, ptmd_attribution *a)
{
    size_t i, w = 0;
    uint32_t *queue = NULL, *offs = NULL, *targets = NULL;
    size_t qh = 0, qt = 0;

    memset(a->owner, 0, v->n_chunks * sizeof(uint32_t));
    memset(a->direct, 0, v->n_chunks);
    a->ambiguous = a->direct_count = a->via_refs = 0;

    /* Ruby's own object pages, where they are malloc chunks (Ruby 2.x and 3.0) */
    for (i = 0; i < v->n_ruby_pages; i++) {
        long ci = ptmd_view_find_chunk(v, v->ruby_pages[i].start, 1);
        if (ci >= 0 && ptmd_rec_is_allocated(&v->chunks[ci])) a->owner[ci] = UINT32_MAX;
    }
    /* slot words */
    for (i = 0; i < v->n_ruby_objects; i++) {
        const ptmd_ruby_object *o = &v->ruby_objects[i];
        uint16_t k;
        for (k = 0; k < o->n_words && w < v->n_ruby_words; k++, w++) {
            long ci = ptmd_view_find_chunk(v, ptmd_mem2chunk(v->ruby_words[w]), 0);
            if (ci < 0 || !ptmd_rec_is_allocated(&v->chunks[ci])) continue;
            if (a->owner[ci] == 0) {
                a->owner[ci] = (uint32_t)(i + 1);
                a->direct[ci] = 1;
                a->direct_count++;
            } else if (a->owner[ci] != (uint32_t)(i + 1) && a->owner[ci] != UINT32_MAX) {
                if (a->direct[ci] == 1) a->ambiguous++;
                a->direct[ci] = 2; /* counted once */
            }
        }
    }
    /* references, breadth first from every owned chunk */
    if (v->n_refs) {
        offs = calloc(v->n_chunks + 1, sizeof(uint32_t));
        targets = malloc(v->n_refs * sizeof(uint32_t));
        queue = malloc((v->n_chunks ? v->n_chunks : 1) * sizeof(uint32_t));
        if (!offs || !targets || !queue) goto oom;
        for (i = 0; i < v->n_refs; i++) offs[v->refs[i].from + 1]++;
        for (i = 0; i < v->n_chunks; i++) offs[i + 1] += offs[i];
        {
            uint32_t *fill = calloc(v->n_chunks ? v->n_chunks : 1, sizeof(uint32_t));
            if (!fill) goto oom;
            for (i = 0; i < v->n_refs; i++) targets[offs[v->refs[i].from] + fill[v->refs[i].from]++] = v->refs[i].to;
            free(fill);
        }
        /* A string's buffer holds bytes and an array's or object's holds VALUEs (object slots, not
         * malloc memory): a word in them that looks like a chunk address is stale data, so ownership
         * spreads only out of the other chunks (tables, typed data structs, iseqs, ...). */
        for (i = 0; i < v->n_chunks; i++) {
            uint32_t o = a->owner[i];
            int t;
            if (!o || o == UINT32_MAX) continue;
            t = v->ruby_objects[o - 1].type;
            if (a->direct[i] && (t == RT_STRING || t == RT_ARRAY || t == RT_OBJECT)) continue;
            queue[qt++] = (uint32_t)i;
        }
        while (qh < qt) {
            uint32_t from = queue[qh++], e;
            for (e = offs[from]; e < offs[from + 1]; e++) {
                uint32_t to = targets[e];
                if (a->owner[to] || !ptmd_rec_is_allocated(&v->chunks[to])) continue;
                a->owner[to] = a->owner[from];
                a->via_refs++;
                queue[qt++] = to;
            }
        }
    }
    for (i = 0; i < v->n_chunks; i++) {
        const ptmd_chunk_rec *c = &v->chunks[i];
        uint32_t o = a->owner[i];
        if (!ptmd_rec_is_allocated(c)) a->category[i] = PTMD_OWN_NONE;
        else if (o == UINT32_MAX) a->category[i] = PTMD_OWN_RUBY_PAGE;
        else if (o) a->category[i] = (uint8_t)ptmd_owner_category(v->ruby_objects[o - 1].type);
        else a->category[i] = PTMD_OWN_NATIVE;
    }
    free(queue);
    free(offs);
    free(targets);
    return 0;
oom:
    free(queue);
    free(offs);
    free(targets);
    return -1;
}

static int by_object_address(const void *x, const void *y, void *ctx)
{
    const ptmd_ruby_object *o = ctx;
    uint64_t a = o[*(const uint32_t *)x].address, b = o[*(const uint32_t *)y].address;
    return a < b ? -1 : a > b;
}

void ptmd_object_order(const ptmd_view *v, uint32_t *order)
{
    size_t i;
    for (i = 0; i < v->n_ruby_objects; i++) order[i] = (uint32_t)i;
    ptmd_sort(order, v->n_ruby_objects, sizeof(uint32_t), by_object_address, (void *)v->ruby_objects);
}

void ptmd_owner_summary(const ptmd_view *v, const ptmd_attribution *a, ptmd_owner_totals *out)
{
    size_t i, nn = v->n_ruby_names;
    memset(out->category_bytes, 0, sizeof(out->category_bytes));
    memset(out->category_chunks, 0, sizeof(out->category_chunks));
    memset(out->type_bytes, 0, sizeof(out->type_bytes));
    memset(out->type_chunks, 0, sizeof(out->type_chunks));
    memset(out->class_bytes, 0, nn * sizeof(uint64_t));
    memset(out->class_chunks, 0, nn * sizeof(uint64_t));
    memset(out->class_garbage_bytes, 0, nn * sizeof(uint64_t));
    memset(out->data_type_bytes, 0, nn * sizeof(uint64_t));
    memset(out->data_type_chunks, 0, nn * sizeof(uint64_t));
    out->ruby_page_bytes = 0;
    for (i = 0; i < v->n_chunks; i++) {
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        uint32_t o = a->owner[i];
        out->category_bytes[a->category[i]] += size;
        out->category_chunks[a->category[i]]++;
        if (o && o != UINT32_MAX) {
            const ptmd_ruby_object *obj = &v->ruby_objects[o - 1];
            out->type_bytes[obj->type % PTMD_RUBY_TYPES] += size;
            out->type_chunks[obj->type % PTMD_RUBY_TYPES]++;
            if (obj->klass < nn) {
                out->class_bytes[obj->klass] += size;
                out->class_chunks[obj->klass]++;
                if (obj->flags & PTMD_OF_GARBAGE) out->class_garbage_bytes[obj->klass] += size;
            }
            if (obj->data_type < nn) {
                out->data_type_bytes[obj->data_type] += size;
                out->data_type_chunks[obj->data_type]++;
            }
        }
    }
    for (i = 0; i < v->n_ruby_pages; i++) out->ruby_page_bytes += v->ruby_pages[i].end - v->ruby_pages[i].start;
}
