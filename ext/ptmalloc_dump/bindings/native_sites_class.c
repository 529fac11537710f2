/* The allocation tracker's samples in a loaded Dump (ptmalloc-dump --track): the tracker's record,
 * each stack's estimated live blocks by who keeps them (analysis/sites.c), its frames and names. */
#include "bindings/bindings.h"
#include "analysis/sites.h"

/* Dump#_native_track -> nil without the tracker's sections, else its NATIVE_TRACK record */
static VALUE dump_native_track(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_native_track_rec *t = v->native_track;
    VALUE h, regions;
    uint32_t i;
    if (!t) return Qnil;
    h = rb_hash_new();
    regions = rb_ary_new();
    for (i = 0; i < t->n_regions; i++)
        rb_ary_push(regions, rb_ary_new_from_args(3, PTMD_U64(t->regions[i].start), PTMD_U64(t->regions[i].length),
                                                  PTMD_U64(t->regions[i].resident)));
    PTMD_SET(h, "mean_bytes", PTMD_U64(t->mean_bytes));
    PTMD_SET(h, "sampled", PTMD_U64(t->sampled));
    PTMD_SET(h, "freed", PTMD_U64(t->freed));
    PTMD_SET(h, "dropped", PTMD_U64(t->dropped));
    PTMD_SET(h, "flags", UINT2NUM(t->flags));
    PTMD_SET(h, "pid", UINT2NUM(t->pid));
    PTMD_SET(h, "samples", PTMD_U64(v->n_native_samples));
    PTMD_SET(h, "stacks", PTMD_U64(v->n_native_stacks));
    PTMD_SET(h, "regions", regions);
    PTMD_SET(h, "started_at",
             rb_time_nano_new((time_t)(t->started_ns / 1000000000ull), (long)(t->started_ns % 1000000000ull)));
    return h;
}

/* Dump#_native_stacks(class_name) -> [[stack, samples, count, bytes, ruby_bytes, anchored_bytes,
 * leaked_bytes], ...] for each stack with a sampled block still allocated (that an object of that class
 * owns, unless nil); count and bytes are estimates (Float) */
static VALUE dump_native_stacks(VALUE self, VALUE class_name)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    VALUE ary = rb_ary_new();
    size_t i;
    if (!v->native_track || !v->n_native_stacks) return ary;
    /* what may raise comes first; the totals live in a String the GC frees, whatever raises after */
    const ptmd_attribution *attr = v->ruby_objects || !NIL_P(class_name) ? ptmd_rb_dump_attribution(self) : NULL;
    const ptmd_owners *owners = ptmd_rb_dump_owners(self);
    VALUE buf = rb_str_buf_new((long)(v->n_native_stacks * sizeof(ptmd_native_totals)));
    ptmd_native_totals *t = (ptmd_native_totals *)(void *)RSTRING_PTR(buf);
    uint8_t *classes = ptmd_rb_class_flags(v, class_name);
    ptmd_native_site_totals(v, classes || v->ruby_objects ? attr : NULL, owners, classes, t);
    xfree(classes);
    for (i = 0; i < v->n_native_stacks; i++) {
        VALUE row[7];
        if (!t[i].samples) continue;
        row[0] = SIZET2NUM(i);
        row[1] = PTMD_U64(t[i].samples);
        row[2] = DBL2NUM(t[i].count);
        row[3] = DBL2NUM(t[i].bytes);
        row[4] = DBL2NUM(t[i].kind_bytes[PTMD_OK_RUBY]);
        row[5] = DBL2NUM(t[i].kind_bytes[PTMD_OK_ANCHORED]);
        row[6] = DBL2NUM(t[i].kind_bytes[PTMD_OK_LEAKED]);
        rb_ary_push(ary, rb_ary_new_from_values(7, row));
    }
    RB_GC_GUARD(buf);
    return ary;
}

/* Dump#_native_stack(stack) -> [[pc, ...], [[path, line, label, owner], ...]] innermost first, name
 * indices or nil */
static VALUE dump_native_stack(VALUE self, VALUE stack)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    size_t i = NUM2SIZET(stack), k;
    VALUE pcs = rb_ary_new(), frames = rb_ary_new();
    if (i >= v->n_native_stacks) rb_raise(rb_eIndexError, "no tracked stack %zu", i);
    const ptmd_native_stack *s = &v->native_stacks[i];
    for (k = 0; k < s->n_pcs; k++) rb_ary_push(pcs, PTMD_U64(v->native_pcs[s->first_pc + k]));
    for (k = 0; k < s->n_frames; k++) {
        const ptmd_ruby_frame *f = &v->native_frames[s->first_frame + k];
#define NAME(x) ((x) == PTMD_NO_NAME ? Qnil : UINT2NUM(x))
        rb_ary_push(frames, rb_ary_new_from_args(4, NAME(f->path), INT2NUM(f->line), NAME(f->label), NAME(f->owner)));
#undef NAME
    }
    return rb_ary_new_from_args(2, pcs, frames);
}

/* Dump#_native_names -> [name, ...] by index */
static VALUE dump_native_names(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    return ptmd_rb_names(v->native_names, v->native_names_len, v->n_native_names);
}

/* Dump#_native_sample_at(address) -> [stack, size] of the sampled block malloc returned at address, or nil */
static VALUE dump_native_sample_at(VALUE self, VALUE address)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    size_t i =
        ptmd_view_find_address(v->native_samples, v->n_native_samples, sizeof(ptmd_native_sample), NUM2ULL(address));
    if (i == v->n_native_samples) return Qnil;
    return rb_ary_new_from_args(2, UINT2NUM(v->native_samples[i].stack), PTMD_U64(v->native_samples[i].size));
}

void ptmd_native_sites_class_init(void)
{
    VALUE cDump = rb_const_get(ptmd_mPtmallocDump, rb_intern("Dump"));
    rb_define_private_method(cDump, "_native_track", dump_native_track, 0);
    rb_define_private_method(cDump, "_native_stacks", dump_native_stacks, 1);
    rb_define_private_method(cDump, "_native_stack", dump_native_stack, 1);
    rb_define_private_method(cDump, "_native_names", dump_native_names, 0);
    rb_define_private_method(cDump, "_native_sample_at", dump_native_sample_at, 1);
}
