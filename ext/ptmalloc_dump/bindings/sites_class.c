/* Allocation sites: a loaded Dump's traced stacks with what their live objects own (analysis/sites.c;
 * the tracing switch is bindings/tracing_module.c). */
#include "bindings/bindings.h"
#include "analysis/sites.h"

#include <string.h>

/* Dump#_alloc_trace -> nil without sites, else the ALLOC_TRACE record */
static VALUE dump_alloc_trace(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_alloc_trace_rec *t = v->alloc_trace;
    VALUE h;
    if (!t) return Qnil;
    h = rb_hash_new();
    PTMD_SET(h, "every", PTMD_U64(t->every));
    PTMD_SET(h, "seen", PTMD_U64(t->seen));
    PTMD_SET(h, "sampled", PTMD_U64(t->sampled));
    PTMD_SET(h, "dropped", PTMD_U64(t->dropped));
    PTMD_SET(h, "traced", PTMD_U64(v->n_ruby_traced));
    PTMD_SET(h, "stacks", PTMD_U64(v->n_ruby_stacks));
    PTMD_SET(h, "max_frames", UINT2NUM(t->max_frames));
    PTMD_SET(h, "started_at",
             rb_time_nano_new((time_t)(t->started_ns / 1000000000ull), (long)(t->started_ns % 1000000000ull)));
    return h;
}

uint8_t *ptmd_rb_class_flags(const ptmd_view *v, VALUE name)
{
    uint8_t *flags;
    size_t off = 0, i = 0;
    ptmd_view_name n;
    if (NIL_P(name)) return NULL;
    StringValue(name);
    flags = ZALLOC_N(uint8_t, v->n_ruby_names ? v->n_ruby_names : 1);
    while (i < v->n_ruby_names && ptmd_view_next_name(v->ruby_names, v->ruby_names_len, &off, &n)) {
        flags[i++] = n.kind == PTMD_NAME_CLASS && (long)n.len == RSTRING_LEN(name) &&
                     memcmp(n.name, RSTRING_PTR(name), n.len) == 0;
    }
    return flags;
}

/* Dump#_traced_stacks(class_name) -> [[stack, objects, bytes, chunks, slot_bytes, garbage, garbage_bytes], ...]
 * for each stack with a traced object the Ruby pass recorded (of that class, unless nil) */
static VALUE dump_traced_stacks(VALUE self, VALUE class_name)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    ptmd_stack_totals *t;
    uint8_t *classes;
    VALUE ary = rb_ary_new();
    size_t i;
    int rc;
    if (!v->alloc_trace || !v->n_ruby_stacks) return ary;
    classes = ptmd_rb_class_flags(v, class_name);
    t = ALLOC_N(ptmd_stack_totals, v->n_ruby_stacks);
    rc = ptmd_site_totals(v, ptmd_rb_dump_attribution(self), classes, t);
    xfree(classes);
    if (rc != 0) {
        xfree(t);
        rb_raise(rb_eNoMemError, "out of memory joining the traced objects to their chunks");
    }
    for (i = 0; i < v->n_ruby_stacks; i++)
        if (t[i].objects || t[i].garbage)
            rb_ary_push(ary, rb_ary_new_from_args(7, SIZET2NUM(i), PTMD_U64(t[i].objects), PTMD_U64(t[i].bytes),
                                                  PTMD_U64(t[i].chunks), PTMD_U64(t[i].slot_bytes),
                                                  PTMD_U64(t[i].garbage), PTMD_U64(t[i].garbage_bytes)));
    xfree(t);
    return ary;
}

/* Dump#_traced -> [[address, stack], ...] by address: every traced object not freed at the dump */
static VALUE dump_traced(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE ary = rb_ary_new_capa((long)v->n_ruby_traced);
    size_t i;
    for (i = 0; i < v->n_ruby_traced; i++)
        rb_ary_push(ary,
                    rb_ary_new_from_args(2, PTMD_U64(v->ruby_traced[i].address), UINT2NUM(v->ruby_traced[i].stack)));
    return ary;
}

/* Dump#_traced_stack_of(address) -> the stack of the traced object at address, nil when none is */
static VALUE dump_traced_stack_of(VALUE self, VALUE address)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    size_t i = ptmd_view_find_address(v->ruby_traced, v->n_ruby_traced, sizeof(ptmd_ruby_traced), NUM2ULL(address));
    return i == v->n_ruby_traced ? Qnil : UINT2NUM(v->ruby_traced[i].stack);
}

/* Dump#_site_names -> [name, ...] by index */
static VALUE dump_site_names(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    return ptmd_rb_names(v->ruby_site_names, v->ruby_site_names_len, v->n_ruby_site_names);
}

/* Dump#_stack_frames(stack) -> [[path, line, label, owner], ...] innermost first, name indices or nil */
static VALUE dump_stack_frames(VALUE self, VALUE stack)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    size_t i = NUM2SIZET(stack), k;
    VALUE ary = rb_ary_new();
    if (i >= v->n_ruby_stacks) rb_raise(rb_eIndexError, "no traced stack %zu", i);
    for (k = 0; k < v->ruby_stacks[i].n_frames; k++) {
        const ptmd_ruby_frame *f = &v->ruby_frames[v->ruby_stacks[i].first + k];
#define NAME(x) ((x) == PTMD_NO_NAME ? Qnil : UINT2NUM(x))
        rb_ary_push(ary, rb_ary_new_from_args(4, NAME(f->path), INT2NUM(f->line), NAME(f->label), NAME(f->owner)));
#undef NAME
    }
    return ary;
}

void ptmd_sites_class_init(void)
{
    VALUE cDump = rb_const_get(ptmd_mPtmallocDump, rb_intern("Dump"));
    rb_define_private_method(cDump, "_alloc_trace", dump_alloc_trace, 0);
    rb_define_private_method(cDump, "_traced_stacks", dump_traced_stacks, 1);
    rb_define_private_method(cDump, "_site_names", dump_site_names, 0);
    rb_define_private_method(cDump, "_traced", dump_traced, 0);
    rb_define_private_method(cDump, "_traced_stack_of", dump_traced_stack_of, 1);
    rb_define_private_method(cDump, "_stack_frames", dump_stack_frames, 1);
}
