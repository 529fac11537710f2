/* The names of constants and global variables, read from Ruby's own tables without calling Ruby (whose
 * ways to list them allocate). Both are id_tables (id_table.c, the same in Ruby 2.7 to 3.4):
 *
 *   struct rb_id_table   { int capa; int num; int used; item_t *items; }      capa a power of two
 *   item_t               { uint32 key; int collision; VALUE val; }            key 0: empty slot
 *
 * whose key is the name's serial number, the ID shifted right by RUBY_ID_SCOPE_SHIFT (4), the ID's low
 * bits being its scope (constant, global) and static flag. A constant table's values are
 * rb_const_entry_t (constant.h: flag, line, VALUE value, file); the global table's are rb_global_entry
 * (variable.c: struct rb_global_variable *var, ...), whose variable is {int counter, int block_trace,
 * void *data, getter, ...}: data is the value itself for a Ruby global (rb_gvar_val_getter), the
 * address of a C variable for a defined one (rb_gvar_var_getter).
 *
 * Where the tables are is not in Ruby's public headers and moved between versions (a class's constant
 * table: in the rb_classext_t its slot points to until 3.2, in the slot itself after): it is found at
 * load by reading candidates where a read may fail safely (the fault-free reader: process_vm_readv on
 * this process, or /proc/self/mem where that call is refused, as seccomp profiles and qemu-user do),
 * and accepted only where known constants and globals come out with their known values. */
#define _GNU_SOURCE
#include "capture/ruby_graph_tables.h"
#include "capture/procfs.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#define ID_SHIFT 4
#define MAX_CAPA (1u << 24)
#define MAX_GLOBALS_CAPA (1u << 16)

typedef struct {
    int capa, num, used, pad;
    uint64_t items;
} id_table;

typedef struct {
    uint32_t key;
    int32_t collision;
    uint64_t val;
} id_item;

/* Where a class's constant table is: at `direct` in its slot, or at `inner` in the structure the word
 * at `outer` of its slot points to. */
static struct {
    int known;
    int indirect;
    unsigned direct, outer, inner;
    uint64_t const_low; /* the low bits of a constant's ID */
} consts;

static struct {
    int known;
    uint64_t table_at; /* the address of Ruby's rb_global_tbl variable */
    uint64_t global_low;
    uint64_t val_getter, var_getter;
} globals;

static int pointer_like(uint64_t p)
{
    return p >= 0x10000 && p < 0x800000000000ull && !(p & 7);
}

/* The search's reader, open while ptmd_graph_tables_init runs. */
static ptmd_memreader probe;
static int probe_open;

/* Reads len bytes at addr of this process, failing (not faulting) where nothing is mapped. */
static int safe_read(uint64_t addr, void *buf, size_t len)
{
    if (!probe_open || !pointer_like(addr & ~7ull)) return -1;
    return ptmd_safe_read(&probe, (uintptr_t)addr, buf, len);
}

static int sane_table(const id_table *t, unsigned max_capa)
{
    return t->capa > 0 && (unsigned)t->capa <= max_capa && !(t->capa & (t->capa - 1)) && t->num >= 0 &&
           t->num <= t->capa && t->used >= t->num && t->used <= t->capa && pointer_like(t->items);
}

/* The value the table at tp holds for the serial, through safe reads; 0 when it holds none. */
static uint64_t safe_lookup(uint64_t tp, uint32_t serial, unsigned max_capa)
{
    id_table t;
    id_item batch[64]; /* items read 64 at a time: one system call each, not one an item */
    int i, j, n;
    if (!pointer_like(tp) || safe_read(tp, &t, sizeof(t)) != 0 || !sane_table(&t, max_capa)) return 0;
    for (i = 0; i < t.capa; i += n) {
        n = t.capa - i < 64 ? t.capa - i : 64;
        if (safe_read(t.items + (uint64_t)i * sizeof(id_item), batch, (size_t)n * sizeof(id_item)) != 0) return 0;
        for (j = 0; j < n; j++)
            if (batch[j].key == serial) return batch[j].val;
    }
    return 0;
}

/* The value of constant `name` in the table at tp (through the rb_const_entry_t), 0 when none. */
static uint64_t safe_constant(uint64_t tp, const char *name)
{
    uint64_t ce = safe_lookup(tp, (uint32_t)(rb_intern(name) >> ID_SHIFT), MAX_CAPA), value;
    if (!pointer_like(ce) || safe_read(ce + 8, &value, sizeof(value)) != 0) return 0;
    return value;
}

static uint64_t table_of(VALUE mod, int indirect, unsigned direct, unsigned outer, unsigned inner)
{
    uint64_t p;
    if (!indirect) return safe_read((uint64_t)mod + direct, &p, sizeof(p)) == 0 ? p : 0;
    if (safe_read((uint64_t)mod + outer, &p, sizeof(p)) != 0 || !pointer_like(p)) return 0;
    return safe_read(p + inner, &p, sizeof(p)) == 0 ? p : 0;
}

/* Whether the place finds, in three modules, constants whose values are known. */
static int place_holds(VALUE probe, int indirect, unsigned direct, unsigned outer, unsigned inner)
{
    uint64_t t = table_of(rb_cObject, indirect, direct, outer, inner);
    if (!t || safe_constant(t, "Kernel") != (uint64_t)rb_mKernel) return 0;
    t = table_of(rb_mGC, indirect, direct, outer, inner);
    if (!t || safe_constant(t, "INTERNAL_CONSTANTS") != (uint64_t)rb_const_get(rb_mGC, rb_intern("INTERNAL_CONSTANTS")))
        return 0;
    t = table_of(probe, indirect, direct, outer, inner);
    return t && safe_constant(t, "PtmallocDumpProbe") == (uint64_t)rb_cObject;
}

static void find_constants(void)
{
    VALUE probe = rb_module_new();
    unsigned a, b;
    ID kernel = rb_intern("Kernel");
    rb_const_set(probe, rb_intern("PtmallocDumpProbe"), rb_cObject);
    consts.const_low = kernel & ((1u << ID_SHIFT) - 1);
    for (a = 16; a < 160 && !consts.known; a += 8)
        if (place_holds(probe, 0, a, 0, 0)) consts.known = 1, consts.direct = a;
    for (a = 16; a < 64 && !consts.known; a += 8)
        for (b = 0; b < 64 && !consts.known; b += 8)
            if (place_holds(probe, 1, 0, a, b))
                consts.known = 1, consts.indirect = 1, consts.outer = a, consts.inner = b;
    RB_GC_GUARD(probe);
}

#define N_KNOWN_GLOBALS 6
typedef struct {
    uint64_t found;
    uint32_t serial[N_KNOWN_GLOBALS];
    const ptmd_maps *maps; /* the mappings when the search began, NULL when unknown */
} global_search;

/* Whether p may be the global table: malloc'd, so in writable anonymous memory or the brk heap, with
 * room for the table's header. Words that point elsewhere (code, other libraries' data, stacks) are
 * most of the candidates, and are passed over without a system call. */
static int in_heap_memory(const global_search *s, uint64_t p)
{
    const ptmd_map *m;
    if (!s->maps) return 1;
    m = ptmd_maps_find(s->maps, (uintptr_t)p);
    return m && (m->kind == PTMD_MAPKIND_ANON || m->kind == PTMD_MAPKIND_BRK) &&
           (m->prot & (PTMD_MAP_R | PTMD_MAP_W)) == (PTMD_MAP_R | PTMD_MAP_W) && p + sizeof(id_table) <= m->end;
}

/* Whether the table at tp holds the globals every Ruby defines at boot, each an entry whose variable
 * has a known getter where Ruby keeps the value itself: then it is the global table, and the
 * variable's data and getter are where this file reads them. (Their values are no test: Ruby 3.0 made
 * $stdout and its like per-Ractor virtual variables.) */
static int holds_known_globals(uint64_t tp, const global_search *s)
{
    int i, kept = 0;
    for (i = 0; i < N_KNOWN_GLOBALS; i++) {
        uint64_t entry = safe_lookup(tp, s->serial[i], MAX_GLOBALS_CAPA), var, getter;
        if (!pointer_like(entry) || safe_read(entry, &var, sizeof(var)) != 0 || !pointer_like(var) ||
            safe_read(var + 16, &getter, sizeof(getter)) != 0)
            return 0;
        kept += getter == globals.val_getter || getter == globals.var_getter;
    }
    return kept > 0;
}

/* Ruby's writable data (where its static rb_global_tbl is) searched for the global table. */
static int search_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    global_search *s = arg;
    Dl_info self;
    int i;
    (void)size;
    if (s->found || !dladdr((void *)rb_intern, &self) || (uint64_t)(uintptr_t)self.dli_fbase != info->dlpi_addr)
        return 0;
    for (i = 0; i < info->dlpi_phnum && !s->found; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t at, end;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
        at = (info->dlpi_addr + ph->p_vaddr + 7) & ~7ull;
        end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        for (; at + 8 <= end && !s->found; at += 8) {
            uint64_t w = *(const uint64_t *)(uintptr_t)at;
            if (pointer_like(w) && in_heap_memory(s, w) && holds_known_globals(w, s)) s->found = at;
        }
    }
    return 0;
}

static void find_globals(void)
{
    static const char *const known[N_KNOWN_GLOBALS] = { "$stdout", "$stderr", "$stdin", "$;", "$,", "$0" };
    global_search s;
    ptmd_maps maps;
    ptmd_err err;
    int i;
    globals.val_getter = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "rb_gvar_val_getter");
    globals.var_getter = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "rb_gvar_var_getter");
    globals.global_low = rb_intern("$stdout") & ((1u << ID_SHIFT) - 1);
    if (!globals.val_getter || !globals.var_getter) return;
    memset(&s, 0, sizeof(s));
    memset(&maps, 0, sizeof(maps));
    memset(&err, 0, sizeof(err));
    for (i = 0; i < N_KNOWN_GLOBALS; i++) s.serial[i] = (uint32_t)(rb_intern(known[i]) >> ID_SHIFT);
    if (ptmd_maps_load(&maps, &err) == 0) s.maps = &maps;
    dl_iterate_phdr(search_segments, &s);
    ptmd_maps_release(&maps);
    globals.table_at = s.found;
    globals.known = s.found != 0;
}

/* A thread's fiber-local variables (Thread#[]): the local_storage of the execution context (vm_core.h
 * rb_execution_context_t) that the thread's struct points to (th->ec), a table of ID to value: an
 * id_table since Ruby 3.0, an st_table before. Both places and the kind of table are found by setting a
 * variable on this thread and finding it. */
static struct {
    int known, id_table;
    unsigned ec, storage;
    uint64_t local_low; /* the low bits of a local variable's ID */
    int fiber_known;
    unsigned fiber_ec;                /* a Fiber's execution context, in its struct (cont.saved_ec) */
    const rb_data_type_t *type;       /* Thread's typed-data type */
    const rb_data_type_t *fiber_type; /* Fiber's */
} locals;

typedef struct {
    uint8_t powers[4];
    uint32_t rebuilds;
    uint64_t type, num_entries, bins, entries_start, entries_bound, entries;
} st_header;

/* Whether the st_table at tp maps key to value (through safe reads). */
static int st_holds(uint64_t tp, uint64_t key, uint64_t value)
{
    st_header h;
    uint64_t i;
    if (!pointer_like(tp) || safe_read(tp, &h, sizeof(h)) != 0 || !h.num_entries || h.num_entries > 1024 ||
        h.entries_bound > 4096 || h.entries_start > h.entries_bound || !pointer_like(h.entries))
        return 0;
    for (i = h.entries_start; i < h.entries_bound; i++) {
        uint64_t e[3];
        if (safe_read(h.entries + i * sizeof(e), e, sizeof(e)) != 0) return 0;
        if (e[0] != ~0ull && e[1] == key && e[2] == value) return 1;
    }
    return 0;
}

/* Whether ec is th's execution context (vm_core.h rb_execution_context_t, the same in Ruby 2.7 to 3.4):
 * its first fields are the VM stack, its size in words and the current frame, which lies in that
 * stack, and it names its thread (thread_ptr). A pointer that merely leads to the same table, as a
 * list node's does, is neither. */
static int points_back(uint64_t ec, uint64_t th)
{
    uint64_t w[32];
    size_t i;
    if (safe_read(ec, w, sizeof(w)) != 0 || !pointer_like(w[0]) || !w[1] || w[1] > (1ull << 28) || w[2] < w[0] ||
        w[2] >= w[0] + w[1] * 8)
        return 0;
    for (i = 3; i < 32; i++)
        if (w[i] == th) return 1;
    return 0;
}

static void find_thread_locals(void)
{
    VALUE thread = rb_thread_current(), probe = rb_module_new();
    ID key = rb_intern("__ptmalloc_dump_probe");
    uint64_t th;
    unsigned a, b;
    VALUE fiber = rb_fiber_current();
    if (RTYPEDDATA_P(fiber)) locals.fiber_type = RTYPEDDATA_TYPE(fiber);
    if (!RTYPEDDATA_P(thread)) return;
    locals.type = RTYPEDDATA_TYPE(thread);
    locals.local_low = key & ((1u << ID_SHIFT) - 1);
    th = (uint64_t)(uintptr_t)DATA_PTR(thread);
    rb_thread_local_aset(thread, key, probe);
    for (a = 0; a < 1024 && !locals.known; a += 8) {
        uint64_t ec;
        if (safe_read(th + a, &ec, sizeof(ec)) != 0 || !pointer_like(ec) || !points_back(ec, th)) continue;
        for (b = 0; b < 512 && !locals.known; b += 8) {
            uint64_t tp;
            if (safe_read(ec + b, &tp, sizeof(tp)) != 0) continue;
            if (safe_lookup(tp, (uint32_t)(key >> ID_SHIFT), MAX_GLOBALS_CAPA) == (uint64_t)probe)
                locals.known = 1, locals.id_table = 1, locals.ec = a, locals.storage = b;
            else if (st_holds(tp, key, (uint64_t)probe)) locals.known = 1, locals.ec = a, locals.storage = b;
        }
    }
    /* the running fiber's context is the one the thread points to: where it sits in the fiber's struct
     * (Ruby 3.2 on marks a thread's variables from its fiber) */
    if (locals.known && RTYPEDDATA_P(fiber) && RTYPEDDATA_TYPE(fiber) == locals.fiber_type) {
        uint64_t ec = 0, f = (uint64_t)(uintptr_t)DATA_PTR(fiber);
        if (safe_read(th + locals.ec, &ec, sizeof(ec)) == 0 && ec >= f && ec - f < 4096) {
            locals.fiber_known = 1;
            locals.fiber_ec = (unsigned)(ec - f);
        }
    }
    rb_thread_local_aset(thread, key, Qnil);
    RB_GC_GUARD(probe);
    RB_GC_GUARD(fiber);
}

void ptmd_graph_tables_init(void)
{
    ptmd_err ignored;
    memset(&ignored, 0, sizeof(ignored));
    probe_open = ptmd_memreader_open(&probe, &ignored) == 0;
    if (!probe_open) return; /* nothing can be read safely: the tables stay unknown, the graph unnamed */
    find_constants();
    find_globals();
    find_thread_locals();
    ptmd_memreader_close(&probe);
    probe_open = 0;
}

int ptmd_graph_constants_known(void)
{
    return consts.known;
}

/* A table read in the capture: its place was proven at load; what it holds is bounded here. */
static const id_table *table_at(uint64_t tp, unsigned max_capa)
{
    const id_table *t = (const id_table *)(uintptr_t)tp;
    return pointer_like(tp) && sane_table(t, max_capa) ? t : NULL;
}

void ptmd_graph_constants(VALUE mod, void (*each)(uint64_t id, VALUE value, void *data), void *data)
{
    const id_table *t;
    const id_item *items;
    uint64_t tp;
    int i;
    if (!consts.known) return;
    if (!consts.indirect) tp = *(const uint64_t *)(uintptr_t)((uint64_t)mod + consts.direct);
    else {
        uint64_t ext = *(const uint64_t *)(uintptr_t)((uint64_t)mod + consts.outer);
        if (!pointer_like(ext)) return;
        tp = *(const uint64_t *)(uintptr_t)(ext + consts.inner);
    }
    if (!(t = table_at(tp, MAX_CAPA))) return;
    items = (const id_item *)(uintptr_t)t->items;
    for (i = 0; i < t->capa; i++) {
        uint64_t ce = items[i].val;
        if (!items[i].key || !pointer_like(ce)) continue;
        each(((uint64_t)items[i].key << ID_SHIFT) | consts.const_low, *(const VALUE *)(uintptr_t)(ce + 8), data);
    }
}

int ptmd_graph_globals(void (*each)(uint64_t id, VALUE value, void *data), void *data)
{
    const id_table *t;
    const id_item *items;
    int i;
    if (!globals.known || !(t = table_at(*(const uint64_t *)(uintptr_t)globals.table_at, MAX_GLOBALS_CAPA))) return -1;
    items = (const id_item *)(uintptr_t)t->items;
    for (i = 0; i < t->capa; i++) {
        uint64_t entry = items[i].val, var, getter, d;
        if (!items[i].key || !pointer_like(entry)) continue;
        var = *(const uint64_t *)(uintptr_t)entry;
        if (!pointer_like(var)) continue;
        d = *(const uint64_t *)(uintptr_t)(var + 8);
        getter = *(const uint64_t *)(uintptr_t)(var + 16);
        if (getter == globals.var_getter && pointer_like(d)) d = *(const uint64_t *)(uintptr_t)d;
        else if (getter != globals.val_getter) continue;
        each(((uint64_t)items[i].key << ID_SHIFT) | globals.global_low, (VALUE)d, data);
    }
    return 0;
}

int ptmd_graph_thread_locals_known(void)
{
    return locals.known;
}

int ptmd_graph_thread_locals(VALUE thread, int (*each)(st_data_t id, st_data_t value, st_data_t data), void *data)
{
    uint64_t th, ec, tp;
    const st_header *h;
    if (!locals.known || !RTYPEDDATA_P(thread)) return -1;
    th = (uint64_t)(uintptr_t)DATA_PTR(thread);
    if (!pointer_like(th)) return -1;
    if (RTYPEDDATA_TYPE(thread) == locals.type) ec = *(const uint64_t *)(uintptr_t)(th + locals.ec);
    else if (locals.fiber_known && RTYPEDDATA_TYPE(thread) == locals.fiber_type) ec = th + locals.fiber_ec;
    else return -1;
    if (!pointer_like(ec)) return -1;
    tp = *(const uint64_t *)(uintptr_t)(ec + locals.storage);
    if (!pointer_like(tp)) return -1;
    if (locals.id_table) {
        const id_table *t = table_at(tp, MAX_CAPA);
        const id_item *items;
        int i;
        if (!t) return -1;
        items = (const id_item *)(uintptr_t)t->items;
        for (i = 0; i < t->capa; i++)
            if (items[i].key && each(((st_data_t)items[i].key << ID_SHIFT) | locals.local_low, items[i].val,
                                     (st_data_t)data) == ST_STOP)
                break;
        return 0;
    }
    h = (const st_header *)(uintptr_t)tp;
    if (h->entries_start > h->entries_bound || !pointer_like(h->entries)) return -1;
    rb_st_foreach((st_table *)(uintptr_t)tp, each, (st_data_t)data);
    return 0;
}

int ptmd_graph_stack_holder(VALUE v)
{
    const rb_data_type_t *t;
    if (!RTYPEDDATA_P(v)) return 0;
    t = RTYPEDDATA_TYPE(v);
    return t && (t == locals.type || t == locals.fiber_type);
}
