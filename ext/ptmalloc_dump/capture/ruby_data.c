/* What the Ruby pass collected: its names, and which recorded page holds a slot. */
#include "capture/ruby_data.h"

int ptmd_ruby_add_name(ptmd_ruby_data *rd, uint64_t key, uint32_t kind, const char *name, size_t len)
{
    static const char zeros[8];
    uint32_t l = (uint32_t)(len > 4096 ? 4096 : len);
    if (ptmd_buf_append(&rd->names, &key, 8) || ptmd_buf_append(&rd->names, &kind, 4) ||
        ptmd_buf_append(&rd->names, &l, 4) || ptmd_buf_append(&rd->names, name, l) ||
        ((l & 7) && ptmd_buf_append(&rd->names, zeros, 8 - (l & 7))))
        return -1;
    rd->n_names++;
    return 0;
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
