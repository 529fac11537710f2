/* The one palette of every map and of the report's legend: its layout (index -> colour) and the
 * base colours a legend shows. */
#ifndef PTMD_PALETTE_H
#define PTMD_PALETTE_H

#include <stdint.h>

#define PTMD_OWNER_MAX 16 /* owner categories (0 = no owner layer for this chunk) */

/* Palette layout (index -> colour), shared with the report's legend:
 *   0                       background
 *   1 + state*4 + shade*2 + dim       byte map, chunk states (shade: alternating neighbours,
 *                                      dim: page not resident)
 *   40 + class*2 + shared             page map classes (shared: still shared with a parent)
 *   64 + owner*4 + shade*2 + dim      owner map: in-use chunks by owner (owner 1..15), owner 0 = free
 * The Ruby pages map uses the owner colours of the object types for live slots, background for free. */
#define PTMD_PAL_STATE(st, shade, dim) (1 + (st)*4 + (shade)*2 + (dim))
#define PTMD_PAL_PAGE(pc, shared) (40 + (pc)*2 + (shared))
#define PTMD_PAL_OWNER(o, shade, dim) (64 + (o)*4 + (shade)*2 + (dim))
#define PTMD_PAL_DIFF(c) (128 + (c)) /* diff maps: diff.h's PTMD_PCHG_* */
#define PTMD_PAL_SIZE (128 + 8)

typedef struct {
    uint8_t r, g, b;
} ptmd_rgb;

/* The palette; built on first use. */
const ptmd_rgb *ptmd_palette(void);
/* Base colours a legend shows: states, page classes, owners. */
ptmd_rgb ptmd_state_color(int state);
ptmd_rgb ptmd_page_color(int page_class);
ptmd_rgb ptmd_owner_color(int owner);
ptmd_rgb ptmd_diff_color(int change);

#endif
