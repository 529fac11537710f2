/* What the Ruby pass collected: its names (the table that numbers them, the entries), and which
 * recorded page holds a slot. */
#include "capture/ruby_data.h"

#include <string.h>

/* Twice the room (1024 slots at first), the names moved over: 0, or -1 when mmap fails. */
static int grow(ptmd_name_table *t)
{
    ptmd_buf old = t->table;
    size_t old_cap = t->cap, mask, k, i;
    ptmd_name_slot *slots;
    memset(&t->table, 0, sizeof(t->table));
    t->cap = old_cap ? old_cap * 2 : 1024;
    if (!ptmd_buf_push(&t->table, t->cap * sizeof(ptmd_name_slot))) {
        t->table = old;
        t->cap = old_cap;
        return -1;
    }
    slots = (ptmd_name_slot *)(void *)t->table.base;
    mask = t->cap - 1;
    for (k = 0; k < old_cap; k++) {
        const ptmd_name_slot *s = &((const ptmd_name_slot *)(const void *)old.base)[k];
        if (!s->kind) continue;
        for (i = ptmd_name_hash(s->key, s->kind, mask); slots[i].kind; i = (i + 1) & mask) {}
        slots[i] = *s;
    }
    ptmd_buf_release(&old);
    return 0;
}

uint32_t ptmd_name_table_index(ptmd_name_table *t, uint64_t key, uint32_t kind)
{
    ptmd_name_slot *slots;
    size_t mask, i;
    if (t->used * 2 >= t->cap && grow(t) != 0) {
        t->oom = 1;
        return PTMD_NO_NAME;
    }
    slots = (ptmd_name_slot *)(void *)t->table.base;
    mask = t->cap - 1;
    for (i = ptmd_name_hash(key, kind, mask); slots[i].kind; i = (i + 1) & mask)
        if (slots[i].key == key && slots[i].kind == kind) return slots[i].index;
    slots[i].key = key;
    slots[i].kind = kind;
    slots[i].index = t->first + (uint32_t)t->used++;
    if (ptmd_buf_append(&t->order, &slots[i], sizeof(ptmd_name_slot)) != 0) t->oom = 1;
    return slots[i].index;
}

void ptmd_name_table_release(ptmd_name_table *t)
{
    uint32_t first = t->first;
    ptmd_buf_release(&t->table);
    ptmd_buf_release(&t->order);
    memset(t, 0, sizeof(*t));
    t->first = first;
}

int ptmd_ruby_append_name(ptmd_buf *b, uint64_t *count, uint64_t key, uint32_t kind, const char *name, size_t len)
{
    static const char zeros[8];
    uint32_t l = (uint32_t)(len > 4096 ? 4096 : len);
    if (ptmd_buf_append(b, &key, 8) || ptmd_buf_append(b, &kind, 4) || ptmd_buf_append(b, &l, 4) ||
        ptmd_buf_append(b, name, l) || ((l & 7) && ptmd_buf_append(b, zeros, 8 - (l & 7))))
        return -1;
    (*count)++;
    return 0;
}

int ptmd_ruby_add_name(ptmd_ruby_data *rd, uint64_t key, uint32_t kind, const char *name, size_t len)
{
    return ptmd_ruby_append_name(&rd->names, &rd->n_names, key, kind, name, len);
}

int ptmd_ruby_in_pages(const ptmd_ruby_data *rd, uint64_t v)
{
    return ptmd_ruby_slot_size(rd, v) != 0;
}

size_t ptmd_ruby_slot_size(const ptmd_ruby_data *rd, uint64_t v)
{
    size_t lo = 0, hi = PTMD_BUF_COUNT(&rd->pages, ptmd_ruby_page);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptmd_ruby_page *p = PTMD_BUF_AT(&rd->pages, ptmd_ruby_page, mid);
        if (v < p->start) hi = mid;
        else if (v >= p->end) lo = mid + 1;
        else return (v - p->start) % p->stride == 0 ? p->stride : 0;
    }
    return 0;
}
