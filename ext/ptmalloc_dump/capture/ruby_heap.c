/* The Ruby pass: every ObjectSpace page and every live object (address, builtin type, class, typed
 * data type, and the slot words that may point into malloc memory), collected into mmap-backed
 * buffers while the GVL is held, before the malloc walk. The pages are found by their structure and
 * read as memory, allocating nothing: in the process itself, or in a fork snapshot's child on its copy
 * of the parent's memory (ptmd_ruby_pass_in_copy), so that the parent pauses for the fork alone. Only
 * where that cannot be done does the in-process pass ask the GC for its pages (which mallocs). Raw
 * facts only: matching objects to chunks happens when a dump is loaded. */
#include <ruby.h>
#include "capture/ruby_heap.h"
#include "capture/ruby_code.h"
#include "capture/ruby_graph.h"
#include "capture/ruby_pages.h"
#include "capture/ruby_sites.h"
#include "format/index.h"
#include <ruby/re.h>
#include <ruby/io.h>
#include <ruby/version.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rb_objspace_each_objects (gc.c) is exported by libruby for the objspace extension but is not in the
 * public headers, so Ruby does not promise to keep it: it is looked up when the extension loads, never
 * linked, and without it the Ruby pass is skipped (PtmallocDump.ruby_layer says why). */
typedef void each_objects_fn(int (*callback)(void *start, void *end, size_t stride, void *data), void *data);
static each_objects_fn *each_objects;
/* GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE]: the size and alignment of an object page body (0: not
 * known) */
static uint64_t heap_page_size;
/* The pages' layout, learned at load from each_objects' list: with it the pass finds the pages itself
 * (capture/ruby_pages.c), for each_objects mallocs and frees before the capture of glibc's counters. */
static ptmd_ruby_shape page_shape;
/* Whether an object the pass sees is garbage the lazy sweep has not freed yet: Ruby 3.4 exports
 * rb_objspace_garbage_object_p, 3.1 to 3.3 rb_objspace_markable_object_p (gc.c: is_live_object,
 * false for garbage on a page the sweep has not reached). Both are exported for the objspace
 * extension and looked up, never linked. */
static int (*garbage_object_p)(VALUE);
static int (*markable_object_p)(VALUE);
static size_t (*obj_slot_size)(VALUE);

/* The internal functions the pass needs (ptmd_ruby_functions_missing). */
static const char *const internal_functions[] = { "rb_objspace_each_objects" };
static const char *missing[sizeof(internal_functions) / sizeof(internal_functions[0]) + 1];

#define PTMD_RUBY_USHIFT 12 /* FL_USHIFT: T_IMEMO keeps its imemo_type above it */
#define PTMD_MIN_POINTER 0x10000ull
#define PTMD_MAX_POINTER 0x800000000000ull

typedef struct {
    ptmd_ruby_data *rd;
    ptmd_name_table names; /* the classes' and data types' names the objects ask for */
    uint64_t last_klass;
    uint32_t last_index;
    ptmd_code_pass code; /* what the code pass needs of the walk (capture/ruby_code.c) */
    int sweeping;        /* a lazy sweep is pending: some objects may be garbage */
    size_t found;        /* objects on the pages found by structure, kept or not */
    int oom;
} pass_ctx;

static uint32_t name_index(pass_ctx *c, uint64_t key, uint32_t kind)
{
    uint32_t i = ptmd_name_table_index(&c->names, key, kind);
    if (c->names.oom) c->oom = 1;
    return i;
}

/* n bytes at the end of b, within its room where it has it (the walk's common case: no call, no
 * zeroing, since every field is written), else grown; NULL with c->oom set when mmap fails. */
static inline void *append(pass_ctx *c, ptmd_buf *b, size_t n)
{
    void *p;
    if (b->len + n <= b->cap) {
        p = b->base + b->len;
        b->len += n;
        return p;
    }
    if (!(p = ptmd_buf_push(b, n))) c->oom = 1;
    return p;
}

static inline uint16_t keep(pass_ctx *c, uint64_t x)
{
    uint64_t *w = append(c, &c->rd->words, sizeof(x));
    if (!w) return 0;
    *w = x;
    return 1;
}

/* Records x when it could be a malloc'd user pointer (16-aligned, in range); returns 1 if kept. */
static uint16_t keep_word(pass_ctx *c, uint64_t x)
{
    if ((x & 15) || x < PTMD_MIN_POINTER || x >= PTMD_MAX_POINTER) return 0;
    return keep(c, x);
}

/* Records x when it is a Fixnum whose value could be a malloc'd user pointer ((pointer << 1) | 1, as
 * Fiddle.malloc hands one to Ruby): an embedded ivar or array element holding such an Integer. */
static uint16_t keep_int(pass_ctx *c, uint64_t x)
{
    if ((x & 31) != 1 || (x >> 1) < PTMD_MIN_POINTER || (x >> 1) >= PTMD_MAX_POINTER) return 0;
    return keep(c, x);
}

static int is_garbage(VALUE v)
{
    return garbage_object_p ? garbage_object_p(v) != 0 : markable_object_p ? !markable_object_p(v) : 0;
}

/* The slot's pointers into malloc memory. For the common types only the real pointer field is taken,
 * through the running Ruby's own struct layouts (the rest of a slot can hold stale words of a previous
 * object); other types keep every word that could be a pointer. Returns how many were kept. */
static inline uint16_t keep_slot_words(pass_ctx *c, VALUE v, VALUE flags, int type, size_t stride)
{
    const uintptr_t p = (uintptr_t)v;
    const uint64_t *w = (const uint64_t *)p;
    size_t k, nw = stride / sizeof(VALUE);
    uint16_t kept = 0;
    switch (type) {
    case T_STRING:
        if (flags & RSTRING_NOEMBED) kept = keep_word(c, (uint64_t)(uintptr_t)RSTRING(v)->as.heap.ptr);
        break;
    case T_ARRAY:
        if (!(flags & RARRAY_EMBED_FLAG)) {
            kept = keep_word(c, (uint64_t)(uintptr_t)RARRAY(v)->as.heap.ptr);
#if defined(RARRAY_TRANSIENT_P) && USE_TRANSIENT_HEAP
            /* Ruby 3.0 to 3.2 keep young arrays' elements in the transient heap (transient_heap.c),
             * outside malloc, where the reference scan does not look: their Integers are taken here
             * (such a buffer holds at most TRANSIENT_HEAP_ALLOC_MAX, 2 KiB) */
            if (flags & RARRAY_TRANSIENT_FLAG) {
                const VALUE *e = RARRAY(v)->as.heap.ptr;
                long n = RARRAY(v)->as.heap.len, i;
                for (i = 0; i < n && i < 256 && kept < UINT16_MAX; i++)
                    kept = (uint16_t)(kept + keep_int(c, (uint64_t)e[i]));
            }
#endif
        } else {
            for (k = 2; k < nw; k++) kept = (uint16_t)(kept + keep_int(c, w[k]));
        }
        break;
    case T_OBJECT:
        if (!(flags & ROBJECT_EMBED)) {
            kept = keep_word(c, (uint64_t)(uintptr_t)ROBJECT(v)->as.heap.ivptr);
#if RUBY_API_VERSION_MAJOR * 100 + RUBY_API_VERSION_MINOR < 302 && defined(USE_TRANSIENT_HEAP) && USE_TRANSIENT_HEAP
            /* as for arrays: an object's ivars outside its slot may sit in the transient heap (2.7 to
             * 3.1: ROBJ_TRANSIENT_FLAG, internal/object.h), whose Integers are taken here */
            {
                const VALUE *e = ROBJECT(v)->as.heap.ivptr;
                uint32_t n = ROBJECT(v)->as.heap.numiv, i;
                for (i = 0; e && i < n && i < 256 && kept < UINT16_MAX; i++)
                    kept = (uint16_t)(kept + keep_int(c, (uint64_t)e[i]));
            }
#endif
        } else
            for (k = 2; k < nw; k++) kept = (uint16_t)(kept + keep_int(c, w[k]));
        break;
    case T_HASH:
#if RUBY_API_VERSION_MAJOR * 100 + RUBY_API_VERSION_MINOR >= 303
        /* Ruby 3.3 keeps the table in the slot, after basic and ifnone (internal/hash.h:
         * RHASH_ST_TABLE). An st_table (RHASH_ST_TABLE_FLAG, FL_USER3) owns its bins and entries;
         * an ar_table holds its pairs in the slot and owns nothing. */
        if ((flags & RUBY_FL_USER3) && stride >= 3 * sizeof(VALUE) + sizeof(st_table)) {
            const st_table *t = (const st_table *)(p + 3 * sizeof(VALUE));
            kept =
                (uint16_t)(keep_word(c, (uint64_t)(uintptr_t)t->bins) + keep_word(c, (uint64_t)(uintptr_t)t->entries));
        }
#else
        kept = keep_word(c, w[2]); /* RHash.as.st / as.ar, the only pointer (internal/hash.h) */
#endif
        break;
    case T_DATA:
#ifdef TYPED_DATA_EMBEDDED
        /* Ruby 3.3's embeddable typed data keeps its struct in the slot (RTYPEDDATA_GET_DATA): its
         * words are the ones that may point into malloc memory */
        if (RTYPEDDATA_P(v) && RTYPEDDATA_EMBEDDED_P(v)) {
            /* the slot past the struct may hold stale words of an earlier object: the type's own
             * dsize bounds the struct when it has one (what ObjectSpace.memsize_of reports:
             * rb_objspace_data_type_memsize calls it, but Ruby 3.4 no longer exports that). Without
             * one (or a size of 0), only the words the struct surely covers: Ruby gives an object the
             * smallest slot that holds it, so its struct reaches past half the slot (the next smaller
             * slot size), and no further is known (Process::Status, 12 bytes in an 80-byte slot). */
            const rb_data_type_t *dt = RTYPEDDATA_TYPE(v);
            size_t at = (size_t)((uintptr_t)RTYPEDDATA_GET_DATA(v) - p), first = at / sizeof(VALUE), end = nw;
            size_t words = dt->function.dsize
                               ? (dt->function.dsize(RTYPEDDATA_GET_DATA(v)) + sizeof(VALUE) - 1) / sizeof(VALUE)
                               : 0;
            if (!words) words = stride / 2 > at ? (stride / 2 - at) / sizeof(VALUE) + 1 : 1;
            if (first + words < end) end = first + words;
            for (k = first; k < end; k++) kept = (uint16_t)(kept + keep_word(c, w[k]));
            break;
        }
#endif
        kept = keep_word(c, (uint64_t)(uintptr_t)DATA_PTR(v));
        break;
    case T_REGEXP: kept = keep_word(c, (uint64_t)(uintptr_t)RREGEXP_PTR(v)); break;
    case T_FILE: kept = keep_word(c, (uint64_t)(uintptr_t)RFILE(v)->fptr); break;
    case T_FLOAT:
    case T_RATIONAL:
    case T_COMPLEX:
    case T_SYMBOL: break;
    default:
        /* a struct's members, a proc's environment, ...: pointers and Integers holding one */
        for (k = 2; k < nw; k++) kept = (uint16_t)(kept + keep_word(c, w[k]) + keep_int(c, w[k]));
    }
    return kept;
}

static int each_page(void *start, void *end, size_t stride, void *data)
{
    pass_ctx *c = data;
    ptmd_ruby_page *pg = ptmd_buf_push(&c->rd->pages, sizeof(*pg));
    uintptr_t p;
    if (!pg || !stride) {
        c->oom = 1;
        return 1;
    }
    pg->start = (uint64_t)(uintptr_t)start;
    pg->end = (uint64_t)(uintptr_t)end;
    pg->stride = (uint32_t)stride;
    for (p = (uintptr_t)start; p + stride <= (uintptr_t)end; p += stride) {
        VALUE v = (VALUE)p;
        VALUE flags = RBASIC(v)->flags;
        int type = (int)(flags & T_MASK);
        ptmd_ruby_object *o;
        uint16_t kept;
        pg->total++;
        if (!flags || type == T_NONE) {
            pg->free++;
            continue;
        }
        if (type == T_ZOMBIE || type == T_MOVED) continue; /* not live: finalizer pending, or moved */
        pg->live++;
        if (!(o = append(c, &c->rd->objects, sizeof(*o)))) return 1;
        o->address = (uint64_t)v;
        o->type = (uint8_t)type;
        /* Ruby 3.1 keeps the GC age in FL_PROMOTED0|FL_PROMOTED1 (gc.c RVALUE_FLAGS_AGE; old is age 3,
         * both set); from 3.2 the age moved to a page bitmap and RVALUE_AGE_SET keeps the single bit
         * FL_PROMOTED set exactly when the age is old. RUBY_FL_PROMOTED is that mask in either. */
        o->flags = (flags & RUBY_FL_PROMOTED) == RUBY_FL_PROMOTED ? PTMD_OF_OLD : 0;
        if (c->sweeping && is_garbage(v)) o->flags |= PTMD_OF_GARBAGE;
        o->subtype = type == T_IMEMO ? (uint8_t)((flags >> PTMD_RUBY_USHIFT) & 0x0f) : 0;
        {
            /* T_IMEMO keeps other data in the klass word */
            uint64_t klass = type == T_IMEMO ? 0 : (uint64_t)RBASIC(v)->klass;
            if (!klass || RB_SPECIAL_CONST_P((VALUE)klass)) o->klass = PTMD_NO_NAME;
            else if (klass == c->last_klass) o->klass = c->last_index;
            else {
                o->klass = name_index(c, klass, PTMD_NAME_CLASS);
                c->last_klass = klass;
                c->last_index = o->klass;
            }
        }
        ptmd_ruby_code_note(&c->code, v, type, o->subtype);
        o->data_type = PTMD_NO_NAME;
        if (type == T_DATA && RTYPEDDATA_P(v) && RTYPEDDATA_TYPE(v))
            o->data_type = name_index(c, (uint64_t)(uintptr_t)RTYPEDDATA_TYPE(v), PTMD_NAME_DATA_TYPE);
        kept = keep_slot_words(c, v, flags, type, stride);
        if (c->oom) return 1;
        o->n_words = kept;
    }
    return 0;
}

#define PTMD_MAX_SINGLETON_DEPTH 64 /* singleton classes of singleton classes: a walk's bound */

/* rb_class_real, each step checked: a class in the heap's pages, else 0. Garbage the lazy sweep has
 * not freed yet may name a garbage class whose superclass's slot the sweep freed already (or gave to
 * another object): Module#name would read a freed table there. */
static VALUE real_class(const ptmd_ruby_data *rd, VALUE klass)
{
    int depth;
    for (depth = 0; depth < PTMD_MAX_SINGLETON_DEPTH; depth++) {
        int t;
        if (RB_SPECIAL_CONST_P(klass) || !ptmd_ruby_in_pages(rd, klass)) return 0;
        t = BUILTIN_TYPE(klass);
        if (t != T_CLASS && t != T_MODULE && t != T_ICLASS) return 0;
        /* RCLASS_SINGLETON_P: the bit means something else on a module (3.2 on: not initialized yet) */
        if (t == T_MODULE || (t == T_CLASS && !FL_TEST_RAW(klass, RUBY_FL_SINGLETON))) return klass;
        klass = rb_class_get_superclass(klass);
    }
    return 0;
}

/* The class's name as Module#name keeps it (no allocation), else what rb_class_path would make of
 * an anonymous class, written here into buf: rb_class_path allocates a new string for it. Returns
 * the length, 0 when klass is no class. */
static size_t class_name(const ptmd_ruby_data *rd, VALUE klass, const char **out, char *buf, size_t cap)
{
    VALUE name, real = real_class(rd, klass);
    if (!real) return 0;
    name = rb_mod_name(real);
    if (RB_TYPE_P(name, T_STRING)) {
        *out = RSTRING_PTR(name);
        return (size_t)RSTRING_LEN(name);
    }
    *out = buf;
    return (size_t)snprintf(buf, cap, "#<%s:0x%016lx>", BUILTIN_TYPE(real) == T_MODULE ? "Module" : "Class",
                            (unsigned long)real);
}

/* GC.stat keys, interned at load time: interning a new symbol would allocate objects here. Ruby 3.4
 * has no heap_tomb_pages (rb_gc_stat raises for an unknown key): it is read only where it exists. */
static VALUE sym_pages, sym_tomb, sym_live, sym_free, sym_total;
static int have_tomb;
/* GC section: GC.stat keys and GC.latest_gc_info keys; :time only where this Ruby has it (3.1+) */
static VALUE sym_count, sym_major, sym_minor, sym_freed, sym_old, sym_old_limit, sym_malloc_inc, sym_oldmalloc_inc,
    sym_time, sym_major_by, sym_state, sym_sweeping;
static int have_time;

/* A name listed in PTMALLOC_DUMP_HIDE_RUBY_FUNCTIONS (comma-separated) is treated as absent, so that
 * the fallback can be tried on a Ruby that has the function. */
static void *lookup(const char *name)
{
    const char *hidden = getenv("PTMALLOC_DUMP_HIDE_RUBY_FUNCTIONS");
    size_t len = strlen(name);
    while (hidden && *hidden) {
        size_t n = strcspn(hidden, ",");
        if (n == len && memcmp(hidden, name, len) == 0) return NULL;
        hidden += n + (hidden[n] == ',');
    }
    return dlsym(RTLD_DEFAULT, name);
}

const char *const *ptmd_ruby_functions_missing(void)
{
    size_t i, n = 0;
    for (i = 0; i < sizeof(internal_functions) / sizeof(internal_functions[0]); i++)
        if (!lookup(internal_functions[i])) missing[n++] = internal_functions[i];
    missing[n] = NULL;
    return missing;
}

static int learn_page(void *start, void *end, size_t stride, void *data)
{
    ptmd_ruby_pages_learn(data, (uint64_t)(uintptr_t)start, (uint64_t)(uintptr_t)end, stride);
    return 0;
}

void ptmd_ruby_heap_init(void)
{
    VALUE stat = rb_hash_new();
    each_objects = (each_objects_fn *)lookup("rb_objspace_each_objects");
    {
        VALUE k = rb_const_defined(rb_mGC, rb_intern("INTERNAL_CONSTANTS"))
                      ? rb_const_get(rb_mGC, rb_intern("INTERNAL_CONSTANTS"))
                      : Qnil;
        VALUE v = RB_TYPE_P(k, T_HASH) ? rb_hash_lookup(k, ID2SYM(rb_intern("HEAP_PAGE_SIZE"))) : Qnil;
        uint64_t ps = RB_INTEGER_TYPE_P(v) ? NUM2ULL(v) : 0, body = ps;
        if (!ps && RB_TYPE_P(k, T_HASH)) {
            /* Ruby 2.7 and 3.0 do not say it: their bodies are posix_memalign'd HEAP_PAGE_ALIGN (16 KiB)
             * aligned, a power of two above the slots they hold, and a malloc chunk's header short of it
             * (gc.c: HEAP_PAGE_SIZE = HEAP_PAGE_ALIGN - REQUIRED_SIZE_BY_MALLOC, five words) */
            VALUE lim = rb_hash_lookup(k, ID2SYM(rb_intern("HEAP_PAGE_OBJ_LIMIT")));
            VALUE rv = rb_hash_lookup(k, ID2SYM(rb_intern("RVALUE_SIZE")));
            uint64_t need = RB_INTEGER_TYPE_P(lim) && RB_INTEGER_TYPE_P(rv) ? NUM2ULL(lim) * NUM2ULL(rv) : 0;
            for (ps = 4096; need && ps < need && ps < (1u << 24); ps <<= 1) {}
            if (!need) ps = 0;
            body = ps - 5 * sizeof(size_t);
        }
        heap_page_size = ps >= 4096 && !(ps & (ps - 1)) ? ps : 0;
        page_shape.page_size = heap_page_size;
        page_shape.body_size = heap_page_size ? body : 0;
        /* the slot size: one for every page where the GC has one pool (Ruby 3.1's SIZE_POOL_COUNT 1),
         * else the page's own (rb_gc_obj_slot_size, 3.2 on) */
        obj_slot_size = (size_t(*)(VALUE))lookup("rb_gc_obj_slot_size");
        if (obj_slot_size) {
            page_shape.stride_of = obj_slot_size;
        } else if (RB_TYPE_P(k, T_HASH)) {
            VALUE pools = rb_hash_lookup(k, ID2SYM(rb_intern("SIZE_POOL_COUNT")));
            VALUE rv = rb_hash_lookup(k, ID2SYM(rb_intern("RVALUE_SIZE")));
            if ((NIL_P(pools) || (RB_INTEGER_TYPE_P(pools) && NUM2LONG(pools) == 1)) && RB_INTEGER_TYPE_P(rv))
                page_shape.const_stride = (uint32_t)NUM2ULONG(rv);
        }
    }
    garbage_object_p = (int (*)(VALUE))lookup("rb_objspace_garbage_object_p");
    markable_object_p = (int (*)(VALUE))lookup("rb_objspace_markable_object_p");
    sym_pages = ID2SYM(rb_intern("heap_allocated_pages"));
    sym_tomb = ID2SYM(rb_intern("heap_tomb_pages"));
    sym_live = ID2SYM(rb_intern("heap_live_slots"));
    sym_free = ID2SYM(rb_intern("heap_free_slots"));
    sym_total = ID2SYM(rb_intern("total_allocated_objects"));
    sym_count = ID2SYM(rb_intern("count"));
    sym_major = ID2SYM(rb_intern("major_gc_count"));
    sym_minor = ID2SYM(rb_intern("minor_gc_count"));
    sym_freed = ID2SYM(rb_intern("total_freed_objects"));
    sym_old = ID2SYM(rb_intern("old_objects"));
    sym_old_limit = ID2SYM(rb_intern("old_objects_limit"));
    sym_malloc_inc = ID2SYM(rb_intern("malloc_increase_bytes"));
    sym_oldmalloc_inc = ID2SYM(rb_intern("oldmalloc_increase_bytes"));
    sym_time = ID2SYM(rb_intern("time"));
    sym_major_by = ID2SYM(rb_intern("major_by"));
    sym_state = ID2SYM(rb_intern("state"));
    sym_sweeping = ID2SYM(rb_intern("sweeping"));
    ptmd_ruby_code_init();
    ptmd_ruby_graph_init();
    /* the first call of each interns its keys (Ruby's symbol table may grow, a malloc): made here at
     * require, not in the first dump */
    rb_gc_stat(stat);
    rb_gc_latest_gc_info(sym_state);
    if (each_objects && (page_shape.const_stride || page_shape.stride_of)) {
        each_objects(learn_page, &page_shape);
        ptmd_ruby_pages_learned(&page_shape);
    }
    have_tomb = rb_hash_lookup2(stat, sym_tomb, Qundef) != Qundef;
    have_time = rb_hash_lookup2(stat, sym_time, Qundef) != Qundef;
    RB_GC_GUARD(stat);
}

static int by_page_start(const void *a, const void *b, void *ctx)
{
    uint64_t x = ((const ptmd_ruby_page *)a)->start, y = ((const ptmd_ruby_page *)b)->start;
    PTMD_UNUSED(ctx);
    return x < y ? -1 : x > y;
}

/* GC.stat's counts and what GC.latest_gc_info says of the latest GC; reading one key of either
 * makes no object. */
static void read_gc_stat(ptmd_gc_rec *g)
{
    g->count = rb_gc_stat(sym_count);
    g->major_gc_count = rb_gc_stat(sym_major);
    g->minor_gc_count = rb_gc_stat(sym_minor);
    g->total_allocated_objects = rb_gc_stat(sym_total);
    g->total_freed_objects = rb_gc_stat(sym_freed);
    g->old_objects = rb_gc_stat(sym_old);
    g->old_objects_limit = rb_gc_stat(sym_old_limit);
    g->heap_live_slots = rb_gc_stat(sym_live);
    g->malloc_increase_bytes = rb_gc_stat(sym_malloc_inc);
    g->oldmalloc_increase_bytes = rb_gc_stat(sym_oldmalloc_inc);
    g->time_ms = have_time ? rb_gc_stat(sym_time) : 0;
    if (RTEST(rb_gc_latest_gc_info(sym_major_by))) g->flags |= PTMD_GF_LAST_MAJOR;
}

void ptmd_ruby_pass_after_full_gc(ptmd_ruby_data *rd)
{
    rd->gc.flags |= PTMD_GF_FULL_GC;
}

uint64_t ptmd_ruby_heap_page_size(void)
{
    return heap_page_size;
}

/* The pass over the pages found by their structure; 1 when they hold the heap_live_slots objects GC.stat
 * counts (garbage the lazy sweep has not freed included: it counts them too), else 0 with rd and the
 * code pass emptied again for each_objects. Nothing here allocates, and the sweep is left pending. */
static int pages_by_structure(ptmd_ruby_data *rd, pass_ctx *c)
{
    ptmd_buf found;
    ptmd_err err;
    size_t i, n;
    if (!page_shape.usable || (c->sweeping && !garbage_object_p && !markable_object_p)) return 0;
    memset(&found, 0, sizeof(found));
    if (ptmd_ruby_pages_find(&page_shape, &found, &err) == 0) {
        n = PTMD_BUF_COUNT(&found, ptmd_ruby_page);
        for (i = 0; i < n && !c->oom; i++) {
            const ptmd_ruby_page *pg = PTMD_BUF_AT(&found, ptmd_ruby_page, i);
            each_page((void *)(uintptr_t)pg->start, (void *)(uintptr_t)pg->end, pg->stride, c);
        }
    }
    ptmd_buf_release(&found);
    c->found = PTMD_BUF_COUNT(&rd->objects, ptmd_ruby_object);
    if (c->oom || c->found == (size_t)rb_gc_stat(sym_live)) return 1;
    /* what the pages held is dropped: objects, words, the names they asked for, the code noted */
    rd->pages.len = rd->objects.len = rd->words.len = 0;
    ptmd_name_table_release(&c->names);
    c->last_klass = 0;
    c->code.modules.len = c->code.ments.len = c->code.iseqs.len = 0;
    c->code.vm = 0;
    return 0;
}

/* Names in index order, then the code records: read from memory, nothing allocated (the capture of
 * glibc's counters follows). */
static void finish_pass(ptmd_ruby_data *rd, pass_ctx *c)
{
    size_t i, n = PTMD_BUF_COUNT(&c->names.order, ptmd_name_slot);
    for (i = 0; i < n && !c->oom; i++) {
        const ptmd_name_slot *s = PTMD_BUF_AT(&c->names.order, ptmd_name_slot, i);
        if (s->kind == PTMD_NAME_DATA_TYPE) {
            const char *nm = ((const rb_data_type_t *)(uintptr_t)s->key)->wrap_struct_name;
            if (!nm) nm = "(unnamed)";
            if (ptmd_ruby_add_name(rd, s->key, s->kind, nm, strlen(nm))) c->oom = 1;
        } else {
            char buf[64];
            const char *name = "(internal)";
            size_t len = class_name(rd, (VALUE)s->key, &name, buf, sizeof(buf));
            if (ptmd_ruby_add_name(rd, s->key, s->kind, name, len ? len : 10)) c->oom = 1;
        }
    }
    if (!c->oom && ptmd_ruby_code_finish(&c->code, rd) != 0) c->oom = 1;
    ptmd_name_table_release(&c->names);
}

/* GC.stat's figures the RUBY_META section keeps, read with the pass. */
static void read_meta(ptmd_ruby_data *rd)
{
    read_gc_stat(&rd->gc);
    /* by address (the GC hands them out in its own order), for lookups */
    ptmd_sort(rd->pages.base, PTMD_BUF_COUNT(&rd->pages, ptmd_ruby_page), sizeof(ptmd_ruby_page), by_page_start, NULL);
    rd->meta.heap_allocated_pages = rb_gc_stat(sym_pages);
    rd->meta.heap_tomb_pages = have_tomb ? (uint32_t)rb_gc_stat(sym_tomb) : 0;
    rd->meta.heap_live_slots = rb_gc_stat(sym_live);
    rd->meta.heap_free_slots = rb_gc_stat(sym_free);
    rd->meta.total_allocated_objects = rb_gc_stat(sym_total);
}

static void begin_pass(ptmd_ruby_data *rd, pass_ctx *c)
{
    memset(c, 0, sizeof(*c));
    c->rd = rd;
    if (rb_gc_latest_gc_info(sym_state) == sym_sweeping) rd->gc.flags |= PTMD_GF_SWEEPING;
    c->sweeping = (rd->gc.flags & PTMD_GF_SWEEPING) != 0;
}

/* What follows the objects just recorded: their graph, when asked for (where it cannot be had, the
 * reason), and the traced ones' allocation sites while tracing. 0, or -1 when mmap fails. */
static int after_walk(ptmd_ruby_data *rd)
{
    rd->graph_problem[0] = '\0';
    if (rd->graph_wanted) ptmd_ruby_graph(rd, rd->graph_problem, sizeof(rd->graph_problem));
    return ptmd_ruby_sites_capture(rd);
}

/* Collects Ruby's heap into rd. Raises on failure. */
void ptmd_ruby_pass(ptmd_ruby_data *rd)
{
    pass_ctx c;
    uint64_t t0 = ptmd_now_ns();
    if (!each_objects) rb_raise(rb_eNotImpError, "this Ruby does not export rb_objspace_each_objects");
    begin_pass(rd, &c);
    if (!pages_by_structure(rd, &c)) {
        /* each_objects ends the pending lazy sweep before it lists the pages: no garbage is left */
        rd->meta.flags |= PTMD_RF_PAGES_FROM_GC;
        c.sweeping = 0;
        each_objects(each_page, &c);
    }
    read_meta(rd);
    finish_pass(rd, &c);
    rd->meta.pass_ns = ptmd_now_ns() - t0;
    rd->present = 1;
    if (c.oom || after_walk(rd) != 0)
        rb_raise(rb_eNoMemError, "ptmalloc_dump: mmap failed while recording Ruby's heap");
}

int ptmd_ruby_pass_by_structure_possible(void)
{
    return each_objects && page_shape.usable &&
           (garbage_object_p || markable_object_p || rb_gc_latest_gc_info(sym_state) != sym_sweeping);
}

/* In a fork snapshot's child, on its copy of the parent's memory: the pages by their structure only.
 * The child must not ask the GC for them: rb_objspace_each_objects would end the pending lazy sweep,
 * whose frees (and the finalizers of garbage such as an IO's flush of its buffer) would run a second
 * time in the copy. It reads memory and raises nothing. */
int ptmd_ruby_pass_in_copy(ptmd_ruby_data *rd, char *why, size_t cap)
{
    pass_ctx c;
    uint64_t t0 = ptmd_now_ns();
    begin_pass(rd, &c);
    if (!pages_by_structure(rd, &c)) {
        snprintf(why, cap,
                 "Ruby's pages found by their structure in the snapshot held %lu objects where GC.stat "
                 "counts %lu (a page swapped out, or one not recognised); the snapshot process may not ask the GC, "
                 "whose sweep would run garbage's finalizers a second time: dump with fork: false for the Ruby heap",
                 (unsigned long)c.found, (unsigned long)rb_gc_stat(sym_live));
        return -1;
    }
    read_meta(rd);
    finish_pass(rd, &c);
    rd->meta.pass_ns = ptmd_now_ns() - t0;
    rd->meta.flags |= PTMD_RF_IN_SNAPSHOT;
    rd->present = 1;
    if (c.oom || after_walk(rd) != 0) {
        rd->present = 0;
        snprintf(why, cap, "mmap failed while the snapshot process recorded Ruby's heap");
        return -1;
    }
    return 0;
}
