/* Heap pictures as indexed-colour PNGs (libpng): a page map (one cell per page, coloured by what the
 * page holds) and a byte map (one pixel per 16 bytes, coloured by chunk state or owner) per heap,
 * and one strip for all mmapped chunks. Every colour comes from the one palette (palette.h). */
#ifndef PTMD_RENDER_H
#define PTMD_RENDER_H

#include "analysis/analysis.h"
#include "format/ptmd.h"

/* one kind a line */
/* clang-format off */
#define PTMD_IMAGE_KINDS(X)                  \
    X(PTMD_IMG_PAGE_MAP, 1, "page_map")      \
    X(PTMD_IMG_BYTE_MAP, 2, "byte_map")      \
    X(PTMD_IMG_OWNER_MAP, 3, "owner_map")    \
    X(PTMD_IMG_RUBY_PAGES, 4, "ruby_pages")  \
    X(PTMD_IMG_DIFF_MAP, 5, "diff_map")
/* clang-format on */
enum { PTMD_IMAGE_KINDS(PTMD_ENUM_CONSTANT) PTMD_IMG_COUNT = 6 };
extern const char *const ptmd_image_kind_names[PTMD_IMG_COUNT];

#define PTMD_PAGE_MAP_CELLS_PER_ROW 256 /* 1 MiB of heap per row with 4 KiB pages */
#define PTMD_BYTE_MAP_BYTES_PER_PX 16
#define PTMD_BYTE_MAP_PAGES_PER_ROW 4 /* 1024 px wide with 4 KiB pages */

typedef struct {
    char file[96];                /* relative to the output directory */
    int kind;                     /* PTMD_IMG_* */
    int32_t group;                /* heap index, or -1 for the strip of all mmapped chunks */
    uint32_t tile;                /* 0-based tile number within the group's map */
    uint64_t first_unit, n_units; /* pages (page map) or 16-byte granules (byte map) of the group */
    uint32_t width, height;       /* pixels */
    uint32_t cell;                /* pixels per unit side (page map) or 1 (byte map) */
    uint32_t per_row;             /* units per row */
} ptmd_image;

typedef struct {
    const char *outdir;
    const uint8_t *owner;       /* per chunk owner category, or NULL: no owner maps */
    const uint8_t *owner_types; /* per Ruby object its owner category, or NULL: no Ruby pages map */
    uint64_t max_tile_pixels;   /* pixel budget of one image (0: default) */
    int progress_fd;            /* -1: quiet; else progress lines go here */
    const uint8_t *page_change; /* per page, diff.h's PTMD_PCHG_*: render diff maps only */
} ptmd_render_opts;

/* Renders every group. images receives up to max_images entries; returns the number written
 * (or -1 with err set). */
long ptmd_render(const ptmd_view *v, const ptmd_page_usage *usage, const ptmd_render_opts *o, ptmd_image *images,
                 size_t max_images, ptmd_err *err);

/* How many images ptmd_render will produce (to size the images array). */
size_t ptmd_render_count(const ptmd_view *v, const ptmd_render_opts *o);

#endif
