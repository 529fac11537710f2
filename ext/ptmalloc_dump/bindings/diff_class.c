/* PtmallocDump::Diff: the chunk-by-chunk and page-by-page comparison of two dumps of one process
 * (analysis/diff.c). */
#include "bindings/bindings.h"
#include "analysis/diff.h"
#include "analysis/interface.h"

/* Diff#_compare(old, new) -> [totals Hash, page changes String (one PTMD_PCHG_* byte per page of new)] */
static VALUE diff_compare(VALUE self, VALUE older, VALUE newer)
{
    const ptmd_view *a = ptmd_rb_dump_view(older), *b = ptmd_rb_dump_view(newer);
    ptmd_diff_totals t;
    VALUE change = rb_str_new(NULL, (long)b->n_pages), h = rb_hash_new(), pages = rb_hash_new();
    int i;
    PTMD_UNUSED(self);
    ptmd_diff(a, ptmd_rb_dump_usage(older), b, ptmd_rb_dump_usage(newer), &t, (uint8_t *)RSTRING_PTR(change));
    PTMD_SET(h, "same_count", PTMD_U64(t.same_count));
    PTMD_SET(h, "same_bytes", PTMD_U64(t.same_bytes));
    PTMD_SET(h, "new_count", PTMD_U64(t.new_count));
    PTMD_SET(h, "new_bytes", PTMD_U64(t.new_bytes));
    PTMD_SET(h, "gone_count", PTMD_U64(t.gone_count));
    PTMD_SET(h, "gone_bytes", PTMD_U64(t.gone_bytes));
    PTMD_SET(h, "pages_became_resident", PTMD_U64(t.became_resident));
    for (i = 0; i < PTMD_PCHG_COUNT; i++) PTMD_SET(pages, ptmd_page_change_names[i], PTMD_U64(t.pages[i]));
    PTMD_SET(h, "pages", pages);
    return rb_ary_new_from_args(2, h, change);
}

/* Diff#_interface(old, new, limit) -> [[object index in new, new objects, new bytes], ...] */
static VALUE diff_interface(VALUE self, VALUE older, VALUE newer, VALUE limit)
{
    const ptmd_view *a = ptmd_rb_dump_view(older), *b = ptmd_rb_dump_view(newer);
    const ptmd_retention *r = ptmd_rb_dump_retention(newer);
    long n = NUM2LONG(limit), found, i;
    ptmd_interface_rec *out;
    VALUE ary;
    PTMD_UNUSED(self);
    if (!r || !a->ruby_objects || n <= 0) return rb_ary_new();
    if (n > 4096) n = 4096;
    out = ALLOC_N(ptmd_interface_rec, (size_t)n);
    found = ptmd_interface(a, b, r, out, (size_t)n);
    if (found < 0) {
        xfree(out);
        rb_raise(rb_eNoMemError, "comparing the objects of two dumps");
    }
    ary = rb_ary_new_capa(found);
    for (i = 0; i < found; i++)
        rb_ary_push(ary, rb_ary_new_from_args(3, UINT2NUM(out[i].object), UINT2NUM(out[i].new_objects),
                                              PTMD_U64(out[i].new_bytes)));
    xfree(out);
    return ary;
}

void ptmd_diff_class_init(void)
{
    VALUE cDiff = rb_define_class_under(ptmd_mPtmallocDump, "Diff", rb_cObject);
    rb_define_private_method(cDiff, "_compare", diff_compare, 2);
    rb_define_private_method(cDiff, "_interface", diff_interface, 3);
}
