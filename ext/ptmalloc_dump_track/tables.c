/* The tracker's tables: the sampled blocks still allocated (open addressing by address, grown into a
 * new mapping at half full), a counting filter that lets free() skip the lock for a block never
 * sampled, and the stacks, program counters, Ruby frames and names, each interned once. Every table
 * is its own mapping; nothing here calls malloc. All but the filter's reads run under the lock. */
#include "track.h"

#include <string.h>

/* The caps are address space, not memory: a table's pages become resident only as it fills. A
 * program whose every block is sampled can intern a hundred thousand stacks of forty frames each
 * during Ruby's start alone. */
#define FILTER_SLOTS (1u << 16)
#define FIRST_SLOTS (1u << 12)
#define MAX_SLOTS (1u << 22)
#define STACK_CAP (1u << 19)
#define PC_CAP (1u << 24)
#define RUBY_FRAME_CAP (1u << 18)
#define RUBY_REF_CAP (1u << 24)
#define NAMES_CAP (1u << 23)
#define NAME_MAX_LEN 1024u

const uint8_t *volatile ptmd_track_filter;
static uint8_t *filter;

/* An index over an append-only table: slots hold an entry's position + 1, 0 for empty. */
typedef struct {
    uint32_t *slot;
    uint64_t n, used;
} index_t;
static index_t stack_index, frame_index, name_index;

#define S (&ptmalloc_dump_track)
#define TABLE(type, field) ((type *)(uintptr_t)S->field)

uint64_t ptmd_track_hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static size_t slot_of(uint64_t address, uint64_t n)
{
    return (size_t)(((address >> 4) * 0x9e3779b97f4a7c15ull) >> 40) & (n - 1);
}

static void *map_table(uint64_t *field, uint64_t *cap_field, uint64_t cap, size_t record)
{
    void *p = ptmd_track_map(cap * record);
    if (p) {
        *field = (uint64_t)(uintptr_t)p;
        *cap_field = cap;
    }
    return p;
}

static int index_start(index_t *ix, uint64_t n)
{
    ix->slot = ptmd_track_map(n * sizeof(uint32_t));
    ix->n = n;
    ix->used = 0;
    return ix->slot ? 0 : -1;
}

int ptmd_track_tables_start(void)
{
    filter = ptmd_track_map(FILTER_SLOTS);
    if (!filter || !map_table(&S->samples, &S->sample_slots, FIRST_SLOTS, sizeof(ptmd_track_sample)) ||
        !map_table(&S->stacks, &S->stack_cap, STACK_CAP, sizeof(ptmd_track_stack)) ||
        !map_table(&S->pcs, &S->pc_cap, PC_CAP, sizeof(uint64_t)) ||
        !map_table(&S->ruby_frames, &S->ruby_frame_cap, RUBY_FRAME_CAP, sizeof(ptmd_track_ruby_frame)) ||
        !map_table(&S->ruby_refs, &S->ruby_ref_cap, RUBY_REF_CAP, sizeof(uint32_t)) ||
        !map_table(&S->names, &S->names_cap, NAMES_CAP, 1) || index_start(&stack_index, 1u << 12) ||
        index_start(&frame_index, 1u << 12) || index_start(&name_index, 1u << 12))
        return -1;
    __atomic_store_n(&ptmd_track_filter, filter, __ATOMIC_RELEASE);
    return 0;
}

/* The slot holding address, or the first free one its probe met (NULL only when the table is full). */
static ptmd_track_sample *find_slot(ptmd_track_sample *t, uint64_t n, uint64_t address, int for_insert)
{
    ptmd_track_sample *free_slot = NULL;
    size_t i = slot_of(address, n);
    for (uint64_t probes = 0; probes < n; probes++, i = (i + 1) & (n - 1)) {
        ptmd_track_sample *e = &t[i];
        if (e->state == PTMD_TRACK_SLOT_EMPTY) return for_insert && free_slot ? free_slot : (for_insert ? e : NULL);
        if (e->state == PTMD_TRACK_SLOT_DELETED) {
            if (!free_slot) free_slot = e;
        } else if (e->address == address) {
            return e;
        }
    }
    return for_insert ? free_slot : NULL;
}

/* Rehashed into a mapping of n slots; -1 when it cannot be mapped. */
static int resize_samples(uint64_t n)
{
    ptmd_track_sample *old = TABLE(ptmd_track_sample, samples), *t = ptmd_track_map(n * sizeof *t);
    uint64_t old_n = S->sample_slots;
    if (!t) return -1;
    for (uint64_t i = 0; i < old_n; i++)
        if (old[i].state == PTMD_TRACK_SLOT_USED) *find_slot(t, n, old[i].address, 1) = old[i];
    S->samples = (uint64_t)(uintptr_t)t;
    S->sample_slots = n;
    S->n_deleted = 0;
    ptmd_track_unmap(old, old_n * sizeof *old);
    return 0;
}

/* Room for one more sample: a bigger table at half full, or the same size rehashed when freed
 * slots (tombstones) are an eighth of it; at the cap with too few of those, none (the sample is
 * dropped rather than every insert rehashing the whole table). */
static int room_for_one(void)
{
    if ((S->n_samples + S->n_deleted + 1) * 2 <= S->sample_slots) return 0;
    uint64_t n = S->sample_slots;
    while ((S->n_samples + 1) * 4 > n && n < MAX_SLOTS) n *= 2;
    if ((S->n_samples + 1) * 2 > n) return -1;
    if (n == S->sample_slots && S->n_deleted < n / 8) return -1;
    return resize_samples(n);
}

/* The entry of ix whose key equals, or where it goes: its slot. */
typedef uint64_t (*hash_fn)(uint32_t id);
typedef int (*same_fn)(uint32_t id, const void *key);

static uint32_t *index_find(index_t *ix, uint64_t hash, same_fn same, const void *key)
{
    size_t i = (size_t)(hash >> 20) & (ix->n - 1);
    for (uint64_t probes = 0; probes < ix->n; probes++, i = (i + 1) & (ix->n - 1))
        if (!ix->slot[i] || same(ix->slot[i] - 1, key)) return &ix->slot[i];
    return NULL;
}

static int index_grow(index_t *ix, hash_fn hash)
{
    if ((ix->used + 1) * 2 <= ix->n) return 0;
    index_t bigger;
    if (index_start(&bigger, ix->n * 2)) return -1;
    for (uint64_t i = 0; i < ix->n; i++) {
        if (!ix->slot[i]) continue;
        size_t j = (size_t)(hash(ix->slot[i] - 1) >> 20) & (bigger.n - 1);
        while (bigger.slot[j]) j = (j + 1) & (bigger.n - 1);
        bigger.slot[j] = ix->slot[i];
    }
    bigger.used = ix->used;
    ptmd_track_unmap(ix->slot, ix->n * sizeof(uint32_t));
    *ix = bigger;
    return 0;
}

/* names: NUL-terminated, interned by their bytes */
typedef struct {
    const char *p;
    size_t n;
} name_key;

static uint64_t name_hash_at(uint32_t off)
{
    const char *p = TABLE(char, names) + off;
    return ptmd_track_hash_bytes(p, strlen(p), 0xcbf29ce484222325ull);
}

static int name_same(uint32_t off, const void *key)
{
    const name_key *k = key;
    const char *p = TABLE(char, names) + off;
    return strncmp(p, k->p, k->n) == 0 && p[k->n] == '\0';
}

static uint32_t intern_name(const char *p, size_t n)
{
    if (!p) return PTMD_TRACK_NO_NAME;
    n = strnlen(p, n < NAME_MAX_LEN ? n : NAME_MAX_LEN);
    name_key k = { p, n };
    if (index_grow(&name_index, name_hash_at)) return PTMD_TRACK_NO_NAME;
    uint32_t *slot = index_find(&name_index, ptmd_track_hash_bytes(p, n, 0xcbf29ce484222325ull), name_same, &k);
    if (!slot) return PTMD_TRACK_NO_NAME;
    if (*slot) return *slot - 1;
    if (S->names_len + n + 1 > S->names_cap) return PTMD_TRACK_NO_NAME;
    uint32_t off = (uint32_t)S->names_len;
    memcpy(TABLE(char, names) + off, p, n);
    TABLE(char, names)[off + n] = '\0';
    S->names_len += n + 1;
    *slot = off + 1;
    name_index.used++;
    return off;
}

/* Ruby frames: by their VALUE, line and names (an iseq freed and its slot reused has other names) */
static uint64_t frame_hash(const ptmd_track_ruby_frame *f)
{
    return mix(mix(mix(mix(0x84222325ull, f->frame), (uint64_t)(uint32_t)f->line), f->path), f->label);
}

static uint64_t frame_hash_at(uint32_t id)
{
    return frame_hash(&TABLE(ptmd_track_ruby_frame, ruby_frames)[id]);
}

static int frame_same(uint32_t id, const void *key)
{
    const ptmd_track_ruby_frame *a = &TABLE(ptmd_track_ruby_frame, ruby_frames)[id], *b = key;
    return a->frame == b->frame && a->line == b->line && a->path == b->path && a->label == b->label;
}

static int intern_frame(const ptmd_track_rframe *in, uint32_t *out)
{
    ptmd_track_ruby_frame f = { in->frame, intern_name(in->path, in->path_len), intern_name(in->label, in->label_len),
                                in->line, 0 };
    if (index_grow(&frame_index, frame_hash_at)) return -1;
    uint32_t *slot = index_find(&frame_index, frame_hash(&f), frame_same, &f);
    if (!slot) return -1;
    if (!*slot) {
        if (S->n_ruby_frames == S->ruby_frame_cap) return -1;
        TABLE(ptmd_track_ruby_frame, ruby_frames)[S->n_ruby_frames] = f;
        *slot = (uint32_t)++S->n_ruby_frames;
        frame_index.used++;
    }
    *out = *slot - 1;
    return 0;
}

/* stacks: by their program counters and Ruby frames */
typedef struct {
    uint64_t hash;
    const uint64_t *pcs;
    const uint32_t *refs;
    int n_pcs, n_ruby;
} stack_key;

static uint64_t stack_hash_at(uint32_t id)
{
    return TABLE(ptmd_track_stack, stacks)[id].hash;
}

static int stack_same(uint32_t id, const void *key)
{
    const ptmd_track_stack *s = &TABLE(ptmd_track_stack, stacks)[id];
    const stack_key *k = key;
    return s->hash == k->hash && s->n_pcs == k->n_pcs && s->n_ruby == k->n_ruby &&
           !memcmp(TABLE(uint64_t, pcs) + s->first_pc, k->pcs, (size_t)k->n_pcs * sizeof(uint64_t)) &&
           !memcmp(TABLE(uint32_t, ruby_refs) + s->first_ruby, k->refs, (size_t)k->n_ruby * sizeof(uint32_t));
}

static int intern_stack(const stack_key *k, uint32_t *out)
{
    if (index_grow(&stack_index, stack_hash_at)) return -1;
    uint32_t *slot = index_find(&stack_index, k->hash, stack_same, k);
    if (!slot) return -1;
    if (!*slot) {
        if (S->n_stacks == S->stack_cap || S->n_pcs + (uint64_t)k->n_pcs > S->pc_cap ||
            S->n_ruby_refs + (uint64_t)k->n_ruby > S->ruby_ref_cap)
            return -1;
        ptmd_track_stack *s = &TABLE(ptmd_track_stack, stacks)[S->n_stacks];
        *s = (ptmd_track_stack){
            k->hash, (uint32_t)S->n_pcs, (uint32_t)S->n_ruby_refs, (uint16_t)k->n_pcs, (uint16_t)k->n_ruby, 0
        };
        memcpy(TABLE(uint64_t, pcs) + S->n_pcs, k->pcs, (size_t)k->n_pcs * sizeof(uint64_t));
        memcpy(TABLE(uint32_t, ruby_refs) + S->n_ruby_refs, k->refs, (size_t)k->n_ruby * sizeof(uint32_t));
        S->n_pcs += (uint64_t)k->n_pcs;
        S->n_ruby_refs += (uint64_t)k->n_ruby;
        *slot = (uint32_t)++S->n_stacks;
        stack_index.used++;
    }
    *out = *slot - 1;
    return 0;
}

static void dropped(void)
{
    S->dropped++;
    S->flags |= PTMD_TRACK_F_FULL;
}

void ptmd_track_insert(uint64_t address, uint64_t size, const uint64_t *pcs, int n_pcs, const ptmd_track_rframe *ruby,
                       int n_ruby)
{
    uint32_t refs[PTMD_TRACK_MAX_RUBY], stack;
    stack_key k = { 0x6a09e667f3bcc909ull, pcs, refs, n_pcs, 0 };
    S->sampled++;
    for (int i = 0; i < n_ruby && i < PTMD_TRACK_MAX_RUBY; i++)
        if (intern_frame(&ruby[i], &refs[k.n_ruby]) == 0) k.n_ruby++;
    for (int i = 0; i < n_pcs; i++) k.hash = mix(k.hash, pcs[i]);
    for (int i = 0; i < k.n_ruby; i++) k.hash = mix(k.hash, refs[i] | (1ull << 40));
    if (intern_stack(&k, &stack) || room_for_one()) return dropped();
    ptmd_track_sample *e = find_slot(TABLE(ptmd_track_sample, samples), S->sample_slots, address, 1);
    if (!e) return dropped();
    if (e->state != PTMD_TRACK_SLOT_USED) {
        if (e->state == PTMD_TRACK_SLOT_DELETED) S->n_deleted--;
        S->n_samples++;
        uint8_t *c = &filter[ptmd_track_filter_slot(address)];
        if (*c != UINT8_MAX) __atomic_store_n(c, (uint8_t)(*c + 1), __ATOMIC_RELAXED);
    }
    *e = (ptmd_track_sample){ address, size, stack, PTMD_TRACK_SLOT_USED };
}

void ptmd_track_remove(uint64_t address)
{
    ptmd_track_sample *e = find_slot(TABLE(ptmd_track_sample, samples), S->sample_slots, address, 0);
    if (!e) return;
    e->state = PTMD_TRACK_SLOT_DELETED;
    S->n_samples--;
    S->n_deleted++;
    S->freed++;
    uint8_t *c = &filter[ptmd_track_filter_slot(address)];
    if (*c != UINT8_MAX && *c) __atomic_store_n(c, (uint8_t)(*c - 1), __ATOMIC_RELAXED);
}
