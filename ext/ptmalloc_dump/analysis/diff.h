/* Comparing two dumps of one process: chunks kept, new and gone; pages by what changed on them. */
#ifndef PTMD_DIFF_H
#define PTMD_DIFF_H

#include "analysis/analysis.h"

/* What changed on a page of the newer dump. */
enum {
    PTMD_PCHG_UNCHANGED = 0,
    PTMD_PCHG_NEW_IN_USE = 1,       /* holds live data now, did not before (or was not there) */
    PTMD_PCHG_NEW_FREE_RESIDENT = 2,/* free but resident now, held live data before */
    PTMD_PCHG_RELEASED = 3,         /* resident before, not now */
    PTMD_PCHG_NEW_PAGE = 4,         /* a page the older dump did not have, holding no live data */
    PTMD_PCHG_COUNT = 5
};

typedef struct {
    uint64_t same_count, same_bytes;    /* same address, size and state in both */
    uint64_t new_count, new_bytes;      /* only in the newer dump (as that address/size/state) */
    uint64_t gone_count, gone_bytes;    /* only in the older dump */
    uint64_t pages[PTMD_PCHG_COUNT];    /* pages of the newer dump by change */
    uint64_t became_resident;           /* pages resident now that were not (or did not exist) */
} ptmd_diff_totals;

/* change[0 .. b->n_pages): a PTMD_PCHG_* per page of b. Returns 0, -1 when out of memory. */
int ptmd_diff(const ptmd_view *a, const ptmd_page_usage *ua, const ptmd_view *b, const ptmd_page_usage *ub,
              ptmd_diff_totals *t, uint8_t *change);

#endif
