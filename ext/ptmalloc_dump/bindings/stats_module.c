/* PtmallocDump._stats_fill: the native half of PtmallocDump.stats. It writes into Hashes the Ruby side
 * built beforehand (every key present, Integer values), so that the reading allocates nothing: a dump
 * called right after it sees the same malloc state. */
#include "bindings/bindings.h"
#include "capture/stats.h"

#include <ruby/thread.h>
#include <string.h>

static ptmd_arena_reading readings[PTMD_STATS_MAX_ARENAS];

/* Stores an Integer under an existing key: no allocation for values that fit a Fixnum. */
static void put(VALUE hash, const char *key, uint64_t value)
{
    rb_hash_aset(hash, ID2SYM(rb_intern(key)), PTMD_U64(value));
}

typedef struct {
    ptmd_stats_reading r;
    size_t cap;
    ptmd_err err;
    int rc;
} stats_call;

/* Without the GVL: mallinfo2 visits every free chunk in the bins (glibc's own loop, under each
 * arena's lock), hundreds of milliseconds on a heap of a million free chunks, which Ruby threads
 * need not wait for. */
static void *read_without_gvl(void *arg)
{
    stats_call *c = arg;
    c->rc = ptmd_stats_read(&c->r, readings, c->cap, &c->err);
    return NULL;
}

/* _stats_fill(malloc, arenas) -> the number of arenas on the ring, or -1 when that ring did not lead
 * back to main_arena (mallinfo2 was then not called). malloc: Hash with the mallinfo2 keys; arenas:
 * Array of Hashes with :address, :system_mem, :max_system_mem, filled in ring order as far as it
 * reaches. */
static VALUE rb_ptmd_stats_fill(VALUE self, VALUE malloc, VALUE arenas)
{
    stats_call c;
    long i, cap;
    PTMD_UNUSED(self);
    Check_Type(malloc, T_HASH);
    Check_Type(arenas, T_ARRAY);
    cap = RARRAY_LEN(arenas);
    if (cap > PTMD_STATS_MAX_ARENAS) cap = PTMD_STATS_MAX_ARENAS;
    for (i = 0; i < cap; i++) Check_Type(RARRAY_AREF(arenas, i), T_HASH);
    memset(&c, 0, sizeof(c));
    c.cap = (size_t)cap;
    rb_thread_call_without_gvl(read_without_gvl, &c, NULL, NULL);
    if (c.rc != 0) ptmd_rb_raise(&c.err);
    for (i = 0; i < cap && (size_t)i < c.r.n_arenas; i++) {
        VALUE a = RARRAY_AREF(arenas, i);
        put(a, "address", readings[i].av);
        put(a, "system_mem", readings[i].system_mem);
        put(a, "max_system_mem", readings[i].max_system_mem);
    }
    if (c.r.have_mallinfo) {
        put(malloc, "arena", c.r.mallinfo.arena);
        put(malloc, "ordblks", c.r.mallinfo.ordblks);
        put(malloc, "smblks", c.r.mallinfo.smblks);
        put(malloc, "hblks", c.r.mallinfo.hblks);
        put(malloc, "hblkhd", c.r.mallinfo.hblkhd);
        put(malloc, "usmblks", c.r.mallinfo.usmblks);
        put(malloc, "fsmblks", c.r.mallinfo.fsmblks);
        put(malloc, "uordblks", c.r.mallinfo.uordblks);
        put(malloc, "fordblks", c.r.mallinfo.fordblks);
        put(malloc, "keepcost", c.r.mallinfo.keepcost);
    }
    return c.r.ring_ok ? LONG2NUM((long)c.r.n_arenas) : INT2FIX(-1);
}

void ptmd_stats_module_init(void)
{
    rb_define_singleton_method(ptmd_mPtmallocDump, "_stats_fill", rb_ptmd_stats_fill, 2);
}
