/* The PNG renderer. Pictures are 8-bit indexed colour (one byte per pixel, fast zlib level), painted
 * tile by tile so memory stays bounded whatever the heap size. */
#include "analysis/render.h"
#include "analysis/attribution.h"
#include "analysis/diff.h"
#include "analysis/palette.h"
#include "format/glibc.h"

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const ptmd_image_kind_names[PTMD_IMG_COUNT] = { PTMD_IMAGE_KINDS(PTMD_ENUM_NAME) };

#define PTMD_MAX_IMAGE_ROWS 8192
#define PTMD_DEFAULT_TILE_PIXELS (256ull * PTMD_MAX_IMAGE_ROWS)

/* ---- groups: each arena heap alone, and all mmapped chunks together ----------------------- */

typedef struct {
    int32_t id;          /* heap index or -1 */
    size_t first, count; /* heaps [first, first+count) of the group when id == -1, else the heap */
} group;

static size_t groups_of(const ptmd_view *v, group *out, size_t max)
{
    size_t h, n = 0, mm_first = 0, mm_count = 0;
    for (h = 0; h < v->n_heaps; h++) {
        if (v->heaps[h].kind == PTMD_HEAP_MMAPPED_CHUNK) {
            if (!mm_count) mm_first = h;
            mm_count++;
            continue;
        }
        if (out && n < max) {
            out[n].id = (int32_t)h;
            out[n].first = h;
            out[n].count = 1;
        }
        n++;
    }
    if (mm_count) {
        if (out && n < max) {
            out[n].id = -1;
            out[n].first = mm_first;
            out[n].count = mm_count;
        }
        n++;
    }
    return n;
}

static int in_group(const ptmd_view *v, const group *g, size_t h)
{
    if (g->id >= 0) return h == (size_t)g->id;
    return h >= g->first && v->heaps[h].kind == PTMD_HEAP_MMAPPED_CHUNK;
}

static uint64_t granules_per_page(const ptmd_view *v)
{
    return v->meta->page_size / PTMD_BYTE_MAP_BYTES_PER_PX;
}

static uint64_t group_pages(const ptmd_view *v, const group *g)
{
    uint64_t n = 0;
    size_t h;
    for (h = g->first; h < v->n_heaps; h++)
        if (in_group(v, g, h)) n += v->heaps[h].n_pages;
    return n;
}

static uint32_t page_map_cell(uint64_t pages)
{
    uint64_t rows = (pages + PTMD_PAGE_MAP_CELLS_PER_ROW - 1) / PTMD_PAGE_MAP_CELLS_PER_ROW;
    if (rows * 4 <= PTMD_MAX_IMAGE_ROWS) return 4;
    if (rows * 2 <= PTMD_MAX_IMAGE_ROWS) return 2;
    return 1;
}

static uint64_t tile_rows(const ptmd_render_opts *o, uint64_t width, uint64_t row_px)
{
    uint64_t budget = o->max_tile_pixels ? o->max_tile_pixels : PTMD_DEFAULT_TILE_PIXELS;
    uint64_t rows = budget / (width * row_px);
    if (rows * row_px > PTMD_MAX_IMAGE_ROWS) rows = PTMD_MAX_IMAGE_ROWS / row_px;
    return rows ? rows : 1;
}

/* ---- PNG output --------------------------------------------------------------------------- */

static int write_png(const char *path, const uint8_t *px, uint32_t w, uint32_t h, ptmd_err *err)
{
    FILE *fp = fopen(path, "wb");
    png_structp png;
    png_infop info;
    png_color pal[PTMD_PAL_SIZE];
    const ptmd_rgb *p = ptmd_palette();
    uint32_t y;
    int i;
    if (!fp) return ptmd_fail_sys(err, errno, path, "cannot create");
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(fp);
        unlink(path);
        return ptmd_fail(err, PTMD_E_INTERNAL, "libpng failed writing %s", path);
    }
    for (i = 0; i < PTMD_PAL_SIZE; i++) {
        pal[i].red = p[i].r;
        pal[i].green = p[i].g;
        pal[i].blue = p[i].b;
    }
    png_init_io(png, fp);
    png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_set_PLTE(png, info, pal, PTMD_PAL_SIZE);
    png_set_compression_level(png, 1);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
    png_write_info(png, info);
    for (y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(px + (size_t)y * w));
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    if (fclose(fp) != 0) return ptmd_fail_sys(err, errno, path, "cannot write");
    return 0;
}

/* ---- painting ----------------------------------------------------------------------------- */

static int shared_page(const ptmd_view *v, uint8_t f)
{
    return ptmd_page_shared(v->meta, f);
}

static void paint_page_map(const ptmd_view *v, const ptmd_page_usage *usage, const uint8_t *change, const group *g,
                           uint64_t u0, uint64_t u1, uint32_t cell, uint8_t *px, uint32_t width)
{
    uint64_t off = 0;
    size_t h;
    for (h = g->first; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t p;
        if (!in_group(v, g, h)) continue;
        for (p = 0; p < hp->n_pages; p++) {
            uint64_t unit = off + p, row, col;
            uint32_t y, x;
            uint8_t f;
            int pc, sh;
            if (unit < u0) continue;
            if (unit >= u1) return;
            f = v->pages[hp->first_page + p];
            pc = (int)ptmd_page_classify(&usage[hp->first_page + p], f, v->meta->page_size);
            sh = shared_page(v, f);
            row = (unit - u0) / PTMD_PAGE_MAP_CELLS_PER_ROW;
            col = (unit - u0) % PTMD_PAGE_MAP_CELLS_PER_ROW;
            for (y = 0; y < cell; y++)
                for (x = 0; x < cell; x++) /* shared pages get a checker of the darker shade */
                    px[(row * cell + y) * width + col * cell + x] =
                        change ? (uint8_t)PTMD_PAL_DIFF(change[hp->first_page + p] % PTMD_PCHG_COUNT)
                               : (uint8_t)PTMD_PAL_PAGE(pc, sh && ((x + y) & 1) == 0);
        }
        off += hp->n_pages;
    }
}

/* First chunk of heap hp whose end is past addr. */
static uint64_t first_chunk_from(const ptmd_view *v, const ptmd_heap_rec *hp, uint64_t addr)
{
    uint64_t lo = hp->first_chunk, hi = hp->first_chunk + hp->n_chunks;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (v->chunks[mid].addr + ptmd_rec_size(&v->chunks[mid]) <= addr) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* owner_mode: colour in-use chunks by owner (owner[] per chunk) and every free chunk alike */
static void paint_byte_map(const ptmd_view *v, const group *g, uint64_t u0, uint64_t u1, const uint8_t *owner,
                           int owner_mode, uint8_t *px)
{
    const uint64_t gpp = granules_per_page(v), ps = v->meta->page_size;
    uint64_t off = 0;
    size_t h;
    for (h = g->first; h < v->n_heaps; h++) {
        const ptmd_heap_rec *hp = &v->heaps[h];
        uint64_t n = hp->n_pages * gpp, lo_u, hi_u, lo_a, hi_a, i;
        if (!in_group(v, g, h)) continue;
        if (off >= u1) return;
        if (off + n <= u0) {
            off += n;
            continue;
        }
        lo_u = u0 > off ? u0 : off;
        hi_u = u1 < off + n ? u1 : off + n;
        lo_a = hp->page_base + (lo_u - off) * PTMD_BYTE_MAP_BYTES_PER_PX;
        hi_a = hp->page_base + (hi_u - off) * PTMD_BYTE_MAP_BYTES_PER_PX;
        for (i = first_chunk_from(v, hp, lo_a); i < hp->first_chunk + hp->n_chunks; i++) {
            const ptmd_chunk_rec *c = &v->chunks[i];
            uint64_t a = c->addr > lo_a ? c->addr : lo_a, e = c->addr + ptmd_rec_size(c);
            int st = ptmd_rec_state(c), shade = (int)(i & 1);
            int in_use = ptmd_state_is_allocated(st);
            int own = owner_mode && in_use ? owner[i] : 0;
            int free_chunk = owner_mode && ptmd_state_is_free(st);
            if (c->addr >= hi_a) break;
            if (e > hi_a) e = hi_a;
            while (a < e) {
                uint64_t page = (a - hp->page_base) / ps, pe = hp->page_base + (page + 1) * ps;
                uint64_t se = pe < e ? pe : e, g0, g1;
                int dim = !(v->pages[hp->first_page + page] & PTMD_PAGE_PRESENT);
                uint8_t color = (uint8_t)(own          ? PTMD_PAL_OWNER(own, shade, dim)
                                          : free_chunk ? PTMD_PAL_OWNER(0, shade, dim)
                                                       : PTMD_PAL_STATE(st, shade, dim));
                g0 = off + (a - hp->page_base) / PTMD_BYTE_MAP_BYTES_PER_PX - u0;
                g1 = off + (se - hp->page_base + PTMD_BYTE_MAP_BYTES_PER_PX - 1) / PTMD_BYTE_MAP_BYTES_PER_PX - u0;
                memset(px + g0, color, (size_t)(g1 - g0));
                a = se;
            }
        }
        off += n;
    }
}

/* Ruby pages: row r = sorted page first_unit + r, pixel (2x2) per slot, live slots in the colour of
 * their object's owner category. */
static void paint_ruby_pages(const ptmd_view *v, const uint8_t *owner_types, uint64_t r0, uint64_t r1, uint8_t *px,
                             uint32_t width)
{
    size_t i;
    for (i = 0; i < v->n_ruby_objects; i++) {
        uint64_t a = v->ruby_objects[i].address;
        size_t lo = 0, hi = v->n_ruby_pages;
        const ptmd_ruby_page *pg;
        uint64_t slot, row;
        uint8_t color;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (a < v->ruby_pages[mid].start) hi = mid;
            else if (a >= v->ruby_pages[mid].end) lo = mid + 1;
            else {
                lo = mid;
                break;
            }
        }
        if (lo >= v->n_ruby_pages || lo < r0 || lo >= r1) continue;
        pg = &v->ruby_pages[lo];
        if (a < pg->start || !pg->stride) continue;
        slot = (a - pg->start) / pg->stride;
        if (slot * 2 + 1 >= width) continue;
        row = lo - r0;
        color = (uint8_t)PTMD_PAL_OWNER(owner_types[i], 0, 0);
        px[(row * 2) * width + slot * 2] = px[(row * 2) * width + slot * 2 + 1] = color;
        px[(row * 2 + 1) * width + slot * 2] = px[(row * 2 + 1) * width + slot * 2 + 1] = color;
    }
}

/* ---- driver ------------------------------------------------------------------------------- */

static void progress(const ptmd_render_opts *o, size_t done, size_t total)
{
    char line[96];
    int n;
    if (o->progress_fd < 0) return;
    n = snprintf(line, sizeof(line), "\rptmalloc-visualize: rendering image %zu of %zu", done, total);
    if (done == total) n += snprintf(line + n, sizeof(line) - (size_t)n, "\n");
    if (write(o->progress_fd, line, (size_t)n) < 0) return;
}

/* Plans every image (without painting); returns the number, filling out[] when given. */
static size_t plan(const ptmd_view *v, const ptmd_render_opts *o, const group *gs, size_t ng, ptmd_image *out,
                   size_t max)
{
    size_t gi, n = 0;
    const uint64_t gpp = granules_per_page(v);
    for (gi = 0; gi < ng; gi++) {
        const uint64_t pages = group_pages(v, &gs[gi]);
        int kind;
        for (kind = PTMD_IMG_PAGE_MAP; kind <= PTMD_IMG_DIFF_MAP; kind++) {
            const int pm = kind == PTMD_IMG_PAGE_MAP || kind == PTMD_IMG_DIFF_MAP;
            const char *tag = kind == PTMD_IMG_PAGE_MAP    ? "pages"
                              : kind == PTMD_IMG_BYTE_MAP  ? "bytes"
                              : kind == PTMD_IMG_OWNER_MAP ? "owners"
                                                           : "diff";
            if (kind == PTMD_IMG_OWNER_MAP && !o->owner) continue;
            if (kind == PTMD_IMG_RUBY_PAGES) continue;
            /* a diff renders its diff maps only; a report everything else */
            if ((kind == PTMD_IMG_DIFF_MAP) != (o->page_change != NULL)) continue;
            const uint32_t cell = pm ? page_map_cell(pages) : 1;
            const uint32_t per_row = pm ? PTMD_PAGE_MAP_CELLS_PER_ROW : (uint32_t)(gpp * PTMD_BYTE_MAP_PAGES_PER_ROW);
            const uint32_t width = per_row * cell;
            const uint64_t units = pm ? pages : pages * gpp;
            const uint64_t per_tile = tile_rows(o, width, cell) * per_row;
            uint64_t u = 0;
            uint32_t tile = 0;
            do {
                uint64_t cnt = units - u < per_tile ? units - u : per_tile;
                if (out && n < max) {
                    ptmd_image *im = &out[n];
                    memset(im, 0, sizeof(*im));
                    im->kind = kind;
                    im->group = gs[gi].id;
                    im->tile = tile;
                    im->first_unit = u;
                    im->n_units = cnt;
                    im->cell = cell;
                    im->per_row = per_row;
                    im->width = width;
                    im->height = (uint32_t)(((cnt + per_row - 1) / per_row) * cell);
                    if (im->height == 0) im->height = cell;
                    if (gs[gi].id >= 0) snprintf(im->file, sizeof(im->file), "heap%d-%s-%u.png", gs[gi].id, tag, tile);
                    else snprintf(im->file, sizeof(im->file), "mmapped-%s-%u.png", tag, tile);
                }
                n++;
                u += per_tile;
                tile++;
            } while (u < units);
        }
    }
    /* Ruby's object pages, one row of slots per page, when the dump has them */
    if (o->owner_types && v->n_ruby_pages && !o->page_change) {
        uint32_t slots = 0;
        uint64_t rows_per_tile = PTMD_MAX_IMAGE_ROWS / 2, r;
        size_t i;
        for (i = 0; i < v->n_ruby_pages; i++) {
            uint64_t s = (v->ruby_pages[i].end - v->ruby_pages[i].start) /
                         (v->ruby_pages[i].stride ? v->ruby_pages[i].stride : 1);
            if (s > slots) slots = (uint32_t)s;
        }
        if (slots > 4096) slots = 4096;
        for (r = 0; r < v->n_ruby_pages; r += rows_per_tile) {
            uint64_t cnt = v->n_ruby_pages - r < rows_per_tile ? v->n_ruby_pages - r : rows_per_tile;
            if (out && n < max) {
                ptmd_image *im = &out[n];
                memset(im, 0, sizeof(*im));
                im->kind = PTMD_IMG_RUBY_PAGES;
                im->group = -2;
                im->tile = (uint32_t)(r / rows_per_tile);
                im->first_unit = r;
                im->n_units = cnt;
                im->cell = 2;
                im->per_row = slots;
                im->width = slots * 2;
                im->height = (uint32_t)cnt * 2;
                snprintf(im->file, sizeof(im->file), "ruby-pages-%u.png", im->tile);
            }
            n++;
        }
    }
    return n;
}

size_t ptmd_render_count(const ptmd_view *v, const ptmd_render_opts *o)
{
    size_t ng = groups_of(v, NULL, 0), n;
    group *gs = calloc(ng ? ng : 1, sizeof(group));
    if (!gs) return 0;
    groups_of(v, gs, ng);
    n = plan(v, o, gs, ng, NULL, 0);
    free(gs);
    return n;
}

long ptmd_render(const ptmd_view *v, const ptmd_page_usage *usage, const ptmd_render_opts *o, ptmd_image *images,
                 size_t max_images, ptmd_err *err)
{
    size_t n, i, ng = groups_of(v, NULL, 0);
    group *gs = calloc(ng ? ng : 1, sizeof(group));
    char path[4096];
    if (!gs) return ptmd_fail(err, PTMD_E_NOMEM, "out of memory");
    groups_of(v, gs, ng);
    n = plan(v, o, gs, ng, images, max_images);
    if (n > max_images) n = max_images;
    for (i = 0; i < n; i++) {
        const ptmd_image *im = &images[i];
        size_t bytes = (size_t)im->width * im->height, gi;
        uint8_t *px;
        const group *g = NULL;
        for (gi = 0; gi < ng; gi++)
            if (gs[gi].id == im->group) g = &gs[gi];
        px = calloc(bytes ? bytes : 1, 1);
        if (!px || (!g && im->kind != PTMD_IMG_RUBY_PAGES)) {
            free(px);
            free(gs);
            return ptmd_fail(err, PTMD_E_NOMEM, "out of memory for a %ux%u image", im->width, im->height);
        }
        if (im->kind == PTMD_IMG_PAGE_MAP || im->kind == PTMD_IMG_DIFF_MAP)
            paint_page_map(v, usage, im->kind == PTMD_IMG_DIFF_MAP ? o->page_change : NULL, g, im->first_unit,
                           im->first_unit + im->n_units, im->cell, px, im->width);
        else if (im->kind == PTMD_IMG_RUBY_PAGES)
            paint_ruby_pages(v, o->owner_types, im->first_unit, im->first_unit + im->n_units, px, im->width);
        else
            paint_byte_map(v, g, im->first_unit, im->first_unit + im->n_units, o->owner, im->kind == PTMD_IMG_OWNER_MAP,
                           px);
        snprintf(path, sizeof(path), "%s/%s", o->outdir, im->file);
        if (write_png(path, px, im->width, im->height, err) != 0) {
            free(px);
            free(gs);
            return -1;
        }
        free(px);
        progress(o, i + 1, n);
    }
    free(gs);
    return (long)n;
}
