/* PtmallocDump::Dump#_analysis and #_render, and the palette for the report's legend. */
#include "bindings/bindings.h"
#include "analysis/analysis.h"
#include "analysis/render.h"
#include "analysis/diff.h"

#include <string.h>

#define U64(x) ULL2NUM((unsigned long long)(x))
#define SET(h, key, val) rb_hash_aset((h), ID2SYM(rb_intern(key)), (val))
#define PTMD_TOP_RUNS 20
#define PTMD_TOP_PINNED 50
#define PTMD_PINNING_CHUNKS 8


static const char *const page_class_names[PTMD_PC_COUNT] = {
    "untouched", "in_use", "mixed", "pinned", "free_resident", "top", "released", "swapped", "meta"
};

static VALUE hex_color(ptmd_rgb c)
{
    return rb_sprintf("#%02x%02x%02x", c.r, c.g, c.b);
}

/* Dump#_analysis -> Hash */
static VALUE dump_analysis(VALUE self)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_page_usage *usage = ptmd_rb_dump_usage(self);
    uint64_t ps = v->meta->page_size, pinned_bytes, *trim, counts[PTMD_HIST_BUCKETS], bytes[PTMD_HIST_BUCKETS];
    ptmd_free_run runs[PTMD_TOP_RUNS];
    ptmd_pinned_page pins[PTMD_TOP_PINNED];
    size_t nruns, npins, total_pins, h, i;
    VALUE out = rb_hash_new(), classes = rb_hash_new(), heaps = rb_ary_new(), ary;
    uint64_t class_pages[PTMD_PC_COUNT] = { 0 }, class_shared[PTMD_PC_COUNT] = { 0 };

    for (h = 0; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t hc[PTMD_PC_COUNT] = { 0 }, p;
        VALUE e = rb_hash_new();
        for (p = 0; p < hp->n_pages; p++) {
            uint8_t f = v->pages[hp->first_page + p];
            int pc = (int)ptmd_page_classify(&usage[hp->first_page + p], f, ps);
            hc[pc]++;
            class_pages[pc]++;
            if (v->meta->residency_source == PTMD_RESIDENCY_PAGEMAP && !(v->meta->flags & PTMD_MF_FORK_CHILD) &&
                (f & PTMD_PAGE_PRESENT) && !(f & PTMD_PAGE_EXCLUSIVE))
                class_shared[pc]++;
        }
        for (i = 0; i < PTMD_PC_COUNT; i++) SET(e, page_class_names[i], U64(hc[i]));
        rb_ary_push(heaps, e);
    }
    for (i = 0; i < PTMD_PC_COUNT; i++) {
        VALUE e = rb_hash_new();
        SET(e, "pages", U64(class_pages[i]));
        SET(e, "shared_pages", U64(class_shared[i]));
        rb_hash_aset(classes, ID2SYM(rb_intern(page_class_names[i])), e);
    }
    SET(out, "page_classes", classes);
    SET(out, "heap_page_classes", heaps);

    nruns = ptmd_largest_free_runs(v, runs, PTMD_TOP_RUNS);
    ary = rb_ary_new();
    for (i = 0; i < nruns; i++) {
        VALUE e = rb_hash_new();
        SET(e, "start", U64(runs[i].start));
        SET(e, "end", U64(runs[i].end));
        SET(e, "resident", U64(runs[i].resident));
        SET(e, "heap", UINT2NUM(runs[i].heap));
        SET(e, "chunks", UINT2NUM(runs[i].chunks));
        rb_ary_push(ary, e);
    }
    SET(out, "free_runs", ary);

    total_pins = ptmd_pinned_pages(v, usage, pins, PTMD_TOP_PINNED, &pinned_bytes);
    npins = total_pins < PTMD_TOP_PINNED ? total_pins : PTMD_TOP_PINNED;
    ary = rb_ary_new();
    for (i = 0; i < npins; i++) {
        VALUE e = rb_hash_new(), chunks = rb_ary_new();
        uint64_t k;
        uint32_t shown = 0;
        SET(e, "address", U64(pins[i].address));
        SET(e, "heap", UINT2NUM(pins[i].heap));
        SET(e, "in_use", UINT2NUM(pins[i].in_use));
        SET(e, "chunk_count", UINT2NUM(pins[i].n_chunks));
        for (k = pins[i].first_chunk; shown < pins[i].n_chunks && shown < PTMD_PINNING_CHUNKS && k < v->n_chunks &&
                                      v->chunks[k].addr < pins[i].address + ps; k++) {
            int st = ptmd_rec_state(&v->chunks[k]);
            if (st != PTMD_ST_IN_USE && st != PTMD_ST_MMAPPED) continue;
            rb_ary_push(chunks, rb_ary_new_from_args(2, U64(v->chunks[k].addr), U64(ptmd_rec_size(&v->chunks[k]))));
            shown++;
        }
        SET(e, "chunks", chunks);
        rb_ary_push(ary, e);
    }
    SET(out, "pinned_pages", ary);
    SET(out, "pinned_page_count", U64(total_pins));
    SET(out, "pinned_bytes", U64(pinned_bytes));

    trim = ALLOC_N(uint64_t, v->n_arenas ? v->n_arenas : 1);
    ptmd_trim_estimate(v, trim);
    ary = rb_ary_new();
    for (i = 0; i < v->n_arenas; i++) rb_ary_push(ary, U64(trim[i]));
    xfree(trim);
    SET(out, "trim_estimate", ary);

    ptmd_free_histogram(v, counts, bytes);
    ary = rb_ary_new();
    {
        uint64_t small = 0, all = 0;
        for (i = 0; i < PTMD_HIST_BUCKETS; i++) {
            all += bytes[i];
            if ((1ull << (i + 1)) <= ps) small += bytes[i];
            if (!counts[i]) continue;
            rb_ary_push(ary, rb_ary_new_from_args(3, U64(1ull << i), U64(counts[i]), U64(bytes[i])));
        }
        SET(out, "free_histogram", ary);
        SET(out, "free_bytes_below_page", U64(small));
        SET(out, "free_bytes_not_top", U64(all));
    }
    return out;
}

/* Dump#_render(outdir, owner_layer, max_tile_pixels, progress_fd) -> Array of image Hashes */
static VALUE dump_render(VALUE self, VALUE outdir, VALUE owner, VALUE max_px, VALUE progress_fd)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_page_usage *usage = ptmd_rb_dump_usage(self);
    ptmd_render_opts o;
    ptmd_image *images;
    ptmd_err err;
    size_t n;
    long got, i;
    VALUE ary;

    FilePathValue(outdir);
    memset(&o, 0, sizeof(o));
    o.outdir = StringValueCStr(outdir);
    if (RTEST(owner) && v->ruby_meta) {
        size_t i;
        uint8_t *types = ALLOC_N(uint8_t, v->n_ruby_objects ? v->n_ruby_objects : 1);
        for (i = 0; i < v->n_ruby_objects; i++) types[i] = (uint8_t)ptmd_owner_category(v->ruby_objects[i].type);
        o.owner = ptmd_rb_dump_attribution(self)->category;
        o.owner_types = types;
    }
    o.max_tile_pixels = NIL_P(max_px) ? 0 : NUM2ULL(max_px);
    o.progress_fd = NIL_P(progress_fd) ? -1 : NUM2INT(progress_fd);
    n = ptmd_render_count(v, &o);
    images = ALLOC_N(ptmd_image, n ? n : 1);
    got = ptmd_render(v, usage, &o, images, n, &err);
    xfree((void *)o.owner_types);
    if (got < 0) {
        xfree(images);
        ptmd_rb_raise(&err);
    }
    ary = rb_ary_new_capa(got);
    for (i = 0; i < got; i++) {
        const ptmd_image *im = &images[i];
        VALUE e = rb_hash_new();
        SET(e, "file", rb_str_new_cstr(im->file));
        static const char *const kinds[] = { "?", "page_map", "byte_map", "owner_map", "ruby_pages", "diff_map" };
        SET(e, "kind", ID2SYM(rb_intern(kinds[im->kind])));
        SET(e, "group", im->group == -1 ? ID2SYM(rb_intern("mmapped")) : im->group == -2 ? ID2SYM(rb_intern("ruby")) : INT2NUM(im->group));
        SET(e, "tile", UINT2NUM(im->tile));
        SET(e, "first_unit", U64(im->first_unit));
        SET(e, "units", U64(im->n_units));
        SET(e, "width", UINT2NUM(im->width));
        SET(e, "height", UINT2NUM(im->height));
        SET(e, "cell", UINT2NUM(im->cell));
        SET(e, "per_row", UINT2NUM(im->per_row));
        rb_ary_push(ary, e);
    }
    xfree(images);
    return ary;
}

/* Dump#_diff_from(older) -> [totals Hash, page change String (one byte per page of self)] */
static VALUE dump_diff_from(VALUE self, VALUE older)
{
    const ptmd_view *b = ptmd_rb_dump_view(self), *a = ptmd_rb_dump_view(older);
    const ptmd_page_usage *ub = ptmd_rb_dump_usage(self), *ua = ptmd_rb_dump_usage(older);
    ptmd_diff_totals t;
    VALUE change = rb_str_new(NULL, (long)b->n_pages), h = rb_hash_new(), pages = rb_hash_new();
    static const char *const names[PTMD_PCHG_COUNT] = { "unchanged", "new_in_use", "new_free_resident", "released", "new_page" };
    int i;
    if (ptmd_diff(a, ua, b, ub, &t, (uint8_t *)RSTRING_PTR(change)) != 0) rb_raise(rb_eNoMemError, "diffing dumps");
    SET(h, "same_count", U64(t.same_count));
    SET(h, "same_bytes", U64(t.same_bytes));
    SET(h, "new_count", U64(t.new_count));
    SET(h, "new_bytes", U64(t.new_bytes));
    SET(h, "gone_count", U64(t.gone_count));
    SET(h, "gone_bytes", U64(t.gone_bytes));
    SET(h, "pages_became_resident", U64(t.became_resident));
    for (i = 0; i < PTMD_PCHG_COUNT; i++) rb_hash_aset(pages, ID2SYM(rb_intern(names[i])), U64(t.pages[i]));
    SET(h, "pages", pages);
    return rb_ary_new_from_args(2, h, change);
}

/* Dump#_render_diff(outdir, change) -> Array of image Hashes (the diff maps) */
static VALUE dump_render_diff(VALUE self, VALUE outdir, VALUE change)
{
    const ptmd_view *v = ptmd_rb_dump_view(self);
    const ptmd_page_usage *usage = ptmd_rb_dump_usage(self);
    ptmd_render_opts o;
    ptmd_image *images;
    ptmd_err err;
    size_t n;
    long got, i;
    VALUE ary;
    FilePathValue(outdir);
    StringValue(change);
    if ((size_t)RSTRING_LEN(change) != v->n_pages) rb_raise(rb_eArgError, "one change byte per page");
    memset(&o, 0, sizeof(o));
    o.outdir = StringValueCStr(outdir);
    o.progress_fd = -1;
    o.page_change = (const uint8_t *)RSTRING_PTR(change);
    n = ptmd_render_count(v, &o);
    images = ALLOC_N(ptmd_image, n ? n : 1);
    got = ptmd_render(v, usage, &o, images, n, &err);
    RB_GC_GUARD(change);
    if (got < 0) {
        xfree(images);
        ptmd_rb_raise(&err);
    }
    ary = rb_ary_new_capa(got);
    for (i = 0; i < got; i++) {
        VALUE e = rb_hash_new();
        SET(e, "file", rb_str_new_cstr(images[i].file));
        SET(e, "group", images[i].group < 0 ? ID2SYM(rb_intern("mmapped")) : INT2NUM(images[i].group));
        SET(e, "tile", UINT2NUM(images[i].tile));
        SET(e, "width", UINT2NUM(images[i].width));
        SET(e, "height", UINT2NUM(images[i].height));
        SET(e, "first_unit", U64(images[i].first_unit));
        SET(e, "units", U64(images[i].n_units));
        SET(e, "cell", UINT2NUM(images[i].cell));
        SET(e, "per_row", UINT2NUM(images[i].per_row));
        SET(e, "kind", ID2SYM(rb_intern("diff_map")));
        rb_ary_push(ary, e);
    }
    xfree(images);
    return ary;
}

/* PtmallocDump::Render.palette -> Hash of colour tables (the legend) */
static VALUE render_palette(VALUE self)
{
    VALUE h = rb_hash_new(), states = rb_hash_new(), pages = rb_hash_new(), owners = rb_ary_new();
    int i;
    PTMD_UNUSED(self);
    for (i = 0; i < PTMD_ST_COUNT; i++)
        rb_hash_aset(states, ID2SYM(rb_intern(ptmd_state_names[i])), hex_color(ptmd_state_color(i)));
    for (i = 0; i < PTMD_PC_COUNT; i++)
        rb_hash_aset(pages, ID2SYM(rb_intern(page_class_names[i])), hex_color(ptmd_page_color(i)));
    for (i = 0; i < PTMD_OWN_COUNT; i++) rb_ary_push(owners, hex_color(ptmd_owner_color(i)));
    SET(h, "states", states);
    SET(h, "page_classes", pages);
    SET(h, "owners", owners);
    {
        VALUE diff = rb_ary_new();
        for (i = 0; i < 5; i++) rb_ary_push(diff, hex_color(ptmd_diff_color(i)));
        SET(h, "diff", diff);
    }
    {
        const ptmd_rgb *p = ptmd_palette();
        VALUE all = rb_ary_new_capa(PTMD_PAL_SIZE);
        for (i = 0; i < PTMD_PAL_SIZE; i++) rb_ary_push(all, hex_color(p[i]));
        SET(h, "indexed", all);
    }
    return h;
}

void ptmd_rb_render_init(void)
{
    VALUE cDump = rb_const_get(ptmd_mPtmallocDump, rb_intern("Dump"));
    VALUE mRender = rb_define_module_under(ptmd_mPtmallocDump, "Render");
    rb_define_private_method(cDump, "_analysis", dump_analysis, 0);
    rb_define_private_method(cDump, "_render", dump_render, 4);
    rb_define_private_method(cDump, "_diff_from", dump_diff_from, 1);
    rb_define_private_method(cDump, "_render_diff", dump_render_diff, 2);
    rb_define_singleton_method(mRender, "palette", render_palette, 0);
    rb_define_const(mRender, "BYTES_PER_PIXEL", INT2NUM(PTMD_BYTE_MAP_BYTES_PER_PX));
    rb_define_const(mRender, "PAGE_CELLS_PER_ROW", INT2NUM(PTMD_PAGE_MAP_CELLS_PER_ROW));
    rb_define_const(mRender, "BYTE_MAP_PAGES_PER_ROW", INT2NUM(PTMD_BYTE_MAP_PAGES_PER_ROW));
}
