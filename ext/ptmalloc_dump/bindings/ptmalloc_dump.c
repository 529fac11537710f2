/* PtmallocDump: the module's own native methods, and Init_ptmalloc_dump, which calls the init of each
 * binding this library holds: what a worker that dumps needs. The classes that read dumps are another
 * library, bindings/reader_init.c's. A dump runs with the GVL held (the walk must not race Ruby
 * threads' mallocs). */
#include "bindings/bindings.h"
#include "capture/dump.h"
#include "capture/dump_fork.h"
#include "capture/dump_outside.h"
#include "capture/dump_write.h"
#include "capture/locate.h"
#include "capture/native_track.h"
#include "capture/ruby_code.h"
#include "capture/ruby_heap.h"
#include "capture/source_ptrace.h"
#include "format/format.h"

#include <dlfcn.h>
#include <ruby/thread.h>
#include <string.h>
#include <sys/mman.h>

typedef struct {
    ptmd_dump_state d;
    ptmd_dump_opts opts;
    const char *strings[64];
    int ruby;
    int full_gc; /* gc: true: a full GC before the Ruby pass */
    ptmd_err err;
    int rc;
} dump_call;

/* gc: true collects first, as GC.start does (a full mark and an immediate sweep, also while GC is
 * disabled, which rb_gc() would respect): garbage is gone from the pass. This may allocate: it runs
 * before glibc's counters are taken. */
static void full_gc(dump_call *c)
{
    if (!c->full_gc) return;
    rb_funcall(rb_mGC, rb_intern("start"), 0);
    ptmd_ruby_pass_after_full_gc(&c->d.ruby);
}

static void ruby_pass(dump_call *c)
{
    full_gc(c);
    c->d.ruby.page_size = ptmd_ruby_heap_page_size(); /* for the mmapped-chunk scan */
    if (c->ruby) ptmd_ruby_pass(&c->d.ruby);
}

static VALUE dump_body(VALUE arg)
{
    dump_call *c = (dump_call *)arg;
    ptmd_view v;
    VALUE summary;
    ruby_pass(c);
    c->rc = ptmd_dump_run(&c->d, &c->opts, &c->err);
    if (c->rc != 0) return Qnil;
    ptmd_dump_view(&c->d, &v);
    summary = ptmd_rb_summary(&v);
    PTMD_SET(summary, "walk_ns", PTMD_U64(c->d.meta.walk_ns));
    PTMD_SET(summary, "lock_wait_ns", PTMD_U64(c->d.meta.lock_wait_ns));
    return summary;
}

/* The shared arguments of _dump and _dump_fork, converted before anything is allocated (everything
 * here may raise): the debug dir and the key/value strings. Returns the C debug dir or NULL. */
static dump_call *new_call(VALUE debug_dir, VALUE strings, const char **cdir)
{
    const char *strs[64];
    dump_call *c;
    long i, n;
    if (!NIL_P(debug_dir)) FilePathValue(debug_dir);
    Check_Type(strings, T_ARRAY);
    n = RARRAY_LEN(strings);
    if (n > 62 || (n & 1)) rb_raise(rb_eArgError, "strings must be at most 31 key/value pairs");
    for (i = 0; i < n; i++) {
        VALUE s = RARRAY_AREF(strings, i);
        strs[i] = StringValueCStr(s);
    }
    strs[n] = NULL;
    *cdir = NIL_P(debug_dir) ? NULL : StringValueCStr(debug_dir);
    /* mmap, not xmalloc: a dump must not take a chunk the program just freed */
    c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED) rb_sys_fail("mmap");
    ptmd_dump_init(&c->d);
    memcpy(c->strings, strs, sizeof(strs));
    return c;
}

/* Frees a call made by new_call, then re-raises what the protected body raised (state), or the
 * dump's own error. */
static void end_call(dump_call *c, int state)
{
    ptmd_err err = c->err;
    int rc = c->rc;
    ptmd_dump_release(&c->d);
    munmap(c, sizeof(*c));
    if (state) rb_jump_tag(state);
    if (rc != 0) ptmd_rb_raise(&err);
}

/* While set (only by _warm_up, when the gem loads), _dump returns an empty Hash at once. */
static int warming;

/* _warm_up(flag): the gem's first calls of dump, made when it loads so that Ruby fills its method
 * and constant caches (which mallocs) then, not in a real dump before glibc's counters are taken. */
static VALUE rb_ptmd_warm_up(VALUE self, VALUE flag)
{
    PTMD_UNUSED(self);
    warming = RTEST(flag);
    return Qnil;
}

/* _dump(path, debug_dir, strings, ruby, references, oracles, symbols, trim_check, gc, graph) -> summary
 * Hash. strings: flat Array of key, value Strings; ruby: record Ruby's heap (graph: and its object
 * graph); references: scan chunks for
 * pointers to chunks; oracles: PTMD_ORACLES_* (0 never, 1 auto, 2 always) for malloc_info() and mallinfo2() after the walk; symbols: a
 * PTMD_SYMBOLS_* mode; trim_check: measure what malloc_trim(0) releases; gc: run a full GC first. */
static VALUE rb_ptmd_dump(VALUE self, VALUE path, VALUE debug_dir, VALUE strings, VALUE ruby, VALUE references,
                          VALUE oracles, VALUE symbols, VALUE trim, VALUE gc, VALUE graph)
{
    dump_call *c;
    VALUE result;
    const char *cpath, *cdir;
    int state = 0;
    PTMD_UNUSED(self);
    if (warming) return rb_hash_new();
    FilePathValue(path);
    cpath = StringValueCStr(path);
    c = new_call(debug_dir, strings, &cdir);
    c->opts.path = cpath;
    c->opts.debug_dir = cdir;
    c->opts.strings = c->strings;
    c->opts.references = RTEST(references);
    c->opts.oracles = NUM2INT(oracles);
    c->opts.symbols = NUM2INT(symbols);
    c->opts.trim_check = RTEST(trim);
    c->ruby = RTEST(ruby);
    c->d.ruby.graph_wanted = RTEST(graph);
    c->full_gc = RTEST(gc);
    result = rb_protect(dump_body, (VALUE)c, &state);
    end_call(c, state);
    RB_GC_GUARD(path);
    RB_GC_GUARD(debug_dir);
    RB_GC_GUARD(strings);
    return result;
}

typedef struct {
    dump_call *c;
    int pid;
    const char *core; /* a core file instead of a live process */
} process_call;

/* Another process's dump touches no Ruby object and this process's heap only through mmap: other
 * Ruby threads run meanwhile. */
static void *process_without_gvl(void *arg)
{
    process_call *pc = arg;
    pc->c->rc = pc->core ? ptmd_dump_core(&pc->c->d, &pc->c->opts, pc->core, &pc->c->err)
                         : ptmd_dump_process(&pc->c->d, &pc->c->opts, pc->pid, &pc->c->err);
    return NULL;
}

static VALUE process_body(VALUE arg)
{
    process_call *pc = (process_call *)arg;
    dump_call *c = pc->c;
    ptmd_view v;
    VALUE summary;
    rb_thread_call_without_gvl(process_without_gvl, pc, NULL, NULL);
    if (c->rc != 0) return Qnil;
    ptmd_dump_view(&c->d, &v);
    summary = ptmd_rb_summary(&v);
    PTMD_SET(summary, "walk_ns", PTMD_U64(c->d.meta.walk_ns));
    PTMD_SET(summary, "pause_ns", PTMD_U64(c->d.source.pause_ns));
    PTMD_SET(summary, "copied_bytes", PTMD_U64(c->d.source.copied_bytes));
    return summary;
}

/* Another process (pid) or the process a core file was written from (core): the dump into path. */
static VALUE dump_outside(int pid, const char *core, VALUE path, VALUE debug_dir, VALUE strings, VALUE symbols)
{
    process_call pc;
    VALUE result;
    const char *cdir;
    int state = 0;
    FilePathValue(path);
    pc.pid = pid;
    pc.core = core;
    pc.c = new_call(debug_dir, strings, &cdir);
    pc.c->opts.path = StringValueCStr(path);
    pc.c->opts.debug_dir = cdir;
    pc.c->opts.strings = pc.c->strings;
    pc.c->opts.symbols = NUM2INT(symbols);
    result = rb_protect(process_body, (VALUE)&pc, &state);
    end_call(pc.c, state);
    RB_GC_GUARD(path);
    RB_GC_GUARD(debug_dir);
    RB_GC_GUARD(strings);
    return result;
}

/* _dump_process(pid, path, debug_dir, strings, symbols) -> summary Hash: another process, stopped only
 * while its memory is copied. */
static VALUE rb_ptmd_dump_process(VALUE self, VALUE pid, VALUE path, VALUE debug_dir, VALUE strings, VALUE symbols)
{
    PTMD_UNUSED(self);
    return dump_outside(NUM2INT(pid), NULL, path, debug_dir, strings, symbols);
}

/* _dump_core(core, path, debug_dir, strings, symbols) -> summary Hash: the process a core file was
 * written from. */
static VALUE rb_ptmd_dump_core(VALUE self, VALUE core, VALUE path, VALUE debug_dir, VALUE strings, VALUE symbols)
{
    VALUE result;
    PTMD_UNUSED(self);
    FilePathValue(core);
    result = dump_outside(0, StringValueCStr(core), path, debug_dir, strings, symbols);
    RB_GC_GUARD(core);
    return result;
}

typedef struct {
    dump_call *c;
    ptmd_dump_opts opts[8];
    size_t n;
    int pid, errfd;
} fork_call;

/* The parent's part of a snapshot: gc: true's GC, and the Ruby pass only where the child cannot take
 * it (this Ruby's pages are not known by their structure), each timed for the SNAPSHOT record. */
static VALUE fork_body(VALUE arg)
{
    fork_call *f = (fork_call *)arg;
    dump_call *c = f->c;
    ptmd_snapshot_rec *s = &c->d.snap;
    uint64_t t = ptmd_now_ns();
    int in_child;
    full_gc(c);
    if (c->full_gc) s->gc_ns = ptmd_now_ns() - t;
    c->d.ruby.page_size = ptmd_ruby_heap_page_size();
    in_child = c->ruby && ptmd_ruby_pass_by_structure_possible();
    if (c->ruby && !in_child) {
        t = ptmd_now_ns();
        ptmd_ruby_pass(&c->d.ruby);
        s->ruby_pass_ns = ptmd_now_ns() - t;
        s->flags |= PTMD_SNF_RUBY_IN_PARENT;
    }
    c->rc = ptmd_dump_fork(&c->d, f->opts, f->n, in_child, &f->pid, &f->errfd, &c->err);
    return Qnil;
}

/* _dump_fork(targets, debug_dir, strings, ruby, references, oracles, report, gc, graph) -> [pid, error pipe
 * fd].
 * targets: Array of [path, symbols mode] (up to 8), dumped by one child from the same frozen heap. The
 * Ruby pass (after a full GC with gc) runs here, in the parent. report: the child also says on stderr
 * why it failed. */
static VALUE rb_ptmd_dump_fork(VALUE self, VALUE targets, VALUE debug_dir, VALUE strings, VALUE ruby, VALUE references,
                               VALUE oracles, VALUE report, VALUE gc, VALUE graph)
{
    uint64_t start;
    dump_call *c;
    fork_call f;
    const char *cpaths[8], *cdir;
    int modes[8];
    int state = 0;
    long i, nt;
    PTMD_UNUSED(self);
    start = ptmd_now_ns();
    Check_Type(targets, T_ARRAY);
    nt = RARRAY_LEN(targets);
    if (nt < 1 || nt > 8) rb_raise(rb_eArgError, "one to eight dump targets");
    for (i = 0; i < nt; i++) {
        VALUE t = RARRAY_AREF(targets, i), p;
        Check_Type(t, T_ARRAY);
        if (RARRAY_LEN(t) != 2) rb_raise(rb_eArgError, "a target is [path, symbols mode]");
        p = RARRAY_AREF(t, 0);
        FilePathValue(p);
        cpaths[i] = StringValueCStr(p);
        modes[i] = NUM2INT(RARRAY_AREF(t, 1));
    }
    c = new_call(debug_dir, strings, &cdir);
    c->d.snap_start = start;
    c->ruby = RTEST(ruby);
    c->d.ruby.graph_wanted = RTEST(graph);
    c->full_gc = RTEST(gc);
    memset(&f, 0, sizeof(f));
    f.c = c;
    f.n = (size_t)nt;
    f.pid = f.errfd = -1;
    for (i = 0; i < nt; i++) {
        f.opts[i].path = cpaths[i];
        f.opts[i].debug_dir = cdir;
        f.opts[i].symbols = modes[i];
        f.opts[i].strings = c->strings;
        f.opts[i].references = RTEST(references);
        f.opts[i].oracles = NUM2INT(oracles);
        f.opts[i].report_stderr = RTEST(report);
    }
    rb_protect(fork_body, (VALUE)&f, &state);
    end_call(c, state); /* the parent's copy of the dump state; the child has its own */
    RB_GC_GUARD(targets);
    RB_GC_GUARD(debug_dir);
    RB_GC_GUARD(strings);
    return rb_ary_new_from_args(2, INT2NUM(f.pid), INT2NUM(f.errfd));
}

/* _raise_child_error(bytes): raises the error a snapshot child reported */
static VALUE rb_ptmd_raise_child_error(VALUE self, VALUE bytes)
{
    ptmd_err err;
    PTMD_UNUSED(self);
    StringValue(bytes);
    if ((size_t)RSTRING_LEN(bytes) != sizeof(err))
        rb_raise(rb_path2class("PtmallocDump::Error"), "the snapshot process failed without saying why");
    memcpy(&err, RSTRING_PTR(bytes), sizeof(err));
    err.msg[sizeof(err.msg) - 1] = '\0';
    err.path[sizeof(err.path) - 1] = '\0';
    ptmd_rb_raise(&err);
    return Qnil;
}

/* _libc_info(debug_dir, symbols) -> Hash: where libc and its symbols were found (raises like _dump). */
static VALUE rb_ptmd_libc_info(VALUE self, VALUE debug_dir, VALUE symbols)
{
    const ptmd_libc *lc;
    ptmd_err err;
    VALUE h = rb_hash_new();
    char hex[2 * sizeof(lc->build_id) + 1];
    PTMD_UNUSED(self);
    if (!NIL_P(debug_dir)) FilePathValue(debug_dir);
    if (ptmd_locate(NIL_P(debug_dir) ? NULL : StringValueCStr(debug_dir), NUM2INT(symbols), &lc, &err) != 0)
        ptmd_rb_raise(&err);
    ptmd_hex(lc->build_id, lc->build_id_len, hex);
    PTMD_SET(h, "glibc_version", rb_str_new_cstr(lc->glibc_version));
    PTMD_SET(h, "libc_path", rb_str_new_cstr(lc->libc_path));
    PTMD_SET(h, "build_id", rb_str_new_cstr(hex));
    PTMD_SET(h, "symbol_file", rb_str_new_cstr(lc->symbol_file));
    PTMD_SET(h, "main_arena", PTMD_U64(lc->main_arena));
    PTMD_SET(h, "mp", PTMD_U64(lc->mp));
    PTMD_SET(h, "supported_layout", PTMD_BOOL(lc->layout));
    PTMD_SET(h, "symbol_source", PTMD_SYM(PTMD_NAME_OF(ptmd_symbol_source_names, lc->symbol_source)));
    return h;
}

/* _ruby_functions_missing -> the internal Ruby functions the Ruby pass needs that this Ruby lacks */
static VALUE rb_ptmd_ruby_functions_missing(VALUE self)
{
    VALUE missing = rb_ary_new();
    const char *const *name;
    PTMD_UNUSED(self);
    for (name = ptmd_ruby_functions_missing(); *name; name++) rb_ary_push(missing, rb_str_new_cstr(*name));
    return missing;
}

/* _read_process(pid, address, length) -> [bytes or nil, thread ids stopped, pause in ns]: every
 * thread of pid stopped, the bytes read, the threads let go again (on every path) */
static VALUE rb_ptmd_read_process(VALUE self, VALUE pid, VALUE address, VALUE length)
{
    ptmd_source src;
    ptmd_err err;
    VALUE bytes, tids = rb_ary_new();
    long len = NUM2LONG(length);
    int i, ok;
    PTMD_UNUSED(self);
    if (len < 0 || len > (1L << 20)) rb_raise(rb_eArgError, "length out of range: %ld", len);
    bytes = rb_str_buf_new(len);
    memset(&err, 0, sizeof(err));
    if (ptmd_source_attach(&src, NUM2INT(pid), &err) != 0) ptmd_rb_raise(&err);
    ok = ptmd_source_read_live(&src, NUM2ULL(address), RSTRING_PTR(bytes), (size_t)len) == 0;
    for (i = 0; i < src.n_tids; i++) rb_ary_push(tids, INT2NUM(src.tids[i]));
    ptmd_source_release(&src);
    if (ok) rb_str_set_len(bytes, len);
    return rb_ary_new_from_args(3, ok ? bytes : Qnil, tids, ULL2NUM(src.pause_ns));
}

/* _process_maps(pid) -> [[start, end, "rwxp"], ...] as the capture parses /proc/PID/maps */
static VALUE rb_ptmd_process_maps(VALUE self, VALUE pid)
{
    ptmd_maps m;
    ptmd_err err;
    VALUE out = rb_ary_new();
    size_t i;
    PTMD_UNUSED(self);
    memset(&m, 0, sizeof(m));
    memset(&err, 0, sizeof(err));
    if (ptmd_maps_load_pid(&m, NUM2INT(pid), &err) != 0) {
        ptmd_maps_release(&m);
        ptmd_rb_raise(&err);
    }
    for (i = 0; i < m.count; i++) {
        const ptmd_map *e = PTMD_BUF_AT(&m.maps, ptmd_map, i);
        char prot[5] = { e->prot & PTMD_MAP_R ? 'r' : '-', e->prot & PTMD_MAP_W ? 'w' : '-',
                         e->prot & PTMD_MAP_X ? 'x' : '-', e->prot & PTMD_MAP_PRIVATE ? 'p' : 's', 0 };
        rb_ary_push(out, rb_ary_new_from_args(3, ULL2NUM(e->start), ULL2NUM(e->end), rb_str_new_cstr(prot)));
    }
    ptmd_maps_release(&m);
    return out;
}

VALUE ptmd_mPtmallocDump;

/* PtmallocDump._ruby_code_problem: why dumps here record no code owners, nil when they do. */
static VALUE rb_ptmd_ruby_code_problem(VALUE self)
{
    const char *p = ptmd_ruby_code_problem();
    PTMD_UNUSED(self);
    return p ? rb_str_new_cstr(p) : Qnil;
}

RUBY_FUNC_EXPORTED void Init_ptmalloc_dump(void)
{
    ptmd_mPtmallocDump = rb_define_module("PtmallocDump");
    /* the allocation tracker, when ptmalloc-dump --track preloaded it */
    ptmd_native_track_set_self((uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, PTMD_TRACK_SYMBOL));
    ptmd_errors_init();
    ptmd_stats_module_init();
    ptmd_tracing_module_init();
    ptmd_signal_arrival_init();
    ptmd_ruby_heap_init();
    ptmd_dump_setup();
    rb_define_singleton_method(ptmd_mPtmallocDump, "_dump", rb_ptmd_dump, 10);
    /* oracles: :auto calls glibc's counters when the bins and fastbins hold at most this many chunks */
    rb_define_const(ptmd_mPtmallocDump, "ORACLES_AUTO_MAX_ENTRIES", INT2NUM(PTMD_ORACLES_AUTO_MAX_ENTRIES));
    rb_define_singleton_method(ptmd_mPtmallocDump, "_dump_fork", rb_ptmd_dump_fork, 9);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_raise_child_error", rb_ptmd_raise_child_error, 1);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_warm_up", rb_ptmd_warm_up, 1);
    rb_define_private_method(rb_singleton_class(ptmd_mPtmallocDump), "_ruby_code_problem", rb_ptmd_ruby_code_problem,
                             0);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_libc_info", rb_ptmd_libc_info, 2);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_ruby_functions_missing", rb_ptmd_ruby_functions_missing, 0);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_read_process", rb_ptmd_read_process, 3);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_dump_process", rb_ptmd_dump_process, 5);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_dump_core", rb_ptmd_dump_core, 5);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_process_maps", rb_ptmd_process_maps, 1);
}
