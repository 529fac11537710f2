/* The code pass: who defines each piece of code memory. A method entry (imemo ment) names its owner,
 * the class or module whose method table holds it; an iseq method's entry leads to its iseq; a block's
 * iseq leads to its method's (local_iseq). Classes, modules and include classes are their own owner.
 * The objects are noted during the Ruby pass's walk and read after it, with the GVL held and GC
 * disabled, through structures the public headers do not show: their offsets, per Ruby version, are
 * in capture/ruby_code_layout.c, and a Ruby that is not there is skipped with a reason. Nothing here allocates:
 * names are copied from strings Ruby already holds. Matching objects to chunks happens at load. */
#include "capture/ruby_code.h"
#include "capture/ruby_code_layout.h"
#include "format/index.h"
#include "format/ptmd.h"

#include <ruby/version.h>
#include <stdlib.h>
#include <string.h>

/* How far ahead the naming loop asks for the table slot of a later reference. */
#define PTMD_CODE_AHEAD 8
#define PTMD_MIN_POINTER 0x10000ull
#define PTMD_MAX_POINTER 0x800000000000ull

static const ptmd_code_layout *L;
static char problem[160];
static ID id_attached;
static VALUE rubyvm_class;

void ptmd_ruby_code_init(void)
{
    L = ptmd_code_layout_find();
    if (!L)
        snprintf(problem, sizeof(problem),
                 "the method entry and iseq layouts of Ruby %d.%d are not known to this "
                 "version of ptmalloc_dump",
                 RUBY_API_VERSION_MAJOR, RUBY_API_VERSION_MINOR);
    id_attached = rb_intern("__attached__");
    rubyvm_class = rb_const_get(rb_cObject, rb_intern("RubyVM"));
}

const char *ptmd_ruby_code_problem(void)
{
    return L ? NULL : problem;
}

static void note(ptmd_code_pass *cp, ptmd_buf *b, VALUE v)
{
    uint64_t x = (uint64_t)v;
    if (ptmd_buf_append(b, &x, sizeof(x)) != 0) cp->oom = 1;
}

void ptmd_ruby_code_note(ptmd_code_pass *cp, VALUE v, int type, int imemo)
{
    if (!L || cp->oom) return;
    if (type == T_CLASS || type == T_MODULE || type == T_ICLASS) note(cp, &cp->modules, v);
    else if (type == T_IMEMO && imemo == L->imemo_ment) note(cp, &cp->ments, v);
    else if (type == T_IMEMO && imemo == L->imemo_iseq) note(cp, &cp->iseqs, v);
    else if (type == T_DATA && RBASIC(v)->klass == rubyvm_class && RTYPEDDATA_P(v))
        cp->vm = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(v);
}

static uint64_t word_at(uint64_t p, unsigned off)
{
    uint64_t x;
    memcpy(&x, (const void *)(uintptr_t)(p + off), sizeof(x));
    return x;
}

/* A pointer into malloc memory as Ruby keeps one (8-aligned at least, in user space). */
static int heap_pointer(uint64_t p)
{
    return !(p & 7) && p >= PTMD_MIN_POINTER && p < PTMD_MAX_POINTER;
}

static int object_of_type(const ptmd_ruby_data *rd, uint64_t v, int type)
{
    return v && !RB_SPECIAL_CONST_P((VALUE)v) && ptmd_ruby_in_pages(rd, (VALUE)v) &&
           (int)BUILTIN_TYPE((VALUE)v) == type;
}

static int is_module(const ptmd_ruby_data *rd, uint64_t v)
{
    return object_of_type(rd, v, T_CLASS) || object_of_type(rd, v, T_MODULE) || object_of_type(rd, v, T_ICLASS);
}

static int is_imemo(const ptmd_ruby_data *rd, uint64_t v, int imemo)
{
    return object_of_type(rd, v, T_IMEMO) && (int)((RBASIC((VALUE)v)->flags >> RUBY_FL_USHIFT) & 0x0f) == imemo;
}

/* Where a method is: its iseq's path and first line. */
typedef struct {
    uint64_t pathobj;
    uint32_t line;
} location;

/* The path object of the latest iseq_location, and whether it was one: entries in address order come
 * file by file, and each test reads the path's slot, which is seldom in cache. */
static uint64_t last_path;
static int last_path_ok;

static location iseq_location(const ptmd_ruby_data *rd, uint64_t iseq)
{
    location loc = { 0, 0 };
    uint64_t body = word_at(iseq, L->iseq_body), p, line;
    if (!heap_pointer(body)) return loc;
    p = word_at(body, L->body_pathobj);
    if (p != last_path) {
        last_path = p;
        last_path_ok = object_of_type(rd, p, T_STRING) || object_of_type(rd, p, T_ARRAY);
    }
    if (last_path_ok) loc.pathobj = p;
    line = word_at(body, L->body_first_lineno);
    if (L->first_lineno_fixnum) loc.line = RB_FIXNUM_P((VALUE)line) ? (uint32_t)FIX2LONG((VALUE)line) : 0;
    else loc.line = (uint32_t)line;
    return loc;
}

/* A method entry, read: the iseq it runs (0 for other method types), its owner, its name and where
 * its iseq is (read once here for the entry and every block iseq inside it). */
typedef struct {
    uint64_t iseq, owner, id, ment;
    location loc;
} ment_info;

/* Method entries by the iseq they run: open addressing over the entries' indices + 1, twice as many
 * slots as entries. A block's iseq finds its method's entry in one probe or a few, where a search of
 * the entries sorted by iseq waits on memory at each of its steps. */
typedef struct {
    ptmd_buf slots; /* uint32: index into the ment_info list + 1, 0 empty */
    size_t mask;
} ment_index;

static size_t iseq_slot(uint64_t iseq, size_t mask)
{
    return (size_t)((iseq >> 3) * 0x9E3779B97F4A7C15ull >> 24) & mask;
}

static int index_ments(const ptmd_buf *info, ment_index *ix)
{
    size_t i, n = PTMD_BUF_COUNT(info, ment_info), cap = 1024;
    uint32_t *t;
    while (cap < 2 * n) cap *= 2;
    ix->mask = cap - 1;
    if (!(t = ptmd_buf_push(&ix->slots, cap * sizeof(uint32_t)))) return -1;
    for (i = 0; i < n; i++) {
        const ment_info *m = PTMD_BUF_AT(info, ment_info, i);
        size_t h;
        if (!m->iseq) continue;
        for (h = iseq_slot(m->iseq, ix->mask); t[h]; h = (h + 1) & ix->mask)
            if (PTMD_BUF_AT(info, ment_info, t[h] - 1)->iseq == m->iseq) break; /* the first entry keeps it */
        if (!t[h]) t[h] = (uint32_t)i + 1;
    }
    return 0;
}

static const ment_info *ment_of_iseq(const ptmd_buf *info, const ment_index *ix, uint64_t iseq)
{
    const uint32_t *t = (const uint32_t *)(const void *)ix->slots.base;
    size_t h;
    for (h = iseq_slot(iseq, ix->mask); t[h]; h = (h + 1) & ix->mask) {
        const ment_info *m = PTMD_BUF_AT(info, ment_info, t[h] - 1);
        if (m->iseq == iseq) return m;
    }
    return NULL;
}

/* A name to resolve: the key (module VALUE, method ID or path object) of one field of one record. */
typedef struct {
    uint64_t key;
    uint32_t kind;
    uint32_t slot; /* record index * 3 + field (0 module, 1 method, 2 path) */
} name_ref;

static int by_value(const void *a, const void *b, void *ctx)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    PTMD_UNUSED(ctx);
    return x < y ? -1 : x > y;
}

static int by_address(const void *a, const void *b, void *ctx)
{
    uint64_t x = ((const ptmd_ruby_code *)a)->address, y = ((const ptmd_ruby_code *)b)->address;
    PTMD_UNUSED(ctx);
    return x < y ? -1 : x > y;
}

static int add_record(ptmd_code_pass *cp, ptmd_ruby_data *rd, ptmd_buf *refs, uint64_t address, uint32_t kind,
                      uint64_t module, uint64_t id, location loc)
{
    ptmd_ruby_code *r = ptmd_buf_push(&rd->code, sizeof(*r));
    uint32_t index = (uint32_t)(PTMD_BUF_COUNT(&rd->code, ptmd_ruby_code) - 1);
    name_ref n[3] = { { module, kind == PTMD_CODE_VM_TABLE ? PTMD_NAME_VM_TABLE : PTMD_NAME_MODULE, index * 3 },
                      { id, PTMD_NAME_METHOD, index * 3 + 1 },
                      { loc.pathobj, PTMD_NAME_PATH, index * 3 + 2 } };
    int k;
    if (!r) return cp->oom = -1;
    r->address = address;
    r->module = r->method = r->path = PTMD_NO_NAME;
    r->line = loc.line;
    r->kind = kind;
    for (k = 0; k < 3; k++)
        if (n[k].key && ptmd_buf_append(refs, &n[k], sizeof(n[k])) != 0) return cp->oom = -1;
    return 0;
}

/* The module a module record is charged to: an include class stands for the module it includes. */
static uint64_t module_itself(const ptmd_ruby_data *rd, uint64_t v)
{
    if (BUILTIN_TYPE((VALUE)v) == T_ICLASS) {
        uint64_t m = (uint64_t)RBASIC((VALUE)v)->klass;
        return is_module(rd, m) ? m : 0;
    }
    return v;
}

static size_t anonymous(char *buf, size_t cap, VALUE mod)
{
    int n =
        snprintf(buf, cap, "#<%s:0x%016lx>", BUILTIN_TYPE(mod) == T_MODULE ? "Module" : "Class", (unsigned long)mod);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Module#name where it has one (no allocation: Ruby keeps it), "#<Class:Name>" for a named module's
 * singleton class, else what inspect would say of an anonymous one, written into buf. */
static size_t module_name(const ptmd_ruby_data *rd, VALUE mod, const char **out, char *buf, size_t cap)
{
    VALUE name;
    *out = buf;
    if (BUILTIN_TYPE(mod) == T_CLASS && FL_TEST_RAW(mod, RUBY_FL_SINGLETON)) { /* RCLASS_SINGLETON_P */
        VALUE of = Qnil;
        if (!L->class_attached) of = rb_attr_get(mod, id_attached);
        else if (ptmd_ruby_slot_size(rd, mod) >= L->class_attached + sizeof(VALUE))
            of = (VALUE)word_at((uint64_t)mod, L->class_attached);
        if (is_module(rd, (uint64_t)of) && RB_TYPE_P(name = rb_mod_name(of), T_STRING) &&
            (size_t)RSTRING_LEN(name) + 10 < cap) {
            size_t len = (size_t)RSTRING_LEN(name);
            memcpy(buf, "#<Class:", 8);
            memcpy(buf + 8, RSTRING_PTR(name), len);
            buf[8 + len] = '>';
            return len + 9;
        }
        return anonymous(buf, cap, mod);
    }
    name = rb_mod_name(mod);
    if (RB_TYPE_P(name, T_STRING)) {
        *out = RSTRING_PTR(name);
        return (size_t)RSTRING_LEN(name);
    }
    return anonymous(buf, cap, mod);
}

size_t ptmd_ruby_code_module_name(const ptmd_ruby_data *rd, VALUE mod, const char **out, char *buf, size_t cap)
{
    if (!L || !is_module(rd, (uint64_t)mod)) return 0;
    return module_name(rd, mod, out, buf, cap);
}

VALUE ptmd_ruby_code_frame_owner(const ptmd_ruby_data *rd, VALUE frame)
{
    uint64_t owner;
    if (!L || !is_imemo(rd, (uint64_t)frame, L->imemo_ment)) return 0;
    owner = word_at((uint64_t)frame, L->ment_owner);
    return is_module(rd, owner) ? (VALUE)owner : 0;
}

static int resolve_name(ptmd_ruby_data *rd, const name_ref *n)
{
    char buf[512];
    const char *s = "(unknown)";
    size_t len = 9;
    if (n->kind == PTMD_NAME_VM_TABLE) {
        s = L->vm_fields[n->key - 1].name;
        len = strlen(s);
    } else if (n->kind == PTMD_NAME_MODULE) {
        size_t l = module_name(rd, (VALUE)n->key, &s, buf, sizeof(buf));
        if (l) len = l;
        else s = "(unknown)";
    } else {
        VALUE str = n->kind == PTMD_NAME_METHOD ? rb_id2str((ID)n->key) : (VALUE)n->key;
        if (n->kind == PTMD_NAME_PATH && BUILTIN_TYPE(str) == T_ARRAY) /* [path, realpath] */
            str = RARRAY_LEN(str) > 0 ? RARRAY_AREF(str, 0) : Qnil;
        if (str && RB_TYPE_P(str, T_STRING)) {
            s = RSTRING_PTR(str);
            len = (size_t)RSTRING_LEN(str);
        }
    }
    return ptmd_ruby_append_name(&rd->code_names, &rd->n_code_names, n->key, n->kind, s, len);
}

/* Gives every distinct key one name entry, in order of first use, and each record its fields' indices. */
static int name_records(ptmd_ruby_data *rd, const ptmd_buf *refs)
{
    size_t i, n = PTMD_BUF_COUNT(refs, name_ref);
    ptmd_name_table table;
    int rc = -1;
    memset(&table, 0, sizeof(table));
    for (i = 0; i < n; i++) {
        const name_ref *r = PTMD_BUF_AT(refs, name_ref, i);
        ptmd_ruby_code *c = PTMD_BUF_AT(&rd->code, ptmd_ruby_code, r->slot / 3);
        uint32_t *field = r->slot % 3 == 0 ? &c->module : r->slot % 3 == 1 ? &c->method : &c->path;
        size_t named = table.used;
        if (i + PTMD_CODE_AHEAD < n) {
            const name_ref *ahead = PTMD_BUF_AT(refs, name_ref, i + PTMD_CODE_AHEAD);
            ptmd_name_table_prefetch(&table, ahead->key, ahead->kind);
        }
        *field = ptmd_name_table_index(&table, r->key, r->kind);
        if (table.oom) goto out;
        if (table.used != named && resolve_name(rd, r) != 0) goto out; /* a new key: its entry next */
    }
    rc = 0;
out:
    ptmd_name_table_release(&table);
    return rc;
}

/* The loops over noted objects go in batches, each in phases: a phase asks for the lines the next one
 * reads (a method definition, an iseq's slot, its body) for the whole batch, so that the waits on
 * memory of a batch's objects overlap instead of following one another. Each phase reads a pointer
 * only after the checks the object itself gets. */
#define PTMD_CODE_BATCH 64

static void ask(uint64_t p)
{
    __builtin_prefetch((const void *)(uintptr_t)p);
}

/* What an entry's definition says it runs: the word where an iseq method keeps its iseq, 0 for other
 * method types (whose definition holds something else there). */
static uint64_t def_iseq(uint64_t ment)
{
    uint64_t def = word_at(ment, L->ment_def);
    uint32_t type;
    if (!heap_pointer(def)) return 0;
    memcpy(&type, (const void *)(uintptr_t)def, sizeof(type));
    return (type & ((1u << L->def_type_bits) - 1)) == L->def_iseq_type ? word_at(def, L->def_iseqptr) : 0;
}

/* An iseq's body, once its slot was found to be an iseq's: 0 when it has none. */
static uint64_t body_of(uint64_t iseq)
{
    uint64_t body = word_at(iseq, L->iseq_body);
    return heap_pointer(body) ? body : 0;
}

static int read_ments(ptmd_code_pass *cp, ptmd_ruby_data *rd, ptmd_buf *info)
{
    size_t at, k, n = PTMD_BUF_COUNT(&cp->ments, uint64_t);
    const uint64_t *ments = (const uint64_t *)(const void *)cp->ments.base;
    uint64_t iseq[PTMD_CODE_BATCH];
    for (at = 0; at < n; at += PTMD_CODE_BATCH) {
        size_t nb = n - at < PTMD_CODE_BATCH ? n - at : PTMD_CODE_BATCH;
        for (k = 0; k < nb; k++) {
            ask(word_at(ments[at + k], L->ment_def));
            ask(word_at(ments[at + k], L->ment_owner));
        }
        for (k = 0; k < nb; k++) {
            iseq[k] = def_iseq(ments[at + k]);
            if (!RB_SPECIAL_CONST_P((VALUE)iseq[k]) && ptmd_ruby_in_pages(rd, (VALUE)iseq[k])) ask(iseq[k]);
            else iseq[k] = 0;
        }
        for (k = 0; k < nb; k++) {
            uint64_t body;
            if (!iseq[k] || !is_imemo(rd, iseq[k], L->imemo_iseq)) iseq[k] = 0;
            else if ((body = body_of(iseq[k])) != 0) {
                ask(body + L->body_pathobj);
                ask(body + L->body_first_lineno);
            }
        }
        for (k = 0; k < nb; k++) {
            uint64_t v = ments[at + k], owner = word_at(v, L->ment_owner);
            ment_info *m;
            if (!is_module(rd, owner) || !(owner = module_itself(rd, owner))) continue;
            if (!(m = ptmd_buf_push(info, sizeof(*m)))) return cp->oom = -1;
            m->ment = v;
            m->owner = owner;
            m->id = word_at(v, L->ment_called_id);
            if ((m->iseq = iseq[k]) != 0) m->loc = iseq_location(rd, m->iseq);
        }
    }
    return 0;
}

/* Charges each noted iseq to the method entry of the method it belongs to (itself, or a block's
 * local_iseq), in batches as read_ments. */
static int charge_iseqs(ptmd_code_pass *cp, ptmd_ruby_data *rd, const ptmd_buf *info, const ment_index *ix,
                        ptmd_buf *refs)
{
    size_t at, k, n = PTMD_BUF_COUNT(&cp->iseqs, uint64_t);
    const uint64_t *iseqs = (const uint64_t *)(const void *)cp->iseqs.base;
    const uint32_t *slots = (const uint32_t *)(const void *)ix->slots.base;
    uint64_t root[PTMD_CODE_BATCH], local[PTMD_CODE_BATCH];
    const ment_info *m[PTMD_CODE_BATCH];
    for (at = 0; at < n; at += PTMD_CODE_BATCH) {
        size_t nb = n - at < PTMD_CODE_BATCH ? n - at : PTMD_CODE_BATCH;
        for (k = 0; k < nb; k++) {
            uint64_t body = body_of(iseqs[at + k]);
            if (body) ask(body + L->body_local_iseq);
            ask((uint64_t)(uintptr_t)&slots[iseq_slot(iseqs[at + k], ix->mask)]);
        }
        for (k = 0; k < nb; k++) {
            uint64_t body = body_of(iseqs[at + k]);
            local[k] = body ? word_at(body, L->body_local_iseq) : 0;
            root[k] = body ? iseqs[at + k] : 0;
            if (local[k] && !RB_SPECIAL_CONST_P((VALUE)local[k]) && ptmd_ruby_in_pages(rd, (VALUE)local[k])) {
                ask(local[k]);
                ask((uint64_t)(uintptr_t)&slots[iseq_slot(local[k], ix->mask)]);
            } else local[k] = 0;
        }
        /* a block's iseq belongs to the method it is in */
        for (k = 0; k < nb; k++) {
            if (local[k] && root[k] && is_imemo(rd, local[k], L->imemo_iseq)) root[k] = local[k];
            m[k] = root[k] ? ment_of_iseq(info, ix, root[k]) : NULL;
            if (m[k]) ask((uint64_t)(uintptr_t)m[k]);
        }
        for (k = 0; k < nb; k++)
            if (m[k] && add_record(cp, rd, refs, iseqs[at + k], PTMD_CODE_ISEQ, m[k]->owner, m[k]->id, m[k]->loc) != 0)
                return -1;
    }
    return 0;
}

/* The VM's own tables: each field's pointer, with the field's place in the list + 1 as its name key.
 * Two fields never share a table; a NULL one (a table not made yet) is left out. The VM is the one
 * whose first word is the RubyVM object that wraps it. */
static int add_vm_tables(ptmd_code_pass *cp, ptmd_ruby_data *rd, ptmd_buf *refs)
{
    uint64_t vm = cp->vm, self;
    size_t i;
    location none = { 0, 0 };
    if (!heap_pointer(vm) || !object_of_type(rd, self = word_at(vm, 0), T_DATA) ||
        RTYPEDDATA_DATA((VALUE)self) != (void *)(uintptr_t)vm)
        return 0;
    for (i = 0; i < L->n_vm_fields; i++) {
        uint64_t p = word_at(vm, L->vm_fields[i].offset);
        size_t k;
        for (k = 0; k < i && p; k++)
            if (word_at(vm, L->vm_fields[k].offset) == p) p = 0;
        if (heap_pointer(p) && add_record(cp, rd, refs, p, PTMD_CODE_VM_TABLE, i + 1, 0, none) != 0) return -1;
    }
    return 0;
}

#define PTMD_CODE_RUNS 4

/* The records in address order, one a address. They come in runs, one per kind, each sorted but the
 * few VM tables' (sorted here), and are merged. */
static int order_records(ptmd_ruby_data *rd, const size_t *ends)
{
    ptmd_ruby_code *r = PTMD_BUF_AT(&rd->code, ptmd_ruby_code, 0), *out;
    size_t n = PTMD_BUF_COUNT(&rd->code, ptmd_ruby_code), at[PTMD_CODE_RUNS], k, i, m;
    ptmd_buf merged = { 0 };
    for (k = 0; k < PTMD_CODE_RUNS; k++) {
        at[k] = k ? ends[k - 1] : 0;
        for (i = at[k] + 1; i < ends[k] && r[i - 1].address < r[i].address; i++) {}
        if (i < ends[k]) ptmd_sort(r + at[k], ends[k] - at[k], sizeof(*r), by_address, NULL);
    }
    if (!(out = ptmd_buf_push(&merged, n * sizeof(*r) + 1))) return -1;
    for (i = 0, m = 0; i < n; i++) {
        size_t best = PTMD_CODE_RUNS;
        for (k = 0; k < PTMD_CODE_RUNS; k++)
            if (at[k] < ends[k] && (best == PTMD_CODE_RUNS || r[at[k]].address < r[at[best]].address)) best = k;
        if (!m || out[m - 1].address != r[at[best]].address) out[m++] = r[at[best]]; /* one record an address */
        at[best]++;
    }
    memcpy(r, out, m * sizeof(*r));
    rd->code.len = m * sizeof(*r);
    ptmd_buf_release(&merged);
    return 0;
}

int ptmd_ruby_code_finish(ptmd_code_pass *cp, ptmd_ruby_data *rd)
{
    ptmd_buf info = { 0 }, refs = { 0 };
    ment_index ix = { { 0 }, 0 };
    size_t i, n, ends[PTMD_CODE_RUNS];
    int rc = -1;
    if (!L) return 0;
    last_path = 0;
    last_path_ok = 0;
    /* sorted 8-byte keys make each kind's records a sorted run (order_records then only merges) */
    ptmd_sort(cp->modules.base, PTMD_BUF_COUNT(&cp->modules, uint64_t), sizeof(uint64_t), by_value, NULL);
    ptmd_sort(cp->ments.base, PTMD_BUF_COUNT(&cp->ments, uint64_t), sizeof(uint64_t), by_value, NULL);
    ptmd_sort(cp->iseqs.base, PTMD_BUF_COUNT(&cp->iseqs, uint64_t), sizeof(uint64_t), by_value, NULL);
    if (cp->oom || read_ments(cp, rd, &info) != 0) goto out;
    for (i = 0, n = PTMD_BUF_COUNT(&cp->modules, uint64_t); i < n; i++) {
        uint64_t v = *PTMD_BUF_AT(&cp->modules, uint64_t, i), m = module_itself(rd, v);
        location none = { 0, 0 };
        if (m && add_record(cp, rd, &refs, v, PTMD_CODE_MODULE, m, 0, none) != 0) goto out;
    }
    ends[0] = PTMD_BUF_COUNT(&rd->code, ptmd_ruby_code);
    for (i = 0, n = PTMD_BUF_COUNT(&info, ment_info); i < n; i++) {
        const ment_info *m = PTMD_BUF_AT(&info, ment_info, i);
        if (add_record(cp, rd, &refs, m->ment, PTMD_CODE_METHOD_ENTRY, m->owner, m->id, m->loc) != 0) goto out;
    }
    ends[1] = PTMD_BUF_COUNT(&rd->code, ptmd_ruby_code);
    if (index_ments(&info, &ix) != 0) goto out;
    if (charge_iseqs(cp, rd, &info, &ix, &refs) != 0) goto out;
    ends[2] = PTMD_BUF_COUNT(&rd->code, ptmd_ruby_code);
    if (add_vm_tables(cp, rd, &refs) != 0) goto out;
    ends[3] = PTMD_BUF_COUNT(&rd->code, ptmd_ruby_code);
    if (name_records(rd, &refs) != 0 || order_records(rd, ends) != 0) goto out;
    rd->code_present = 1;
    rc = 0;
out:
    ptmd_buf_release(&ix.slots);
    ptmd_buf_release(&info);
    ptmd_buf_release(&refs);
    ptmd_buf_release(&cp->modules);
    ptmd_buf_release(&cp->ments);
    ptmd_buf_release(&cp->iseqs);
    return rc;
}
