/* The one palette of every map and of the report's legend (layout in palette.h). */
#include "analysis/palette.h"
#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/diff.h"

static const ptmd_rgb state_colors[PTMD_ST_COUNT] = {
    { 0x3b, 0x73, 0xb9 }, /* in_use: blue */
    { 0x8e, 0x44, 0xad }, /* tcache: purple */
    { 0xc0, 0x39, 0x8b }, /* fastbin: magenta */
    { 0xf1, 0xc4, 0x0f }, /* unsorted: yellow */
    { 0xe6, 0x7e, 0x22 }, /* smallbin: orange */
    { 0xc0, 0x4b, 0x00 }, /* largebin: dark orange */
    { 0x27, 0xae, 0x60 }, /* top: green */
    { 0x16, 0xa0, 0x85 }, /* mmapped: teal */
    { 0x7f, 0x8c, 0x8d }, /* meta: grey */
};

static const ptmd_rgb page_colors[PTMD_PC_COUNT] = {
    { 0xc9, 0xd3, 0xdd }, /* untouched: pale blue-grey */
    { 0x2e, 0x6b, 0xb0 }, /* in_use: blue */
    { 0x8f, 0xb3, 0xdc }, /* mixed: light blue */
    { 0xff, 0x9f, 0x1c }, /* pinned: amber */
    { 0xe3, 0x1a, 0x1c }, /* free_resident: red, the bloat */
    { 0x2c, 0xa2, 0x5f }, /* top: green */
    { 0xf2, 0xf2, 0xf2 }, /* released: near white */
    { 0x8c, 0x56, 0x4b }, /* swapped: brown */
    { 0x5a, 0x64, 0x6a }, /* meta: dark grey */
};

/* Owner map colours (attribution.h's PTMD_OWN_*): 0 free (any free state), 1 string, 2 array, 3 hash,
 * 4 object ivars, 5 typed data, 6 iseq/imemo, 7 other Ruby, 8 Ruby object pages, 9 native. */
static const ptmd_rgb owner_colors[PTMD_OWNER_MAX] = {
    { 0xe4, 0xe4, 0xe4 }, { 0x1f, 0x5f, 0xb4 }, { 0x2c, 0xa0, 0x2c }, { 0x8e, 0x44, 0xad },
    { 0x17, 0xbe, 0xcf }, { 0xe3, 0x77, 0xc2 }, { 0xbc, 0xbd, 0x22 }, { 0x8c, 0x56, 0x4b },
    { 0x60, 0x70, 0x80 }, { 0xff, 0x7f, 0x0e }, { 0x55, 0x55, 0x55 }, { 0x55, 0x55, 0x55 },
    { 0x55, 0x55, 0x55 }, { 0x55, 0x55, 0x55 }, { 0x55, 0x55, 0x55 }, { 0x55, 0x55, 0x55 },
};

/* Diff maps: unchanged, newly in use, newly free but resident, released, a new page without live data. */
static const ptmd_rgb diff_colors[PTMD_PCHG_COUNT] = {
    { 0xdd, 0xe3, 0xea }, { 0x2e, 0x6b, 0xb0 }, { 0xe3, 0x1a, 0x1c }, { 0x9a, 0xd4, 0x8c }, { 0xf6, 0xc7, 0x8d },
};

/* The palette's ranges must not overlap (palette.h). */
_Static_assert(PTMD_PAL_STATE(PTMD_ST_COUNT - 1, 1, 1) < PTMD_PAL_PAGE(0, 0), "chunk states run into page classes");
_Static_assert(PTMD_PAL_PAGE(PTMD_PC_COUNT - 1, 1) < PTMD_PAL_OWNER(0, 0, 0), "page classes run into owners");
_Static_assert(PTMD_PAL_OWNER(PTMD_OWNER_MAX - 1, 1, 1) < PTMD_PAL_DIFF(0), "owners run into page changes");
_Static_assert(PTMD_PAL_DIFF(PTMD_PCHG_COUNT - 1) < PTMD_PAL_SIZE, "page changes run past the palette");
_Static_assert(PTMD_OWN_COUNT <= PTMD_OWNER_MAX, "more owner categories than owner colours");

static ptmd_rgb palette[PTMD_PAL_SIZE];
static int palette_ready;

static ptmd_rgb mix(ptmd_rgb a, ptmd_rgb b, int pct_b)
{
    ptmd_rgb r;
    r.r = (uint8_t)((a.r * (100 - pct_b) + b.r * pct_b) / 100);
    r.g = (uint8_t)((a.g * (100 - pct_b) + b.g * pct_b) / 100);
    r.b = (uint8_t)((a.b * (100 - pct_b) + b.b * pct_b) / 100);
    return r;
}

const ptmd_rgb *ptmd_palette(void)
{
    static const ptmd_rgb white = { 255, 255, 255 }, black = { 0, 0, 0 };
    int i, s, d;
    if (palette_ready) return palette;
    palette[0] = white;
    for (i = 0; i < PTMD_ST_COUNT; i++)
        for (s = 0; s < 2; s++)
            for (d = 0; d < 2; d++) {
                ptmd_rgb c = s ? mix(state_colors[i], white, 28) : state_colors[i];
                palette[PTMD_PAL_STATE(i, s, d)] = d ? mix(c, white, 65) : c;
            }
    for (i = 0; i < PTMD_PC_COUNT; i++) {
        palette[PTMD_PAL_PAGE(i, 0)] = page_colors[i];
        palette[PTMD_PAL_PAGE(i, 1)] = mix(page_colors[i], black, 35);
    }
    for (i = 0; i < PTMD_OWNER_MAX; i++)
        for (s = 0; s < 2; s++)
            for (d = 0; d < 2; d++) {
                ptmd_rgb c = s ? mix(owner_colors[i], white, 28) : owner_colors[i];
                palette[PTMD_PAL_OWNER(i, s, d)] = d ? mix(c, white, 65) : c;
            }
    for (i = 0; i < PTMD_PCHG_COUNT; i++) palette[PTMD_PAL_DIFF(i)] = diff_colors[i];
    palette_ready = 1;
    return palette;
}

ptmd_rgb ptmd_state_color(int state)
{
    return state_colors[state];
}
ptmd_rgb ptmd_page_color(int pc)
{
    return page_colors[pc];
}
ptmd_rgb ptmd_owner_color(int owner)
{
    return owner_colors[owner];
}
ptmd_rgb ptmd_diff_color(int change)
{
    return diff_colors[change];
}
