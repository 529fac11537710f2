/* PtmallocDump::Dump: a loaded dump file. Reading and every figure are plain C (format/reader.c,
 * analysis/); this file turns records into Ruby values. */
#include "bindings/bindings.h"
#include "analysis/diff.h"
#include "analysis/explorer.h"
#include "format/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    unsigned char *data; /* anonymous mapping holding the whole file */
    size_t len, cap;
    void *index; /* chunk records with their addresses and the heap order, mmapped */
    size_t index_cap;
    ptmd_view view;
    ptmd_page_usage *usage;   /* per page, computed on first use */
    ptmd_attribution attr;    /* chunk owners, computed on first use */
    uint32_t *obj_order;      /* Ruby object indices by address, computed on first use */
    ptmd_owners owners;       /* ruby, anchored or leaked per chunk, computed on first use */
    uint64_t *tcache_keys;    /* the tcache entries by chunk (analysis/explorer.h), sorted on first use */
    ptmd_retention retention; /* the object graph's dominators and paths, computed on first use */
    int attr_ready, owners_ready, retention_ready;
    int loaded;
} rb_dump_t;

static void dump_free(void *p)
{
    rb_dump_t *d = p;
    /* the mappings were reported to the GC when loaded: take them back */
    if (d->loaded) rb_gc_adjust_memory_usage(-(ssize_t)(d->cap + d->index_cap));
    if (d->data) munmap(d->data, d->cap);
    if (d->index) munmap(d->index, d->index_cap);
    xfree(d->usage);
    xfree(d->attr.owner);
    xfree(d->attr.category);
    xfree(d->attr.direct);
    xfree(d->obj_order);
    xfree(d->owners.kind);
    xfree(d->owners.anchor);
    xfree(d->owners.direct);
    xfree(d->tcache_keys);
    ptmd_retention_free(&d->retention);
    xfree(d);
}

static size_t dump_size(const void *p)
{
    const rb_dump_t *d = p;
    return sizeof(*d) + d->cap + d->index_cap;
}

static const rb_data_type_t dump_type = {
    .wrap_struct_name = "PtmallocDump::Dump",
    .function = { .dmark = NULL, .dfree = dump_free, .dsize = dump_size },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE dump_alloc(VALUE klass)
{
    rb_dump_t *d;
    return TypedData_Make_Struct(klass, rb_dump_t, &dump_type, d);
}

static rb_dump_t *get_dump(VALUE self)
{
    rb_dump_t *d;
    TypedData_Get_Struct(self, rb_dump_t, &dump_type, d);
    if (!d->loaded) rb_raise(rb_eRuntimeError, "PtmallocDump::Dump is not loaded");
    return d;
}

const ptmd_view *ptmd_rb_dump_view(VALUE self)
{
    return &get_dump(self)->view;
}

const ptmd_page_usage *ptmd_rb_dump_usage(VALUE self)
{
    rb_dump_t *d = get_dump(self);
    if (!d->usage) {
        d->usage = ALLOC_N(ptmd_page_usage, d->view.n_pages ? d->view.n_pages : 1);
        ptmd_page_usage_fill(&d->view, d->usage);
    }
    return d->usage;
}

const ptmd_attribution *ptmd_rb_dump_attribution(VALUE self)
{
    rb_dump_t *d = get_dump(self);
    if (!d->attr_ready) {
        size_t n = d->view.n_chunks ? d->view.n_chunks : 1;
        if (!d->attr.owner) d->attr.owner = ALLOC_N(uint32_t, n);
        if (!d->attr.category) d->attr.category = ALLOC_N(uint8_t, n);
        if (!d->attr.direct) d->attr.direct = ALLOC_N(uint8_t, n);
        if (ptmd_attribute(&d->view, &d->attr) != 0) rb_raise(rb_eNoMemError, "attributing chunks to Ruby objects");
        d->attr_ready = 1;
    }
    return &d->attr;
}

const ptmd_owners *ptmd_rb_dump_owners(VALUE self)
{
    rb_dump_t *d = get_dump(self);
    if (!ptmd_owners_available(&d->view)) return NULL;
    if (!d->owners_ready) {
        const ptmd_attribution *a = ptmd_rb_dump_attribution(self);
        size_t n = d->view.n_chunks ? d->view.n_chunks : 1;
        if (!d->owners.kind) d->owners.kind = ALLOC_N(uint8_t, n);
        if (!d->owners.anchor) d->owners.anchor = ALLOC_N(uint32_t, n);
        if (!d->owners.direct) d->owners.direct = ALLOC_N(uint8_t, n);
        if (ptmd_owners_classify(&d->view, a, &d->owners) != 0) rb_raise(rb_eNoMemError, "classifying chunks by owner");
        d->owners_ready = 1;
    }
    return &d->owners;
}

const ptmd_retention *ptmd_rb_dump_retention(VALUE self)
{
    rb_dump_t *d = get_dump(self);
    if (!d->view.ruby_graph) return NULL;
    if (!d->retention_ready) {
        const ptmd_attribution *a = ptmd_rb_dump_attribution(self);
        if (ptmd_retention_build(&d->view, a, &d->retention) != 0)
            rb_raise(rb_eNoMemError, "building the dominator tree of Ruby's objects");
        d->retention_ready = 1;
    }
    return &d->retention;
}

const uint32_t *ptmd_rb_dump_object_order(VALUE self)
{
    rb_dump_t *d = get_dump(self);
    if (!d->obj_order) {
        uint32_t *o = ALLOC_N(uint32_t, d->view.n_ruby_objects ? d->view.n_ruby_objects : 1);
        ptmd_object_order(&d->view, o);
        d->obj_order = o;
    }
    return d->obj_order;
}

/* Dump#_load(path): reads and validates the file. */
static VALUE dump_load(VALUE self, VALUE path)
{
    rb_dump_t *d;
    struct stat st;
    ptmd_err err;
    const char *cpath;
    int fd;
    size_t got = 0;

    TypedData_Get_Struct(self, rb_dump_t, &dump_type, d);
    if (d->loaded) rb_raise(rb_eRuntimeError, "already loaded");
    FilePathValue(path);
    cpath = StringValueCStr(path);
    fd = open(cpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0) rb_sys_fail_str(path);
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        rb_syserr_fail_str(e, path);
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        rb_raise(rb_path2class("PtmallocDump::FormatError"), "%s: is a directory, not a dump file", cpath);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        rb_raise(rb_path2class("PtmallocDump::FormatError"), "%s: not a regular file", cpath);
    }
    d->cap = (size_t)st.st_size + 8;
    d->data = mmap(NULL, d->cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (d->data == MAP_FAILED) {
        int e = errno;
        d->data = NULL;
        close(fd);
        rb_syserr_fail_str(e, path);
    }
    /* read, not map the file: a file truncated under us must not raise SIGBUS */
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, d->data + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    d->len = got;
    if (ptmd_read_view(d->data, d->len, cpath, &d->view, &err) != 0) goto bad;
    d->index_cap = ptmd_view_index_size(&d->view) + 16;
    d->index = mmap(NULL, d->index_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (d->index == MAP_FAILED) {
        int e = errno;
        d->index = NULL;
        munmap(d->data, d->cap);
        d->data = NULL;
        rb_syserr_fail_str(e, path);
    }
    if (ptmd_view_build_index(&d->view, d->index, cpath, &err) != 0) goto bad;
    mprotect(d->data, d->cap, PROT_READ);
    mprotect(d->index, d->index_cap, PROT_READ);
    d->loaded = 1;
    /* mmapped memory the GC would not otherwise count: let it weigh in on when to collect */
    rb_gc_adjust_memory_usage((ssize_t)(d->cap + d->index_cap));
    return self;
bad:
    munmap(d->data, d->cap);
    d->data = NULL;
    if (d->index) munmap(d->index, d->index_cap);
    d->index = NULL;
    ptmd_rb_raise(&err);
    return Qnil;
}

static VALUE dump_meta(VALUE self)
{
    return ptmd_rb_meta(ptmd_rb_dump_view(self));
}
static VALUE dump_mallinfo2(VALUE self)
{
    return ptmd_rb_mallinfo2(ptmd_rb_dump_view(self));
}
static VALUE dump_arena_records(VALUE self)
{
    return ptmd_rb_arena_records(ptmd_rb_dump_view(self));
}
static VALUE dump_heap_records(VALUE self)
{
    return ptmd_rb_heap_records(ptmd_rb_dump_view(self));
}
static VALUE dump_thread_records(VALUE self)
{
    return ptmd_rb_thread_records(ptmd_rb_dump_view(self));
}
static VALUE dump_anomaly_records(VALUE self)
{
    return ptmd_rb_anomaly_records(ptmd_rb_dump_view(self));
}

static VALUE dump_malloc_info(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    return rb_utf8_str_new(v->malloc_info ? v->malloc_info : "", (long)v->malloc_info_len);
}

static VALUE state_sym(int st)
{
    static VALUE syms[PTMD_ST_COUNT];
    if (!syms[0]) {
        int i;
        for (i = 0; i < PTMD_ST_COUNT; i++) syms[i] = PTMD_SYM(ptmd_state_names[i]);
    }
    return syms[st];
}

/* The Chunk Struct (lib/ptmalloc_dump/records.rb) for record i, in `heap` and `arena` (Ruby objects
 * of this dump, or nil). */
static VALUE make_chunk(VALUE klass, const ptmd_view *v, size_t i, VALUE arena, VALUE heap)
{
    const ptmd_chunk_rec *c = &v->chunks[i];
    VALUE argv[6];
    argv[0] = PTMD_U64(c->addr);
    argv[1] = PTMD_U64(ptmd_rec_size(c));
    argv[2] = state_sym(ptmd_rec_state(c));
    argv[3] = arena;
    argv[4] = heap;
    argv[5] = INT2FIX((int)(c->word >> PTMD_CF_SHIFT));
    return rb_class_new_instance(6, argv, klass);
}

static VALUE chunk_class(void)
{
    return rb_const_get(ptmd_mPtmallocDump, rb_intern("Chunk"));
}

/* Chunk i with its heap and arena, found in this dump's `heaps` and `arenas` Arrays. */
static VALUE chunk_in(const ptmd_view *v, long i, VALUE heaps, VALUE arenas)
{
    long hi = ptmd_view_heap_of_chunk(v, (uint64_t)i);
    VALUE heap = hi >= 0 ? rb_ary_entry(heaps, hi) : Qnil, arena = Qnil;
    if (hi >= 0 && v->heaps[hi].arena != PTMD_NO_ARENA) arena = rb_ary_entry(arenas, v->heaps[hi].arena);
    return make_chunk(chunk_class(), v, (size_t)i, arena, heap);
}

/* Dump#_each_chunk(heaps, arenas) { |chunk| } */
static VALUE dump_each_chunk(VALUE self, VALUE heaps, VALUE arenas)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE klass = chunk_class();
    size_t h;
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        VALUE heap = rb_ary_entry(heaps, (long)h);
        VALUE arena = hp->arena == PTMD_NO_ARENA ? Qnil : rb_ary_entry(arenas, hp->arena);
        uint64_t i;
        for (i = hp->first_chunk; i < hp->first_chunk + hp->n_chunks; i++)
            rb_yield(make_chunk(klass, v, i, arena, heap));
    }
    return self;
}

/* Dump#_find_chunk(address, containing, heaps, arenas) -> Chunk or nil */
static VALUE dump_find_chunk(VALUE self, VALUE addr, VALUE containing, VALUE heaps, VALUE arenas)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    long i = ptmd_view_find_chunk(v, NUM2ULL(addr), RTEST(containing));
    return i < 0 ? Qnil : chunk_in(v, i, heaps, arenas);
}

/* Dump#_chunk_by_index(i, heaps, arenas) -> Chunk or nil */
static VALUE dump_chunk_by_index(VALUE self, VALUE index, VALUE heaps, VALUE arenas)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    long i = NUM2LONG(index);
    return i < 0 || (size_t)i >= v->n_chunks ? Qnil : chunk_in(v, i, heaps, arenas);
}

/* Dump#_tcache_entry(address) -> [thread index, tcache bin, position in its list] for the chunk that
 * starts at address when a thread's tcache lists it; nil otherwise or when the file has no
 * TCACHE_ENTRIES section. */
static VALUE dump_tcache_entry(VALUE self, VALUE addr)
{
    rb_dump_t *d = get_dump(self);
    const ptmd_view *v = &d->view;
    long i, k;
    const ptmd_tcache_entry *e;
    if (!v->tcache_entries) return Qnil;
    if (!d->tcache_keys) {
        uint64_t *keys = ALLOC_N(uint64_t, v->n_tcache_entries ? v->n_tcache_entries : 1);
        ptmd_tcache_keys(v, keys);
        d->tcache_keys = keys;
    }
    i = ptmd_view_find_chunk(v, NUM2ULL(addr), 0);
    if (i < 0 || (k = ptmd_tcache_entry_of(v, d->tcache_keys, (uint64_t)i)) < 0) return Qnil;
    e = &v->tcache_entries[k];
    return rb_ary_new_from_args(3, ULONG2NUM(e->thread), INT2FIX(e->bin), INT2FIX(e->position));
}

/* Dump#_tcache_entries? -> whether the file records which thread's tcache holds each tcache chunk */
static VALUE dump_tcache_entries_p(VALUE self)
{
    return PTMD_BOOL(ptmd_rb_dump_view(self)->tcache_entries);
}

static VALUE dump_chunk_count(VALUE self)
{
    return PTMD_U64(get_dump(self)->view.n_chunks);
}

/* Dump#_pages(heap_index) -> binary String of PTMD_PAGE_* flags */
static VALUE dump_pages(VALUE self, VALUE index)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    long i = NUM2LONG(index);
    if (i < 0 || (size_t)i >= v->n_heaps) rb_raise(rb_eIndexError, "no heap %ld", i);
    return rb_str_new((const char *)v->pages + v->heaps[i].first_page, (long)v->heaps[i].n_pages);
}

static VALUE dump_summary(VALUE self)
{
    return ptmd_rb_summary(ptmd_rb_dump_view(self));
}

static VALUE dump_analysis(VALUE self)
{
    return ptmd_rb_analysis(ptmd_rb_dump_view(self), ptmd_rb_dump_usage(self));
}

static VALUE dump_ruby_p(VALUE self)
{
    return PTMD_BOOL(ptmd_rb_dump_view(self)->ruby_meta);
}

/* Dump#_size_classes -> { size class => [chunks, bytes] } (analysis.h: ptmd_size_classes) */
static VALUE dump_size_classes(VALUE self)
{
    ptmd_size_classes sc;
    VALUE h = rb_hash_new();
    size_t i;
    ptmd_size_classes_fill(ptmd_rb_dump_view(self), &sc);
    for (i = 0; i < PTMD_EXACT_CLASSES; i++)
        if (sc.exact_count[i])
            rb_hash_aset(h, PTMD_U64(i * 16),
                         rb_ary_new_from_args(2, PTMD_U64(sc.exact_count[i]), PTMD_U64(sc.exact_bytes[i])));
    for (i = 0; i < 64; i++)
        if (sc.pow2_count[i])
            rb_hash_aset(h, PTMD_U64(1ull << i),
                         rb_ary_new_from_args(2, PTMD_U64(sc.pow2_count[i]), PTMD_U64(sc.pow2_bytes[i])));
    return h;
}

/* Dump#_first_difference(other) -> chunk index or nil (diff.h: ptmd_first_difference) */
static VALUE dump_first_difference(VALUE self, VALUE other)
{
    long i = ptmd_first_difference(ptmd_rb_dump_view(self), ptmd_rb_dump_view(other));
    return i < 0 ? Qnil : LONG2NUM(i);
}

/* Dump#trim_released -> Array of bytes per arena that malloc_trim(0) released (trim_check), or nil */
static VALUE dump_trim_released(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE ary;
    size_t i;
    if (!v->trim_released) return Qnil;
    ary = rb_ary_new_capa((long)v->n_trim_released);
    for (i = 0; i < v->n_trim_released; i++) rb_ary_push(ary, PTMD_U64(v->trim_released[i]));
    return ary;
}

static VALUE dump_rss(VALUE self)
{
    return ptmd_rb_rss(ptmd_rb_dump_view(self));
}
static VALUE dump_mappings(VALUE self)
{
    return ptmd_rb_mappings(ptmd_rb_dump_view(self));
}
static VALUE dump_mappings_head(VALUE self)
{
    return ptmd_rb_mappings_head(ptmd_rb_dump_view(self));
}
static VALUE dump_gc(VALUE self)
{
    return ptmd_rb_gc(ptmd_rb_dump_view(self));
}
static VALUE dump_source(VALUE self)
{
    return ptmd_rb_source(ptmd_rb_dump_view(self));
}
static VALUE dump_snapshot(VALUE self)
{
    return ptmd_rb_snapshot(ptmd_rb_dump_view(self));
}

static VALUE dump_file_size(VALUE self)
{
    return PTMD_U64(get_dump(self)->len);
}

void ptmd_dump_class_init(void)
{
    VALUE cDump = rb_define_class_under(ptmd_mPtmallocDump, "Dump", rb_cObject);
    rb_define_alloc_func(cDump, dump_alloc);
    rb_define_private_method(cDump, "_load", dump_load, 1);
    rb_define_private_method(cDump, "_meta", dump_meta, 0);
    rb_define_private_method(cDump, "_mallinfo2", dump_mallinfo2, 0);
    rb_define_private_method(cDump, "_arena_records", dump_arena_records, 0);
    rb_define_private_method(cDump, "_heap_records", dump_heap_records, 0);
    rb_define_private_method(cDump, "_thread_records", dump_thread_records, 0);
    rb_define_private_method(cDump, "_anomaly_records", dump_anomaly_records, 0);
    rb_define_private_method(cDump, "_each_chunk", dump_each_chunk, 2);
    rb_define_private_method(cDump, "_find_chunk", dump_find_chunk, 4);
    rb_define_private_method(cDump, "_chunk_by_index", dump_chunk_by_index, 3);
    rb_define_private_method(cDump, "_pages", dump_pages, 1);
    rb_define_private_method(cDump, "_tcache_entry", dump_tcache_entry, 1);
    rb_define_private_method(cDump, "_tcache_entries?", dump_tcache_entries_p, 0);
    rb_define_private_method(cDump, "_summary", dump_summary, 0);
    rb_define_private_method(cDump, "_analysis", dump_analysis, 0);
    rb_define_private_method(cDump, "_size_classes", dump_size_classes, 0);
    rb_define_private_method(cDump, "_first_difference", dump_first_difference, 1);
    rb_define_private_method(cDump, "_ruby?", dump_ruby_p, 0);
    rb_define_private_method(cDump, "_rss", dump_rss, 0);
    rb_define_private_method(cDump, "_mappings", dump_mappings, 0);
    rb_define_private_method(cDump, "_mappings_head", dump_mappings_head, 0);
    rb_define_private_method(cDump, "_gc", dump_gc, 0);
    rb_define_private_method(cDump, "_source", dump_source, 0);
    rb_define_private_method(cDump, "_snapshot", dump_snapshot, 0);
    rb_define_method(cDump, "malloc_info", dump_malloc_info, 0);
    rb_define_method(cDump, "chunk_count", dump_chunk_count, 0);
    rb_define_method(cDump, "file_size", dump_file_size, 0);
    rb_define_method(cDump, "trim_released", dump_trim_released, 0);
}
