/* PtmallocDump::Dump: a loaded dump file. Parsing and every figure are computed in C (reader.c,
 * summary.c); this file turns records into Ruby values. */
#include "bindings/bindings.h"
#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "format/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static VALUE cDump;

typedef struct {
    unsigned char *data;    /* anonymous mapping holding the whole file */
    size_t len, cap;
    ptmd_chunk_rec *recs;   /* chunk records with their addresses, mmapped */
    size_t recs_cap;
    ptmd_view view;
    ptmd_page_usage *usage; /* per page, computed on first use */
    ptmd_attribution attr;  /* chunk owners, computed on first use */
    uint32_t *obj_order;    /* Ruby object indices by address, computed on first use */
    int attr_ready;
    int loaded;
} rb_dump_t;

static void dump_free(void *p)
{
    rb_dump_t *d = p;
    /* the mappings were reported to the GC when loaded: take them back */
    if (d->loaded) rb_gc_adjust_memory_usage(-(ssize_t)(d->cap + d->recs_cap));
    if (d->data) munmap(d->data, d->cap);
    if (d->recs) munmap(d->recs, d->recs_cap);
    xfree(d->usage);
    xfree(d->attr.owner);
    xfree(d->attr.category);
    xfree(d->attr.direct);
    xfree(d->obj_order);
    xfree(d);
}

static size_t dump_size(const void *p)
{
    const rb_dump_t *d = p;
    return sizeof(*d) + d->cap + d->recs_cap;
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

static const ptmd_ruby_object *order_objects;

static int by_address(const void *a, const void *b)
{
    uint64_t x = order_objects[*(const uint32_t *)a].address, y = order_objects[*(const uint32_t *)b].address;
    return x < y ? -1 : x > y;
}

const uint32_t *ptmd_rb_dump_object_order(VALUE self)
{
    rb_dump_t *d = get_dump(self);
    if (!d->obj_order) {
        size_t i, n = d->view.n_ruby_objects;
        uint32_t *o = ALLOC_N(uint32_t, n ? n : 1);
        for (i = 0; i < n; i++) o[i] = (uint32_t)i;
        order_objects = d->view.ruby_objects;   /* the GVL serialises this */
        qsort(o, n, sizeof(uint32_t), by_address);
        d->obj_order = o;
    }
    return d->obj_order;
}

#define U64(x) ULL2NUM((unsigned long long)(x))
#define SET(h, key, val) rb_hash_aset((h), ID2SYM(rb_intern(key)), (val))

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
    d->recs_cap = d->view.n_chunks * sizeof(ptmd_chunk_rec) + 16;
    d->recs = mmap(NULL, d->recs_cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (d->recs == MAP_FAILED) {
        int e = errno;
        d->recs = NULL;
        munmap(d->data, d->cap);
        d->data = NULL;
        rb_syserr_fail_str(e, path);
    }
    if (ptmd_view_build_chunks(&d->view, d->recs, cpath, &err) != 0) goto bad;
    mprotect(d->data, d->cap, PROT_READ);
    mprotect(d->recs, d->recs_cap, PROT_READ);
    d->loaded = 1;
    /* mmapped memory the GC would not otherwise count: let it weigh in on when to collect */
    rb_gc_adjust_memory_usage((ssize_t)(d->cap + d->recs_cap));
    return self;
bad:
    munmap(d->data, d->cap);
    d->data = NULL;
    if (d->recs) munmap(d->recs, d->recs_cap);
    d->recs = NULL;
    ptmd_rb_raise(&err);
    return Qnil;
}

static VALUE dump_meta(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    const ptmd_meta *m = v->meta;
    VALUE h = rb_hash_new();
    size_t off = 0;
    SET(h, "pid", U64(m->pid));
    SET(h, "ppid", U64(m->ppid));
    SET(h, "time_sec", LL2NUM(m->time_sec));
    SET(h, "time_nsec", U64(m->time_nsec));
    SET(h, "page_size", U64(m->page_size));
    SET(h, "main_arena", U64(m->main_arena));
    SET(h, "mp", U64(m->mp_addr));
    SET(h, "libc_base", U64(m->libc_base));
    SET(h, "sbrk_base", U64(m->sbrk_base));
    SET(h, "heap_max_size", U64(m->heap_max_size));
    SET(h, "mmap_threshold", U64(m->mmap_threshold));
    SET(h, "trim_threshold", U64(m->trim_threshold));
    SET(h, "top_pad", U64(m->top_pad));
    SET(h, "arena_max", U64(m->arena_max));
    SET(h, "arena_test", U64(m->arena_test));
    SET(h, "n_mmaps", U64(m->n_mmaps));
    SET(h, "mmapped_mem", U64(m->mmapped_mem));
    SET(h, "max_mmapped_mem", U64(m->max_mmapped_mem));
    SET(h, "tcache_bins", U64(m->tcache_bins));
    SET(h, "tcache_count", U64(m->tcache_count));
    SET(h, "tcache_max_bytes", U64(m->tcache_max_bytes));
    SET(h, "walk_ns", U64(m->walk_ns));
    SET(h, "residency_ns", U64(m->residency_ns));
    SET(h, "lock_wait_ns", U64(m->lock_wait_ns));
    SET(h, "symbol_source_code", UINT2NUM(m->symbol_source));
    SET(h, "residency_source_code", UINT2NUM(m->residency_source));
    SET(h, "glibc_major", UINT2NUM(m->glibc_major));
    SET(h, "glibc_minor", UINT2NUM(m->glibc_minor));
    SET(h, "flags", UINT2NUM(m->flags));
    SET(h, "thread_count", UINT2NUM(m->thread_count));
    {
        VALUE strings = rb_hash_new();
        while (off < v->strings_len) {
            uint16_t kl;
            uint32_t vl;
            VALUE k;
            memcpy(&kl, v->strings + off, 2);
            k = rb_str_new((const char *)v->strings + off + 2, kl);
            off += 2 + kl;
            memcpy(&vl, v->strings + off, 4);
            rb_hash_aset(strings, k, rb_utf8_str_new((const char *)v->strings + off + 4, vl));
            off += 4 + vl;
        }
        SET(h, "strings", strings);
    }
    return h;
}

static VALUE dump_mallinfo2(VALUE self)
{
    const ptmd_mallinfo2_rec *m = get_dump(self)->view.mallinfo2;
    VALUE h = rb_hash_new();
    SET(h, "arena", U64(m->arena));
    SET(h, "ordblks", U64(m->ordblks));
    SET(h, "smblks", U64(m->smblks));
    SET(h, "hblks", U64(m->hblks));
    SET(h, "hblkhd", U64(m->hblkhd));
    SET(h, "usmblks", U64(m->usmblks));
    SET(h, "fsmblks", U64(m->fsmblks));
    SET(h, "uordblks", U64(m->uordblks));
    SET(h, "fordblks", U64(m->fordblks));
    SET(h, "keepcost", U64(m->keepcost));
    return h;
}

static VALUE dump_malloc_info(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    return rb_utf8_str_new(v->malloc_info ? v->malloc_info : "", (long)v->malloc_info_len);
}

static VALUE dump_arena_records(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    VALUE ary = rb_ary_new_capa((long)v->n_arenas);
    size_t i;
    for (i = 0; i < v->n_arenas; i++) {
        const ptmd_arena_rec *a = &v->arenas[i];
        VALUE h = rb_hash_new();
        SET(h, "index", U64(i));
        SET(h, "address", U64(a->address));
        SET(h, "main", (a->flags & PTMD_AF_MAIN) ? Qtrue : Qfalse);
        SET(h, "noncontiguous", (a->flags & PTMD_AF_NONCONTIGUOUS) ? Qtrue : Qfalse);
        SET(h, "corrupt", (a->flags & PTMD_AF_CORRUPT) ? Qtrue : Qfalse);
        SET(h, "top", U64(a->top));
        SET(h, "top_size", U64(a->top_size));
        SET(h, "last_remainder", U64(a->last_remainder));
        SET(h, "system_mem", U64(a->system_mem));
        SET(h, "max_system_mem", U64(a->max_system_mem));
        SET(h, "next", U64(a->next));
        SET(h, "next_free", U64(a->next_free));
        SET(h, "attached_threads", U64(a->attached_threads));
        SET(h, "first_heap", UINT2NUM(a->first_heap));
        SET(h, "heap_count", UINT2NUM(a->n_heaps));
        rb_ary_push(ary, h);
    }
    return ary;
}

static VALUE dump_heap_records(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    static const char *const kinds[] = { "unknown", "sbrk", "mmap_heap", "mmapped_chunk" };
    VALUE ary = rb_ary_new_capa((long)v->n_heaps);
    size_t i;
    for (i = 0; i < v->n_heaps; i++) {
        const ptmd_heap_rec *hp = &v->heaps[i];
        VALUE h = rb_hash_new();
        SET(h, "index", U64(i));
        SET(h, "kind", ID2SYM(rb_intern(kinds[hp->kind <= 3 ? hp->kind : 0])));
        SET(h, "arena", hp->arena == PTMD_NO_ARENA ? Qnil : UINT2NUM(hp->arena));
        SET(h, "start", U64(hp->start));
        SET(h, "end", U64(hp->end));
        SET(h, "reserved_end", U64(hp->reserved_end));
        SET(h, "prev", U64(hp->prev));
        SET(h, "mprotect_size", U64(hp->mprotect_size));
        SET(h, "first_chunk", U64(hp->first_chunk));
        SET(h, "chunk_count", U64(hp->n_chunks));
        SET(h, "first_page", U64(hp->first_page));
        SET(h, "page_count", U64(hp->n_pages));
        SET(h, "page_base", U64(hp->page_base));
        SET(h, "truncated", (hp->flags & PTMD_HF_TRUNCATED) ? Qtrue : Qfalse);
        rb_ary_push(ary, h);
    }
    return ary;
}

static VALUE dump_thread_records(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    VALUE ary = rb_ary_new_capa((long)v->n_threads);
    size_t i;
    for (i = 0; i < v->n_threads; i++) {
        const ptmd_thread_rec *t = &v->threads[i];
        VALUE h = rb_hash_new();
        SET(h, "tid", t->tid ? UINT2NUM(t->tid) : Qnil);
        SET(h, "pthread", t->pthread ? U64(t->pthread) : Qnil);
        SET(h, "tcache", t->tcache ? U64(t->tcache) : Qnil);
        SET(h, "arena", t->arena ? U64(t->arena) : Qnil);
        SET(h, "tcache_count", UINT2NUM(t->tcache_count));
        SET(h, "tcache_bytes", U64(t->tcache_bytes));
        SET(h, "current", (t->flags & PTMD_TF_CURRENT) ? Qtrue : Qfalse);
        SET(h, "exiting", (t->flags & PTMD_TF_EXITING) ? Qtrue : Qfalse);
        SET(h, "found_by", (t->flags & PTMD_TF_TLS) ? ID2SYM(rb_intern("tls"))
                           : (t->flags & PTMD_TF_SCAN) ? ID2SYM(rb_intern("scan")) : Qnil);
        rb_ary_push(ary, h);
    }
    return ary;
}

static VALUE dump_anomaly_records(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    VALUE ary = rb_ary_new_capa((long)v->n_anomalies);
    size_t i;
    for (i = 0; i < v->n_anomalies; i++) {
        const ptmd_anomaly_rec *a = &v->anomalies[i];
        VALUE h = rb_hash_new();
        SET(h, "kind", ID2SYM(rb_intern(a->kind < PTMD_AN_COUNT ? ptmd_anomaly_names[a->kind] : "unknown")));
        SET(h, "address", U64(a->address));
        SET(h, "detail", U64(a->detail));
        SET(h, "arena", a->arena == PTMD_NO_ARENA ? Qnil : UINT2NUM(a->arena));
        rb_ary_push(ary, h);
    }
    return ary;
}

static VALUE state_sym(int st)
{
    static VALUE syms[PTMD_ST_COUNT];
    if (!syms[0]) {
        int i;
        for (i = 0; i < PTMD_ST_COUNT; i++) syms[i] = ID2SYM(rb_intern(ptmd_state_names[i]));
    }
    return syms[st];
}

/* Dump#_chunk(index, chunk_class, heaps, arenas) -> Chunk */
static VALUE make_chunk(const ptmd_view *v, size_t i, VALUE klass, VALUE heap, VALUE arenas)
{
    const ptmd_chunk_rec *c = &v->chunks[i];
    VALUE arena = Qnil;
    VALUE argv[6];
    if (!NIL_P(heap)) {
        long hi = ptmd_view_heap_of_chunk(v, i);
        if (hi >= 0 && v->heaps[hi].arena != PTMD_NO_ARENA) arena = rb_ary_entry(arenas, v->heaps[hi].arena);
    }
    argv[0] = U64(c->addr);
    argv[1] = U64(ptmd_rec_size(c));
    argv[2] = state_sym(ptmd_rec_state(c));
    argv[3] = arena;
    argv[4] = heap;
    argv[5] = INT2FIX((int)(c->word >> PTMD_CF_SHIFT));
    return rb_class_new_instance(6, argv, klass);
}

/* Dump#_each_chunk(chunk_class, heaps, arenas) { |chunk| } */
static VALUE dump_each_chunk(VALUE self, VALUE klass, VALUE heaps, VALUE arenas)
{
    const ptmd_view *v = &get_dump(self)->view;
    size_t h;
    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        VALUE heap = rb_ary_entry(heaps, (long)h);
        VALUE arena = hp->arena == PTMD_NO_ARENA ? Qnil : rb_ary_entry(arenas, hp->arena);
        uint64_t i;
        for (i = hp->first_chunk; i < hp->first_chunk + hp->n_chunks; i++) {
            const ptmd_chunk_rec *c = &v->chunks[i];
            VALUE argv[6];
            argv[0] = U64(c->addr);
            argv[1] = U64(ptmd_rec_size(c));
            argv[2] = state_sym(ptmd_rec_state(c));
            argv[3] = arena;
            argv[4] = heap;
            argv[5] = INT2FIX((int)(c->word >> PTMD_CF_SHIFT));
            rb_yield(rb_class_new_instance(6, argv, klass));
        }
    }
    return self;
}

/* Dump#_find_chunk(address, containing, chunk_class, heaps, arenas) -> Chunk or nil */
static VALUE dump_find_chunk(VALUE self, VALUE addr, VALUE containing, VALUE klass, VALUE heaps, VALUE arenas)
{
    const ptmd_view *v = &get_dump(self)->view;
    long i = ptmd_view_find_chunk(v, NUM2ULL(addr), RTEST(containing));
    long hi;
    if (i < 0) return Qnil;
    hi = ptmd_view_heap_of_chunk(v, (uint64_t)i);
    return make_chunk(v, (size_t)i, klass, hi >= 0 ? rb_ary_entry(heaps, hi) : Qnil, arenas);
}

static VALUE dump_chunk_count(VALUE self)
{
    return U64(get_dump(self)->view.n_chunks);
}

/* Dump#_pages(heap_index) -> binary String of PTMD_PAGE_* flags */
static VALUE dump_pages(VALUE self, VALUE index)
{
    const ptmd_view *v = &get_dump(self)->view;
    long i = NUM2LONG(index);
    if (i < 0 || (size_t)i >= v->n_heaps) rb_raise(rb_eIndexError, "no heap %ld", i);
    return rb_str_new((const char *)v->pages + v->heaps[i].first_page, (long)v->heaps[i].n_pages);
}

static VALUE dump_summary(VALUE self)
{
    return ptmd_rb_summary(&get_dump(self)->view);
}

/* Dump#_size_classes -> { size class => [chunks, bytes] } of in-use and mmapped chunks; a class is the
 * exact chunk size up to 1040 bytes (the tcache's range), then the next power of two */
static VALUE dump_size_classes(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    VALUE h = rb_hash_new();
    uint64_t exact[66][2], pow2[64][2];
    size_t i;
    memset(exact, 0, sizeof(exact));
    memset(pow2, 0, sizeof(pow2));
    for (i = 0; i < v->n_chunks; i++) {
        const ptmd_chunk_rec *c = &v->chunks[i];
        int st = ptmd_rec_state(c);
        uint64_t size = ptmd_rec_size(c);
        if (st != PTMD_ST_IN_USE && st != PTMD_ST_MMAPPED) continue;
        if (size <= 1040) {
            exact[size / 16][0]++;
            exact[size / 16][1] += size;
        } else {
            int k = 64 - __builtin_clzll(size - 1);
            pow2[k][0]++;
            pow2[k][1] += size;
        }
    }
    for (i = 0; i < 66; i++)
        if (exact[i][0]) rb_hash_aset(h, U64(i * 16), rb_ary_new_from_args(2, U64(exact[i][0]), U64(exact[i][1])));
    for (i = 0; i < 64; i++)
        if (pow2[i][0]) rb_hash_aset(h, U64(1ull << i), rb_ary_new_from_args(2, U64(pow2[i][0]), U64(pow2[i][1])));
    return h;
}

/* Dump#_first_difference(other) -> index of the first chunk that differs in address, size or state,
 * the shorter count when one is a prefix of the other, or nil when both have the same chunks */
static VALUE dump_first_difference(VALUE self, VALUE other)
{
    const ptmd_view *a = &get_dump(self)->view, *b = &get_dump(other)->view;
    size_t i, n = a->n_chunks < b->n_chunks ? a->n_chunks : b->n_chunks;
    for (i = 0; i < n; i++) {
        const ptmd_chunk_rec *x = &a->chunks[i], *y = &b->chunks[i];
        if (x->addr != y->addr || ptmd_rec_size(x) != ptmd_rec_size(y) || ptmd_rec_state(x) != ptmd_rec_state(y))
            return ULONG2NUM(i);
    }
    return a->n_chunks == b->n_chunks ? Qnil : ULONG2NUM(n);
}

/* Dump#_chunk_by_index(i) -> [address, size, state] */
static VALUE dump_chunk_by_index(VALUE self, VALUE index)
{
    const ptmd_view *v = &get_dump(self)->view;
    long i = NUM2LONG(index);
    if (i < 0 || (size_t)i >= v->n_chunks) return Qnil;
    return rb_ary_new_from_args(3, U64(v->chunks[i].addr), U64(ptmd_rec_size(&v->chunks[i])),
                                ID2SYM(rb_intern(ptmd_state_names[ptmd_rec_state(&v->chunks[i])])));
}

/* Dump#trim_released -> Array of bytes per arena that malloc_trim(0) released (trim_check), or nil */
static VALUE dump_trim_released(VALUE self)
{
    const ptmd_view *v = &get_dump(self)->view;
    VALUE ary;
    size_t i;
    if (!v->trim_released) return Qnil;
    ary = rb_ary_new_capa((long)v->n_trim_released);
    for (i = 0; i < v->n_trim_released; i++) rb_ary_push(ary, U64(v->trim_released[i]));
    return ary;
}

static VALUE dump_file_size(VALUE self)
{
    return U64(get_dump(self)->len);
}

void ptmd_rb_reader_init(void)
{
    cDump = rb_define_class_under(ptmd_mPtmallocDump, "Dump", rb_cObject);
    rb_define_alloc_func(cDump, dump_alloc);
    rb_define_private_method(cDump, "_load", dump_load, 1);
    rb_define_private_method(cDump, "_meta", dump_meta, 0);
    rb_define_private_method(cDump, "_mallinfo2", dump_mallinfo2, 0);
    rb_define_private_method(cDump, "_arena_records", dump_arena_records, 0);
    rb_define_private_method(cDump, "_heap_records", dump_heap_records, 0);
    rb_define_private_method(cDump, "_thread_records", dump_thread_records, 0);
    rb_define_private_method(cDump, "_anomaly_records", dump_anomaly_records, 0);
    rb_define_private_method(cDump, "_each_chunk", dump_each_chunk, 3);
    rb_define_private_method(cDump, "_find_chunk", dump_find_chunk, 5);
    rb_define_private_method(cDump, "_pages", dump_pages, 1);
    rb_define_private_method(cDump, "_summary", dump_summary, 0);
    rb_define_method(cDump, "malloc_info", dump_malloc_info, 0);
    rb_define_method(cDump, "chunk_count", dump_chunk_count, 0);
    rb_define_method(cDump, "file_size", dump_file_size, 0);
    rb_define_method(cDump, "trim_released", dump_trim_released, 0);
    rb_define_private_method(cDump, "_size_classes", dump_size_classes, 0);
    rb_define_private_method(cDump, "_first_difference", dump_first_difference, 1);
    rb_define_private_method(cDump, "_chunk_by_index", dump_chunk_by_index, 1);
}
