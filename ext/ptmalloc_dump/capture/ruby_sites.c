/* Ruby allocation sites. A tracepoint on the VM's internal NEWOBJ and FREEOBJ events samples new
 * objects, a geometric gap of mean `every` objects apart (so that a loop allocating in step with a
 * fixed period cannot hide a site), and keeps each sampled object's stack (rb_profile_frames) until
 * the object is freed. Nothing in the hook allocates or calls Ruby: its tables are mapped once, at
 * their fixed size, when tracing starts, and a sample that finds them full is counted and dropped.
 * The frames (method entries and iseqs) are marked while tracing, so that a dump can name them; the
 * traced objects are not (tracing keeps nothing alive that the program dropped), and GC.compact's
 * moves are followed. A fork's child inherits the tables, and the tracepoint with them.
 *
 * At a dump the live traced objects, the stacks and the frames' names are copied into the Ruby pass's
 * buffers (names as Ruby keeps them: nothing allocated). */
#include "capture/ruby_sites.h"
#include "capture/ruby_code.h"
#include "format/index.h"

#include <errno.h>
#include <math.h>
#include <ruby/debug.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define EMPTY 0 /* no object lives at address 0 */

typedef struct {
    uint64_t address;
    uint32_t stack;
    uint32_t reserved;
} traced_slot;

typedef struct {
    uint64_t hash;
    uint32_t first; /* index into the frames */
    uint32_t n;
} stack_rec;

typedef struct {
    VALUE frame;
    int64_t line;
} frame_ref;

#define FIRST_OBJECTS_CAP 65536 /* slots of the traced objects' table at first: 1 MiB */
#define FILTER_BITS 16          /* the free filter's counters: 64 KiB, in cache */

/* The mapped tables (sizes in entries; every table of open addressing is a power of two and kept at
 * most three quarters full). The traced objects' table starts small and doubles up to the room for
 * max_objects (its slots are spread over all its pages: a large one would be resident at once); the
 * others are mapped at their full size, and only their used beginnings become resident. */
typedef struct {
    traced_slot *objects; /* address -> stack */
    size_t objects_cap, objects_used, objects_max_cap;
    uint8_t *filter;       /* per hash of an address, how many traced objects (saturating): most frees miss */
    uint32_t *stack_index; /* open addressing of stack ids + 1 */
    size_t stack_index_cap;
    stack_rec *stacks;
    size_t stacks_cap, n_stacks;
    frame_ref *frames;
    size_t frames_cap, n_frames;
    VALUE *marks; /* the distinct frames: open addressing */
    size_t marks_cap, n_marks;
    VALUE *marked; /* the same, in order: what the GC marks */
} tables;

static struct {
    int on;
    tables t;
    uint64_t every, rng, gap;
    uint64_t seen, sampled, dropped, started_ns;
} T;

static VALUE tracepoint = Qnil, holder = Qnil; /* both registered with the GC at init */

static void *map(size_t bytes)
{
    void *p;
    if (!bytes) return NULL;
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap(void *p, size_t bytes)
{
    if (p) munmap(p, bytes);
}

static void release(tables *t)
{
    unmap(t->objects, t->objects_cap * sizeof(traced_slot));
    unmap(t->filter, (size_t)1 << FILTER_BITS);
    unmap(t->marked, t->marks_cap * sizeof(VALUE));
    unmap(t->stack_index, t->stack_index_cap * sizeof(uint32_t));
    unmap(t->stacks, t->stacks_cap * sizeof(stack_rec));
    unmap(t->frames, t->frames_cap * sizeof(frame_ref));
    unmap(t->marks, t->marks_cap * sizeof(VALUE));
    memset(t, 0, sizeof(*t));
}

static size_t power_of_two_above(size_t n)
{
    size_t p = 1024;
    while (p < n) p <<= 1;
    return p;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* xorshift64*: the sampler's own generator, seeded by the caller for repeatable runs */
static uint64_t next_random(void)
{
    T.rng ^= T.rng >> 12;
    T.rng ^= T.rng << 25;
    T.rng ^= T.rng >> 27;
    return T.rng * 0x2545F4914F6CDD1Dull;
}

/* The number of new objects to the next sample: geometric with mean `every` (1 when every is 1). */
static uint64_t next_gap(void)
{
    double u;
    if (T.every <= 1) return 1;
    u = ((double)(next_random() >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    return (uint64_t)floor(log(u) / log(1.0 - 1.0 / (double)T.every)) + 1;
}

/* ---- traced objects: linear probing, deletion by backward shift ---- */

static size_t object_home(uint64_t address, size_t cap)
{
    return (size_t)mix(address) & (cap - 1);
}

static uint8_t *filter_at(tables *t, uint64_t address)
{
    return &t->filter[((address >> 3) * 0x9E3779B97F4A7C15ull) >> (64 - FILTER_BITS)];
}

static void slot_put(traced_slot *slots, size_t cap, uint64_t address, uint32_t stack)
{
    size_t i;
    for (i = object_home(address, cap); slots[i].address != EMPTY; i = (i + 1) & (cap - 1)) {}
    slots[i].address = address;
    slots[i].stack = stack;
}

/* Twice the slots, mapped anew (no malloc): 0, or -1 at the most or when mmap fails. */
static int objects_grow(tables *t)
{
    size_t cap = t->objects_cap * 2, i;
    traced_slot *slots;
    if (cap > t->objects_max_cap || !(slots = map(cap * sizeof(traced_slot)))) return -1;
    for (i = 0; i < t->objects_cap; i++)
        if (t->objects[i].address != EMPTY) slot_put(slots, cap, t->objects[i].address, t->objects[i].stack);
    unmap(t->objects, t->objects_cap * sizeof(traced_slot));
    t->objects = slots;
    t->objects_cap = cap;
    return 0;
}

static int object_put(tables *t, uint64_t address, uint32_t stack)
{
    size_t mask = t->objects_cap - 1, i;
    uint8_t *f = filter_at(t, address);
    if (*f)
        for (i = object_home(address, t->objects_cap); t->objects[i].address != EMPTY; i = (i + 1) & mask)
            if (t->objects[i].address == address) { /* a slot used again before its FREEOBJ was seen */
                t->objects[i].stack = stack;
                return 0;
            }
    if ((t->objects_used + 1) * 4 > t->objects_cap * 3 && objects_grow(t) != 0) return -1;
    slot_put(t->objects, t->objects_cap, address, stack);
    t->objects_used++;
    if (*f < UINT8_MAX) (*f)++;
    return 0;
}

static void object_delete(tables *t, uint64_t address)
{
    size_t mask = t->objects_cap - 1, i, j;
    uint8_t *f = filter_at(t, address);
    if (!*f) return; /* no traced object hashes there: the common case of a free */
    for (i = object_home(address, t->objects_cap); t->objects[i].address != address; i = (i + 1) & mask)
        if (t->objects[i].address == EMPTY) return;
    if (*f < UINT8_MAX) (*f)--; /* a saturated counter stays: the filter only lets more through */
    /* the entries after it that would no longer be found move back into the gap */
    for (j = (i + 1) & mask; t->objects[j].address != EMPTY; j = (j + 1) & mask) {
        size_t home = object_home(t->objects[j].address, t->objects_cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->objects[i] = t->objects[j];
            i = j;
        }
    }
    t->objects[i].address = EMPTY;
    t->objects_used--;
}

/* ---- stacks and their frames ---- */

static int mark_put(tables *t, VALUE frame)
{
    size_t mask = t->marks_cap - 1, i;
    for (i = (size_t)mix((uint64_t)frame) & mask; t->marks[i]; i = (i + 1) & mask)
        if (t->marks[i] == frame) return 0;
    if ((t->n_marks + 1) * 4 > t->marks_cap * 3) return -1;
    t->marks[i] = frame;
    t->marked[t->n_marks++] = frame;
    return 0;
}

static int same_stack(const tables *t, const stack_rec *s, uint64_t hash, const VALUE *frames, const int *lines, int n)
{
    int k;
    if (s->hash != hash || s->n != (uint32_t)n) return 0;
    for (k = 0; k < n; k++)
        if (t->frames[s->first + k].frame != frames[k] || t->frames[s->first + k].line != lines[k]) return 0;
    return 1;
}

/* The id of the stack (frames, lines), added when new: UINT32_MAX when the tables are full. */
static uint32_t stack_id(tables *t, const VALUE *frames, const int *lines, int n)
{
    uint64_t hash = mix((uint64_t)n);
    size_t mask = t->stack_index_cap - 1, i;
    int k;
    stack_rec *s;
    for (k = 0; k < n; k++) hash = mix(hash ^ (uint64_t)frames[k] ^ ((uint64_t)(uint32_t)lines[k] << 48));
    for (i = (size_t)hash & mask; t->stack_index[i]; i = (i + 1) & mask)
        if (same_stack(t, &t->stacks[t->stack_index[i] - 1], hash, frames, lines, n)) return t->stack_index[i] - 1;
    if (t->n_stacks == t->stacks_cap || t->n_frames + (size_t)n > t->frames_cap ||
        (t->n_stacks + 1) * 4 > t->stack_index_cap * 3)
        return UINT32_MAX;
    for (k = 0; k < n; k++)
        if (mark_put(t, frames[k]) != 0) return UINT32_MAX;
    s = &t->stacks[t->n_stacks];
    s->hash = hash;
    s->first = (uint32_t)t->n_frames;
    s->n = (uint32_t)n;
    for (k = 0; k < n; k++) {
        t->frames[t->n_frames].frame = frames[k];
        t->frames[t->n_frames++].line = lines[k];
    }
    t->stack_index[i] = (uint32_t)++t->n_stacks;
    return (uint32_t)(t->n_stacks - 1);
}

static void sample(VALUE obj)
{
    VALUE frames[PTMD_SITES_MAX_FRAMES];
    int lines[PTMD_SITES_MAX_FRAMES];
    int n = rb_profile_frames(0, PTMD_SITES_MAX_FRAMES, frames, lines);
    uint32_t id = stack_id(&T.t, frames, lines, n < 0 ? 0 : n);
    if (id == UINT32_MAX || object_put(&T.t, (uint64_t)obj, id) != 0) T.dropped++;
}

static void on_event(VALUE tpval, void *data)
{
    rb_trace_arg_t *ta = rb_tracearg_from_tracepoint(tpval);
    (void)data;
    if (!T.on) return;
    if (rb_tracearg_event_flag(ta) == RUBY_INTERNAL_EVENT_FREEOBJ) {
        if (T.t.objects_used) object_delete(&T.t, (uint64_t)rb_tracearg_object(ta));
        return;
    }
    T.seen++;
    if (--T.gap) return;
    T.gap = next_gap();
    T.sampled++;
    sample(rb_tracearg_object(ta));
}

/* ---- the holder object: marks the frames, follows compaction ---- */

static void holder_mark(void *p)
{
    size_t i;
    (void)p;
    for (i = 0; T.on && i < T.t.n_marks; i++) rb_gc_mark(T.t.marked[i]);
}

/* GC.compact moved some traced objects: their entries are put where their new addresses lead. */
static void holder_compact(void *p)
{
    size_t i, n = 0, bytes = T.t.objects_used * sizeof(traced_slot);
    traced_slot *moved;
    (void)p;
    if (!T.on || !T.t.objects_used || !(moved = map(bytes))) return;
    for (i = 0; i < T.t.objects_cap; i++) {
        const traced_slot *s = &T.t.objects[i];
        if (s->address != EMPTY && (uint64_t)rb_gc_location((VALUE)s->address) != s->address) moved[n++] = *s;
    }
    for (i = 0; i < n; i++) object_delete(&T.t, moved[i].address);
    for (i = 0; i < n; i++) object_put(&T.t, (uint64_t)rb_gc_location((VALUE)moved[i].address), moved[i].stack);
    unmap(moved, bytes);
}

static const rb_data_type_t holder_type = {
    .wrap_struct_name = "ptmalloc_dump/allocation_tracing",
    .function = { .dmark = holder_mark, .dcompact = holder_compact },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

void ptmd_ruby_sites_init(void)
{
    /* the GC calls dmark and dcompact only for a non-NULL data pointer */
    holder = TypedData_Wrap_Struct(0, &holder_type, &T);
    rb_gc_register_mark_object(holder);
    tracepoint = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_NEWOBJ | RUBY_INTERNAL_EVENT_FREEOBJ, on_event, NULL);
    rb_gc_register_mark_object(tracepoint);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t mapped_bytes(const tables *t)
{
    return t->objects_cap * sizeof(traced_slot) + ((size_t)1 << FILTER_BITS) + t->stack_index_cap * sizeof(uint32_t) +
           t->stacks_cap * sizeof(stack_rec) + t->frames_cap * sizeof(frame_ref) + 2 * t->marks_cap * sizeof(VALUE);
}

int ptmd_ruby_sites_start(const ptmd_sites_options *o, char *why, size_t cap)
{
    tables t;
    if (T.on) {
        snprintf(why, cap, "allocation tracing is already on: stop it first");
        return -1;
    }
    memset(&t, 0, sizeof(t));
    t.objects_max_cap = power_of_two_above(o->max_objects / 3 * 4 + 4);
    t.objects_cap = t.objects_max_cap < FIRST_OBJECTS_CAP ? t.objects_max_cap : FIRST_OBJECTS_CAP;
    t.stacks_cap = o->max_stacks;
    t.stack_index_cap = power_of_two_above(o->max_stacks / 3 * 4 + 4);
    t.frames_cap = o->max_stacks * 16; /* deeper stacks use up the room sooner */
    t.marks_cap = power_of_two_above(o->max_stacks * 4);
    t.objects = map(t.objects_cap * sizeof(traced_slot));
    t.stack_index = map(t.stack_index_cap * sizeof(uint32_t));
    t.stacks = map(t.stacks_cap * sizeof(stack_rec));
    t.frames = map(t.frames_cap * sizeof(frame_ref));
    t.marks = map(t.marks_cap * sizeof(VALUE));
    t.marked = map(t.marks_cap * sizeof(VALUE));
    t.filter = map((size_t)1 << FILTER_BITS);
    if (!t.objects || !t.stack_index || !t.stacks || !t.frames || !t.marks || !t.marked || !t.filter) {
        snprintf(why, cap, "mmap of %zu bytes for the tracing tables failed: %s", mapped_bytes(&t), strerror(errno));
        release(&t);
        return -1;
    }
    T.t = t;
    T.every = o->every ? o->every : 1;
    T.rng = o->seed ? o->seed : realtime_ns() | 1;
    T.seen = T.sampled = T.dropped = 0;
    T.started_ns = realtime_ns();
    T.gap = next_gap();
    T.on = 1;
    rb_tracepoint_enable(tracepoint);
    return 0;
}

void ptmd_ruby_sites_stop(void)
{
    if (!T.on) return;
    rb_tracepoint_disable(tracepoint);
    T.on = 0;
    release(&T.t);
}

void ptmd_ruby_sites_stats(ptmd_sites_stats *s)
{
    memset(s, 0, sizeof(*s));
    if (!T.on) return;
    s->on = 1;
    s->every = T.every;
    s->seen = T.seen;
    s->sampled = T.sampled;
    s->dropped = T.dropped;
    s->started_ns = T.started_ns;
    s->tracked = T.t.objects_used;
    s->stacks = T.t.n_stacks;
    s->frames = T.t.n_frames;
    s->max_objects = T.t.objects_max_cap / 4 * 3;
    s->max_stacks = T.t.stacks_cap;
    s->mapped_bytes = mapped_bytes(&T.t);
}

/* ---- at a dump ---- */

static int by_address(const void *a, const void *b, void *ctx)
{
    uint64_t x = ((const ptmd_ruby_traced *)a)->address, y = ((const ptmd_ruby_traced *)b)->address;
    (void)ctx;
    return x < y ? -1 : x > y;
}

/* The index of a string Ruby holds as the name (key, kind), its entry written when new; PTMD_NO_NAME
 * for nil. */
static uint32_t string_name(ptmd_ruby_data *rd, ptmd_name_table *names, VALUE str, uint32_t kind, int *oom)
{
    size_t before = names->used;
    uint32_t i;
    if (!RB_TYPE_P(str, T_STRING)) return PTMD_NO_NAME;
    i = ptmd_name_table_index(names, (uint64_t)str, kind);
    if (names->oom) *oom = 1;
    else if (names->used != before && ptmd_ruby_append_name(&rd->site_names, &rd->n_site_names, (uint64_t)str, kind,
                                                            RSTRING_PTR(str), (size_t)RSTRING_LEN(str)) != 0)
        *oom = 1;
    return i;
}

static uint32_t owner_name(ptmd_ruby_data *rd, ptmd_name_table *names, VALUE frame, int *oom)
{
    VALUE owner = ptmd_ruby_code_frame_owner(rd, frame);
    size_t before = names->used, len;
    const char *s;
    char buf[128];
    uint32_t i;
    if (!owner) return PTMD_NO_NAME;
    i = ptmd_name_table_index(names, (uint64_t)owner, PTMD_NAME_MODULE);
    if (names->oom) *oom = 1;
    else if (names->used != before) {
        len = ptmd_ruby_code_module_name(rd, owner, &s, buf, sizeof(buf));
        if (ptmd_ruby_append_name(&rd->site_names, &rd->n_site_names, (uint64_t)owner, PTMD_NAME_MODULE, s, len) != 0)
            *oom = 1;
    }
    return i;
}

static void frame_record(ptmd_ruby_data *rd, ptmd_name_table *names, const frame_ref *f, ptmd_ruby_frame *out, int *oom)
{
    VALUE label = rb_profile_frame_label(f->frame);
    if (NIL_P(label)) label = rb_profile_frame_method_name(f->frame);
    out->path = string_name(rd, names, rb_profile_frame_path(f->frame), PTMD_NAME_PATH, oom);
    out->label = string_name(rd, names, label, PTMD_NAME_METHOD, oom);
    out->owner = owner_name(rd, names, f->frame, oom);
    out->line = f->line > 0 && f->line <= INT32_MAX ? (int32_t)f->line : 0;
}

int ptmd_ruby_sites_capture(ptmd_ruby_data *rd)
{
    ptmd_name_table names;
    size_t i, k;
    int oom = 0;
    rd->sites_present = 0;
    if (!T.on) return 0;
    memset(&names, 0, sizeof(names));
    memset(&rd->alloc_trace, 0, sizeof(rd->alloc_trace));
    rd->alloc_trace.every = T.every;
    rd->alloc_trace.seen = T.seen;
    rd->alloc_trace.sampled = T.sampled;
    rd->alloc_trace.dropped = T.dropped;
    rd->alloc_trace.started_ns = T.started_ns;
    rd->alloc_trace.max_frames = PTMD_SITES_MAX_FRAMES;
    for (i = 0; i < T.t.objects_cap && !oom; i++) {
        const traced_slot *s = &T.t.objects[i];
        ptmd_ruby_traced *r;
        if (s->address == EMPTY) continue;
        if (!(r = ptmd_buf_push(&rd->traced, sizeof(*r)))) oom = 1;
        else {
            r->address = s->address;
            r->stack = s->stack;
        }
    }
    for (i = 0; i < T.t.n_stacks && !oom; i++) {
        const stack_rec *s = &T.t.stacks[i];
        ptmd_ruby_stack *r = ptmd_buf_push(&rd->stacks, sizeof(*r));
        if (!r) {
            oom = 1;
            break;
        }
        r->first = (uint32_t)PTMD_BUF_COUNT(&rd->frames, ptmd_ruby_frame);
        r->n_frames = s->n;
        for (k = 0; k < s->n && !oom; k++) {
            ptmd_ruby_frame *f = ptmd_buf_push(&rd->frames, sizeof(*f));
            if (!f) oom = 1;
            else frame_record(rd, &names, &T.t.frames[s->first + k], f, &oom);
        }
    }
    ptmd_name_table_release(&names);
    if (oom) return -1;
    ptmd_sort(rd->traced.base, PTMD_BUF_COUNT(&rd->traced, ptmd_ruby_traced), sizeof(ptmd_ruby_traced), by_address,
              NULL);
    rd->sites_present = 1;
    return 0;
}
