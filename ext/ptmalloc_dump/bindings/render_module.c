/* PtmallocDump::Render: the heap maps of a loaded dump and of a comparison (analysis/render.c), and the
 * palette for the report's legend. */
#include "bindings/bindings.h"
#include "analysis/diff.h"
#include "analysis/explorer.h"
#include "analysis/owners.h"
#include "analysis/palette.h"
#include "analysis/render.h"

#include <string.h>

static VALUE hex_color(ptmd_rgb c)
{
    return rb_sprintf("#%02x%02x%02x", c.r, c.g, c.b);
}

/* Renders with o, then describes each image as a Hash; frees what it allocated, also on error. */
static VALUE render(const ptmd_view *v, const ptmd_page_usage *usage, ptmd_render_opts *o, uint8_t *owner_types)
{
    size_t n = ptmd_render_count(v, o);
    ptmd_image *images = ALLOC_N(ptmd_image, n ? n : 1);
    ptmd_err err;
    long got = ptmd_render(v, usage, o, images, n, &err), i;
    VALUE ary;
    xfree(owner_types);
    if (got < 0) {
        xfree(images);
        ptmd_rb_raise(&err);
    }
    ary = rb_ary_new_capa(got);
    for (i = 0; i < got; i++) {
        const ptmd_image *im = &images[i];
        VALUE e = rb_hash_new();
        PTMD_SET(e, "file", rb_str_new_cstr(im->file));
        PTMD_SET(e, "kind", PTMD_SYM(PTMD_NAME_OF(ptmd_image_kind_names, im->kind)));
        PTMD_SET(e, "group",
                 im->group == -1   ? PTMD_SYM("mmapped")
                 : im->group == -2 ? PTMD_SYM("ruby")
                                   : INT2NUM(im->group));
        PTMD_SET(e, "tile", UINT2NUM(im->tile));
        PTMD_SET(e, "first_unit", PTMD_U64(im->first_unit));
        PTMD_SET(e, "units", PTMD_U64(im->n_units));
        PTMD_SET(e, "width", UINT2NUM(im->width));
        PTMD_SET(e, "height", UINT2NUM(im->height));
        PTMD_SET(e, "cell", UINT2NUM(im->cell));
        PTMD_SET(e, "per_row", UINT2NUM(im->per_row));
        rb_ary_push(ary, e);
    }
    xfree(images);
    return ary;
}

/* Render.maps(dump, outdir, owners, max_tile_pixels, progress_fd) -> Array of image Hashes: page and
 * byte maps of every heap, owner maps and the Ruby pages map when `owners` and the dump has Ruby data */
static VALUE render_maps(VALUE self, VALUE dump, VALUE outdir, VALUE owners, VALUE max_px, VALUE progress_fd)
{
    const ptmd_view *v = ptmd_rb_dump_view(dump);
    const ptmd_page_usage *usage = ptmd_rb_dump_usage(dump);
    ptmd_render_opts o;
    uint8_t *types = NULL;
    PTMD_UNUSED(self);
    FilePathValue(outdir);
    memset(&o, 0, sizeof(o));
    o.outdir = StringValueCStr(outdir);
    o.max_tile_pixels = NIL_P(max_px) ? 0 : NUM2ULL(max_px);
    o.progress_fd = NIL_P(progress_fd) ? -1 : NUM2INT(progress_fd);
    if (RTEST(owners) && v->ruby_meta) {
        size_t i;
        o.owner = ptmd_rb_dump_attribution(dump)->category; /* computed before anything is allocated here */
        types = ALLOC_N(uint8_t, v->n_ruby_objects ? v->n_ruby_objects : 1);
        for (i = 0; i < v->n_ruby_objects; i++) types[i] = (uint8_t)ptmd_owner_category(v->ruby_objects[i].type);
        o.owner_types = types;
    }
    return render(v, usage, &o, types);
}

/* Render.diff_maps(dump, outdir, page_changes) -> Array of image Hashes: the newer dump's page maps
 * coloured by what changed (page_changes: one PTMD_PCHG_* byte per page, Diff#page_changes) */
static VALUE render_diff_maps(VALUE self, VALUE dump, VALUE outdir, VALUE change)
{
    const ptmd_view *v = ptmd_rb_dump_view(dump);
    ptmd_render_opts o;
    VALUE images;
    PTMD_UNUSED(self);
    FilePathValue(outdir);
    StringValue(change);
    if ((size_t)RSTRING_LEN(change) != v->n_pages) rb_raise(rb_eArgError, "one change byte per page");
    memset(&o, 0, sizeof(o));
    o.outdir = StringValueCStr(outdir);
    o.progress_fd = -1;
    o.page_change = (const uint8_t *)RSTRING_PTR(change);
    images = render(v, ptmd_rb_dump_usage(dump), &o, NULL);
    RB_GC_GUARD(change);
    return images;
}

/* A binary String of n elements of size each, filled by the caller. */
static VALUE packed(size_t n, size_t size, void **ptr)
{
    VALUE s = rb_str_new(NULL, (long)(n * size));
    *ptr = RSTRING_PTR(s);
    return s;
}

/* The owners' part of Render.explorer_data: chunk -> dense owner, and per owning object its address
 * (double), type key (type | imemo subtype << 8), class and typed-data name indices (RUBY_NAMES, or
 * PTMD_NO_NAME). */
static void explorer_owners(const ptmd_view *v, const ptmd_attribution *a, VALUE h)
{
    uint32_t *remap = ZALLOC_N(uint32_t, v->n_ruby_objects ? v->n_ruby_objects : 1);
    uint32_t *objs = ALLOC_N(uint32_t, v->n_ruby_objects ? v->n_ruby_objects : 1);
    uint32_t *local, *klass, *dtype, *type;
    double *addr;
    size_t n, k;
    VALUE owners = packed(v->n_chunks, 4, (void **)&local), a_addr, a_klass, a_dtype, a_type, index;
    n = ptmd_explorer_owners(v, a, local, remap, objs);
    xfree(remap);
    a_addr = packed(n, 8, (void **)&addr);
    a_klass = packed(n, 4, (void **)&klass);
    a_dtype = packed(n, 4, (void **)&dtype);
    a_type = packed(n, 4, (void **)&type);
    index = rb_ary_new_capa((long)n);
    for (k = 0; k < n; k++) {
        const ptmd_ruby_object *o = &v->ruby_objects[objs[k]];
        addr[k] = (double)o->address;
        klass[k] = o->klass;
        dtype[k] = o->data_type;
        type[k] = (uint32_t)o->type | (o->type == T_IMEMO ? (uint32_t)o->subtype << 8 : 0);
        rb_ary_push(index, ULONG2NUM(objs[k]));
    }
    xfree(objs);
    PTMD_SET(h, "owners", owners);
    PTMD_SET(h, "categories", rb_str_new((const char *)a->category, (long)v->n_chunks));
    PTMD_SET(h, "object_index", index);
    PTMD_SET(h, "object_address", a_addr);
    PTMD_SET(h, "object_class", a_klass);
    PTMD_SET(h, "object_data_type", a_dtype);
    PTMD_SET(h, "object_type", a_type);
}

/* Who holds each chunk (analysis/owners.c): :owner_kinds (u8 PTMD_OK_* per chunk) and :anchor_ids (u16
 * per chunk: the root an anchored or interior-held chunk is reached from + 1, 0 for none or a root of
 * index 0xfffe on). */
static void explorer_holders(const ptmd_view *v, const ptmd_owners *o, VALUE h)
{
    uint16_t *ids;
    VALUE anchors = packed(v->n_chunks, 2, (void **)&ids);
    size_t i;
    for (i = 0; i < v->n_chunks; i++)
        ids[i] = (o->kind[i] == PTMD_OK_ANCHORED || o->kind[i] == PTMD_OK_INTERIOR) && o->anchor[i] < 0xfffe
                     ? (uint16_t)(o->anchor[i] + 1)
                     : 0;
    PTMD_SET(h, "owner_kinds", rb_str_new((const char *)o->kind, (long)v->n_chunks));
    PTMD_SET(h, "anchor_ids", anchors);
}

/* The code each chunk is charged to (analysis/code_owners.c), renumbered densely in order of first use:
 * :code (per chunk k + 1 for the k-th record, 0 for none; u16 when fewer than 65,535 records are used,
 * else u32: :code_width says which) and :code_records (each record's address, for RubyHeap#code_of). */
static void explorer_code(const ptmd_view *v, VALUE charges, VALUE h)
{
    uint32_t *remap = ZALLOC_N(uint32_t, v->n_ruby_code ? v->n_ruby_code : 1), *local;
    const uint32_t *rec = (const uint32_t *)RSTRING_PTR(charges);
    VALUE code = packed(v->n_chunks, 4, (void **)&local), records = rb_ary_new();
    size_t i;
    int width = 4;
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t r = rec[i];
        local[i] = 0;
        if (r >= v->n_ruby_code) continue;
        if (!remap[r]) {
            rb_ary_push(records, PTMD_U64(v->ruby_code[r].address));
            remap[r] = (uint32_t)RARRAY_LEN(records);
        }
        local[i] = remap[r];
    }
    xfree(remap);
    RB_GC_GUARD(charges);
    if (RARRAY_LEN(records) < 0xffff) {
        uint16_t *narrow;
        VALUE code16 = packed(v->n_chunks, 2, (void **)&narrow);
        for (i = 0; i < v->n_chunks; i++) narrow[i] = (uint16_t)local[i];
        RB_GC_GUARD(code);
        code = code16;
        width = 2;
    }
    PTMD_SET(h, "code", code);
    PTMD_SET(h, "code_width", INT2NUM(width));
    PTMD_SET(h, "code_records", records);
}

/* Render.explorer_data(dump) -> Hash of little-endian packed Strings for the report's explorer:
 * :sizes (u32 size / 16 per chunk), :states (u8 state | flags << 4), :pages (u8 residency flags |
 * page class << 4), :refs (u32 from, to pairs), :tcache (u32 chunk, thread, bin | position << 16 per
 * tcache entry; absent when the file has none); with Ruby data also the owners (explorer_owners), with
 * roots the holders (explorer_holders), with code records the code (explorer_code). */
static VALUE render_explorer_data(VALUE self, VALUE dump)
{
    const ptmd_view *v = ptmd_rb_dump_view(dump);
    const ptmd_page_usage *usage = ptmd_rb_dump_usage(dump);
    VALUE h = rb_hash_new(), sizes, states, pages, refs;
    uint32_t *sz, *rf;
    uint8_t *st, *pg;
    size_t i;
    PTMD_UNUSED(self);
    sizes = packed(v->n_chunks, 4, (void **)&sz);
    states = packed(v->n_chunks, 1, (void **)&st);
    pages = packed(v->n_pages, 1, (void **)&pg);
    ptmd_explorer_chunks(v, usage, sz, st, pg);
    refs = packed(v->n_refs, 8, (void **)&rf);
    for (i = 0; i < v->n_refs; i++) {
        rf[2 * i] = v->refs[i].from;
        rf[2 * i + 1] = v->refs[i].to;
    }
    PTMD_SET(h, "sizes", sizes);
    PTMD_SET(h, "states", states);
    PTMD_SET(h, "pages", pages);
    PTMD_SET(h, "refs", refs);
    if (v->tcache_entries) {
        uint32_t *tc;
        VALUE tcache = packed(v->n_tcache_entries, 12, (void **)&tc);
        ptmd_explorer_tcache(v, tc);
        PTMD_SET(h, "tcache", tcache);
    }
    if (v->ruby_meta) {
        VALUE charges = ptmd_rb_code_charges(dump);
        explorer_owners(v, ptmd_rb_dump_attribution(dump), h);
        if (!NIL_P(charges)) explorer_code(v, charges, h);
    }
    if (ptmd_owners_available(v)) explorer_holders(v, ptmd_rb_dump_owners(dump), h);
    return h;
}

/* Render.palette -> Hash of colour tables (the legend) */
static VALUE render_palette(VALUE self)
{
    VALUE h = rb_hash_new(), states = rb_hash_new(), pages = rb_hash_new(), owners = rb_ary_new(), diff = rb_ary_new(),
          all = rb_ary_new_capa(PTMD_PAL_SIZE);
    const ptmd_rgb *p = ptmd_palette();
    int i;
    PTMD_UNUSED(self);
    for (i = 0; i < PTMD_ST_COUNT; i++) PTMD_SET(states, ptmd_state_names[i], hex_color(ptmd_state_color(i)));
    for (i = 0; i < PTMD_PC_COUNT; i++) PTMD_SET(pages, ptmd_page_class_names[i], hex_color(ptmd_page_color(i)));
    for (i = 0; i < PTMD_OWN_COUNT; i++) rb_ary_push(owners, hex_color(ptmd_owner_color(i)));
    for (i = 0; i < PTMD_PCHG_COUNT; i++) rb_ary_push(diff, hex_color(ptmd_diff_color(i)));
    for (i = 0; i < PTMD_PAL_SIZE; i++) rb_ary_push(all, hex_color(p[i]));
    PTMD_SET(h, "states", states);
    PTMD_SET(h, "page_classes", pages);
    PTMD_SET(h, "owners", owners);
    PTMD_SET(h, "diff", diff);
    PTMD_SET(h, "indexed", all);
    return h;
}

void ptmd_render_module_init(void)
{
    VALUE mRender = rb_define_module_under(ptmd_mPtmallocDump, "Render");
    rb_define_module_function(mRender, "maps", render_maps, 5);
    rb_define_module_function(mRender, "diff_maps", render_diff_maps, 3);
    rb_define_module_function(mRender, "palette", render_palette, 0);
    rb_define_module_function(mRender, "explorer_data", render_explorer_data, 1);
    rb_define_const(mRender, "OWNER_CATEGORIES",
                    rb_const_get(rb_const_get(ptmd_mPtmallocDump, rb_intern("Format")), rb_intern("OWNER_CATEGORIES")));
    rb_define_const(mRender, "BYTES_PER_PIXEL", INT2NUM(PTMD_BYTE_MAP_BYTES_PER_PX));
    rb_define_const(mRender, "PAGE_CELLS_PER_ROW", INT2NUM(PTMD_PAGE_MAP_CELLS_PER_ROW));
    rb_define_const(mRender, "BYTE_MAP_PAGES_PER_ROW", INT2NUM(PTMD_BYTE_MAP_PAGES_PER_ROW));
}
