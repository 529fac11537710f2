/* The allocation tracker's tables copied into a dump. The tracker's state and every table it names
 * are read through the source (this process, a stopped one, a core), each table checked to lie in one
 * of the mappings the state lists and every index checked against its table before it is followed.
 * In this process (and a fork snapshot) the tracker's lock is held while it is read, for a bounded
 * time: a fork made while another thread held it leaves it held for ever in the child. */
#include "capture/native_track.h"

#include <stddef.h>
#include <string.h>
#include "capture/elfread.h"
#include "capture/ruby_code.h"
#include "capture/ruby_data.h"
#include "format/ptmd.h"
#include "format/index.h"

#define LOCK_WAIT_NS 20000000ull /* the tracker holds its lock for microseconds at a time */
#define BATCH 512

static uint64_t self_state;

void ptmd_native_track_set_self(uint64_t state_address)
{
    self_state = state_address;
}

uint64_t ptmd_native_track_self(void)
{
    return self_state;
}

#define TRACKER_FILE "/ptmalloc_dump_track.so"

uint64_t ptmd_native_track_find(const ptmd_maps *maps)
{
    const char *p = (const char *)maps->text.base, *end = p + maps->text.len;
    while (p && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p)), *path;
        size_t n = sizeof(TRACKER_FILE) - 1;
        char file[4096];
        if (!eol) eol = end;
        path = memchr(p, '/', (size_t)(eol - p));
        /* the library's first mapping (offset 0) is its load base: "start-end perms 00000000 ..." */
        if (path && (size_t)(eol - path) > n && (size_t)(eol - path) < sizeof(file) &&
            memcmp(eol - n, TRACKER_FILE, n) == 0) {
            const char *q = p;
            uint64_t base = ptmd_parse_hex(&q, eol), offset;
            q = memchr(q, ' ', (size_t)(eol - q));
            q = q ? memchr(q + 1, ' ', (size_t)(eol - q - 1)) : NULL;
            if (!q) break;
            q++;
            offset = ptmd_parse_hex(&q, eol);
            if (offset == 0) {
                ptmd_elf_file f;
                ptmd_elf_sym sym = { PTMD_TRACK_SYMBOL, 0, 0, 0, 0 };
                ptmd_err ignored;
                memcpy(file, path, (size_t)(eol - path));
                file[eol - path] = '\0';
                if (ptmd_elf_open(&f, file, &ignored) != 0) return 0;
                int found = ptmd_elf_lookup(&f, &sym, 1) > 0 && sym.found && sym.size == sizeof(ptmd_track_state);
                ptmd_elf_close(&f);
                return found ? base + sym.value : 0;
            }
        }
        p = eol + 1;
    }
    return 0;
}

static int read_at(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    return (s->ops->read_now ? s->ops->read_now : s->ops->read)(s, addr, dst, len);
}

/* Whether [addr, addr + n * size) lies in one of the tracker's regions. */
static int in_regions(const ptmd_track_state *t, uint64_t addr, uint64_t n, uint64_t size)
{
    if (n > UINT64_MAX / (size ? size : 1)) return 0;
    uint64_t len = n * size;
    for (uint32_t i = 0; i < t->n_regions && i < PTMD_TRACK_MAX_REGIONS; i++) {
        const ptmd_track_region *r = &t->regions[i];
        if (addr >= r->start && r->length >= len && addr - r->start <= r->length - len) return 1;
    }
    return 0;
}

/* A table whole into b (its bytes as the tracker has them): 0, or -1 when it cannot be read. */
static int copy_table(ptmd_source *s, const ptmd_track_state *t, uint64_t addr, uint64_t n, size_t size, ptmd_buf *b)
{
    if (!n) return 0;
    if (!in_regions(t, addr, n, size)) return -1;
    unsigned char *dst = ptmd_buf_push(b, n * size);
    return dst && read_at(s, addr, dst, n * size) == 0 ? 0 : -1;
}

static int lock(ptmd_source *s, uint64_t state_address)
{
    if (!s->in_place) return 0; /* a stopped process or a core: nobody changes it */
    volatile uint32_t *word = (volatile uint32_t *)(uintptr_t)(state_address + offsetof(ptmd_track_state, lock));
    uint64_t until = ptmd_now_ns() + LOCK_WAIT_NS;
    while (__atomic_exchange_n(word, 1, __ATOMIC_ACQUIRE))
        if (ptmd_now_ns() > until) return -1;
    return 1;
}

static void unlock(uint64_t state_address)
{
    __atomic_store_n((volatile uint32_t *)(uintptr_t)(state_address + offsetof(ptmd_track_state, lock)), 0,
                     __ATOMIC_RELEASE);
}

static int by_address(const void *a, const void *b, void *ctx)
{
    (void)ctx;
    uint64_t x = ((const ptmd_native_sample *)a)->address, y = ((const ptmd_native_sample *)b)->address;
    return x < y ? -1 : x > y;
}

static int copy_samples(ptmd_source *s, const ptmd_track_state *t, ptmd_native_data *nd)
{
    ptmd_track_sample batch[BATCH];
    if (!t->sample_slots || (t->sample_slots & (t->sample_slots - 1)) ||
        !in_regions(t, t->samples, t->sample_slots, sizeof(ptmd_track_sample)))
        return 0;
    for (uint64_t i = 0; i < t->sample_slots; i += BATCH) {
        uint64_t n = t->sample_slots - i < BATCH ? t->sample_slots - i : BATCH;
        if (read_at(s, t->samples + i * sizeof(ptmd_track_sample), batch, n * sizeof(ptmd_track_sample))) {
            nd->samples.len = 0; /* some of the table only: none (a truncated core, a table moved meanwhile) */
            nd->rec.flags |= PTMD_NTF_PARTIAL;
            return 0;
        }
        for (uint64_t k = 0; k < n; k++) {
            const ptmd_track_sample *e = &batch[k];
            ptmd_native_sample *out;
            if (e->state != PTMD_TRACK_SLOT_USED || !e->address || e->stack >= t->n_stacks) continue;
            if (!(out = ptmd_buf_push(&nd->samples, sizeof(*out)))) return -1;
            *out = (ptmd_native_sample){ e->address, e->size, e->stack, 0 };
        }
    }
    ptmd_sort(nd->samples.base, PTMD_BUF_COUNT(&nd->samples, ptmd_native_sample), sizeof(ptmd_native_sample),
              by_address, NULL);
    /* the same address twice would be a slot torn while it was read: keep the first */
    size_t n = PTMD_BUF_COUNT(&nd->samples, ptmd_native_sample), kept = 0;
    ptmd_native_sample *all = PTMD_BUF_AT(&nd->samples, ptmd_native_sample, 0);
    for (size_t i = 0; i < n; i++)
        if (!kept || all[i].address != all[kept - 1].address) all[kept++] = all[i];
    nd->samples.len = kept * sizeof(ptmd_native_sample);
    return 0;
}

/* The names the frames use, each once, in the order of the tracker's names: offset -> index. */
typedef struct {
    const char *blob;
    size_t len;
    ptmd_buf offsets; /* uint32_t, ascending: the name at index i starts at offsets[i] */
} names_map;

static uint32_t name_index(const names_map *m, uint32_t off)
{
    size_t lo = 0, hi = PTMD_BUF_COUNT(&m->offsets, uint32_t);
    const uint32_t *o = PTMD_BUF_AT(&m->offsets, uint32_t, 0);
    if (off == PTMD_TRACK_NO_NAME || off >= m->len) return PTMD_NO_NAME;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (o[mid] < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < PTMD_BUF_COUNT(&m->offsets, uint32_t) && o[lo] == off ? (uint32_t)lo : PTMD_NO_NAME;
}

static int copy_names(names_map *m, ptmd_native_data *nd)
{
    size_t off = 0;
    while (off < m->len) {
        size_t n = strnlen(m->blob + off, m->len - off);
        uint32_t o = (uint32_t)off;
        if (off + n == m->len) break; /* not terminated: a name still being written */
        if (ptmd_buf_append(&m->offsets, &o, sizeof(o)) != 0 ||
            ptmd_ruby_append_name(&nd->names, &nd->n_names, off, PTMD_NAME_PATH, m->blob + off, n) != 0)
            return -1;
        off += n + 1;
    }
    return 0;
}

/* The name index of the owner of a frame that is a method entry on Ruby's pages, else PTMD_NO_NAME. */
static uint32_t owner_of(const ptmd_ruby_data *rd, ptmd_name_table *owners, uint64_t frame, ptmd_native_data *nd)
{
    VALUE owner = rd ? ptmd_ruby_code_frame_owner(rd, (VALUE)frame) : 0;
    size_t before = owners->used, len;
    const char *s;
    char buf[128];
    if (!owner) return PTMD_NO_NAME;
    uint32_t i = ptmd_name_table_index(owners, (uint64_t)owner, PTMD_NAME_MODULE);
    if (owners->oom) return PTMD_NO_NAME;
    if (owners->used == before) return i;
    len = ptmd_ruby_code_module_name(rd, owner, &s, buf, sizeof(buf));
    if (ptmd_ruby_append_name(&nd->names, &nd->n_names, (uint64_t)owner, PTMD_NAME_MODULE, s, len) != 0)
        owners->oom = 1;
    return i;
}

static int copy_stacks(const ptmd_track_state *t, const ptmd_buf *stacks, const ptmd_buf *refs, const ptmd_buf *frames,
                       const names_map *m, const ptmd_ruby_data *rd, ptmd_native_data *nd)
{
    ptmd_name_table owners;
    memset(&owners, 0, sizeof(owners));
    owners.first = (uint32_t)nd->n_names; /* owners' names follow the frames' own */
    size_t n_refs = PTMD_BUF_COUNT(refs, uint32_t), n_frames = PTMD_BUF_COUNT(frames, ptmd_track_ruby_frame);
    for (uint64_t i = 0; i < t->n_stacks; i++) {
        const ptmd_track_stack *in = PTMD_BUF_AT(stacks, ptmd_track_stack, i);
        ptmd_native_stack *out = ptmd_buf_push(&nd->stacks, sizeof(*out));
        if (!out) return -1;
        if (in->n_pcs <= PTMD_NATIVE_MAX_PCS && in->first_pc <= t->n_pcs && in->n_pcs <= t->n_pcs - in->first_pc) {
            out->first_pc = in->first_pc;
            out->n_pcs = in->n_pcs;
        }
        if (in->n_ruby > PTMD_NATIVE_MAX_FRAMES || in->first_ruby > n_refs || in->n_ruby > n_refs - in->first_ruby)
            continue;
        out->first_frame = (uint32_t)PTMD_BUF_COUNT(&nd->frames, ptmd_ruby_frame);
        for (uint32_t k = 0; k < in->n_ruby; k++) {
            uint32_t ref = *PTMD_BUF_AT(refs, uint32_t, in->first_ruby + k);
            ptmd_ruby_frame *f = ptmd_buf_push(&nd->frames, sizeof(*f));
            if (!f) return -1;
            *f = (ptmd_ruby_frame){ PTMD_NO_NAME, PTMD_NO_NAME, PTMD_NO_NAME, 0 };
            if (ref < n_frames) {
                const ptmd_track_ruby_frame *rf = PTMD_BUF_AT(frames, ptmd_track_ruby_frame, ref);
                f->path = name_index(m, rf->path);
                f->label = name_index(m, rf->label);
                f->line = rf->line > 0 ? rf->line : 0;
                f->owner = owner_of(rd, &owners, rf->frame, nd);
            }
            out->n_frames++;
        }
    }
    int oom = owners.oom;
    ptmd_name_table_release(&owners);
    return oom ? -1 : 0;
}

static void copy_regions(ptmd_source *s, const ptmd_track_state *t, ptmd_native_track_rec *rec)
{
    uint8_t pages[256];
    size_t page = s->page_size ? s->page_size : 4096;
    for (uint32_t i = 0; i < t->n_regions && i < PTMD_TRACK_MAX_REGIONS; i++) {
        ptmd_native_region *r = &rec->regions[rec->n_regions++];
        r->start = t->regions[i].start;
        r->length = t->regions[i].length;
        for (uint64_t at = r->start; s->ops->pages && at < r->start + r->length; at += sizeof(pages) * page) {
            size_t n = (size_t)((r->start + r->length - at + page - 1) / page);
            if (n > sizeof(pages)) n = sizeof(pages);
            if (s->ops->pages(s, at, n, pages) != 0) break;
            for (size_t k = 0; k < n; k++)
                if (pages[k] & PTMD_PAGE_PRESENT) r->resident += page;
        }
        if (r->resident > r->length) r->resident = r->length;
    }
}

static int copy_all(ptmd_source *s, const ptmd_track_state *t, const ptmd_ruby_data *rd, ptmd_native_data *nd)
{
    ptmd_buf stacks = { 0 }, refs = { 0 }, frames = { 0 }, blob = { 0 };
    names_map m = { 0 };
    int rc = -1;
    if (copy_samples(s, t, nd) != 0) goto out;
    if (t->n_stacks > t->stack_cap || t->n_pcs > t->pc_cap || t->n_ruby_refs > t->ruby_ref_cap ||
        t->n_ruby_frames > t->ruby_frame_cap || t->names_len > t->names_cap ||
        copy_table(s, t, t->stacks, t->n_stacks, sizeof(ptmd_track_stack), &stacks) ||
        copy_table(s, t, t->pcs, t->n_pcs, sizeof(uint64_t), &nd->pcs) ||
        copy_table(s, t, t->ruby_refs, t->n_ruby_refs, sizeof(uint32_t), &refs) ||
        copy_table(s, t, t->ruby_frames, t->n_ruby_frames, sizeof(ptmd_track_ruby_frame), &frames) ||
        copy_table(s, t, t->names, t->names_len, 1, &blob)) {
        /* a table that is not where the state says: keep nothing of it rather than guess */
        nd->samples.len = nd->pcs.len = 0;
        nd->rec.flags |= PTMD_NTF_PARTIAL;
        rc = 0;
        goto out;
    }
    m.blob = (const char *)blob.base;
    m.len = blob.len;
    ptmd_track_state whole = *t;
    whole.n_pcs = PTMD_BUF_COUNT(&nd->pcs, uint64_t);
    if (copy_names(&m, nd) != 0 || copy_stacks(&whole, &stacks, &refs, &frames, &m, rd, nd) != 0) goto out;
    rc = 0;
out:
    ptmd_buf_release(&stacks);
    ptmd_buf_release(&refs);
    ptmd_buf_release(&frames);
    ptmd_buf_release(&blob);
    ptmd_buf_release(&m.offsets);
    return rc;
}

int ptmd_native_track_capture(ptmd_source *src, uint64_t state_address, const ptmd_ruby_data *rd, ptmd_native_data *nd)
{
    ptmd_track_state t;
    int locked, rc;
    nd->present = 0;
    if (!state_address || read_at(src, state_address, &t, sizeof(t)) != 0 || t.magic != PTMD_TRACK_MAGIC ||
        t.abi != PTMD_TRACK_ABI)
        return 0;
    locked = lock(src, state_address);
    if (read_at(src, state_address, &t, sizeof(t)) != 0) rc = 0;
    else {
        memset(&nd->rec, 0, sizeof(nd->rec));
        nd->rec.mean_bytes = t.mean_bytes ? t.mean_bytes : 1;
        nd->rec.started_ns = t.started_ns;
        nd->rec.sampled = t.sampled;
        nd->rec.freed = t.freed < t.sampled ? t.freed : t.sampled;
        nd->rec.dropped = t.dropped < t.sampled ? t.dropped : t.sampled;
        nd->rec.pid = t.pid;
        nd->rec.flags = (t.flags & PTMD_TRACK_F_RUBY ? PTMD_NTF_RUBY : 0) |
                        (t.flags & PTMD_TRACK_F_FULL ? PTMD_NTF_FULL : 0) |
                        (locked < 0 || (!locked && t.lock) ? PTMD_NTF_UNLOCKED : 0);
        copy_regions(src, &t, &nd->rec);
        rc = copy_all(src, &t, rd, nd);
        nd->present = rc == 0;
    }
    if (locked > 0) unlock(state_address);
    return rc;
}

void ptmd_native_track_release(ptmd_native_data *nd)
{
    ptmd_buf_release(&nd->samples);
    ptmd_buf_release(&nd->stacks);
    ptmd_buf_release(&nd->pcs);
    ptmd_buf_release(&nd->frames);
    ptmd_buf_release(&nd->names);
}
