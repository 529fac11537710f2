/* PtmallocDump's tracing switch: Ruby allocation sites recorded by capture/ruby_sites.c, which the
 * dumps taken meanwhile carry. */
#include "bindings/bindings.h"
#include "capture/ruby_sites.h"

/* _trace_allocations(every, seed, max_objects, max_stacks) -> nil; raises TracingError */
static VALUE trace_allocations(VALUE self, VALUE every, VALUE seed, VALUE max_objects, VALUE max_stacks)
{
    ptmd_sites_options o;
    char why[256];
    (void)self;
    o.every = NUM2ULL(every);
    o.seed = NUM2ULL(seed);
    o.max_objects = NUM2SIZET(max_objects);
    o.max_stacks = NUM2SIZET(max_stacks);
    if (ptmd_ruby_sites_start(&o, why, sizeof(why)) != 0)
        rb_raise(rb_path2class("PtmallocDump::TracingError"), "%s", why);
    return Qnil;
}

static VALUE stop_allocation_tracing(VALUE self)
{
    (void)self;
    ptmd_ruby_sites_stop();
    return Qnil;
}

/* _allocation_tracing -> nil when off, else { every:, seen:, sampled:, dropped:, tracked:, ... } */
static VALUE allocation_tracing(VALUE self)
{
    ptmd_sites_stats s;
    VALUE h;
    (void)self;
    ptmd_ruby_sites_stats(&s);
    if (!s.on) return Qnil;
    h = rb_hash_new();
    PTMD_SET(h, "every", PTMD_U64(s.every));
    PTMD_SET(h, "seen", PTMD_U64(s.seen));
    PTMD_SET(h, "sampled", PTMD_U64(s.sampled));
    PTMD_SET(h, "dropped", PTMD_U64(s.dropped));
    PTMD_SET(h, "tracked", PTMD_U64(s.tracked));
    PTMD_SET(h, "stacks", PTMD_U64(s.stacks));
    PTMD_SET(h, "frames", PTMD_U64(s.frames));
    PTMD_SET(h, "max_objects", PTMD_U64(s.max_objects));
    PTMD_SET(h, "max_stacks", PTMD_U64(s.max_stacks));
    PTMD_SET(h, "mapped_bytes", PTMD_U64(s.mapped_bytes));
    PTMD_SET(h, "started_at",
             rb_time_nano_new((time_t)(s.started_ns / 1000000000ull), (long)(s.started_ns % 1000000000ull)));
    return h;
}

void ptmd_tracing_module_init(void)
{
    ptmd_ruby_sites_init();
    rb_define_singleton_method(ptmd_mPtmallocDump, "_trace_allocations", trace_allocations, 4);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_stop_allocation_tracing", stop_allocation_tracing, 0);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_allocation_tracing", allocation_tracing, 0);
}
