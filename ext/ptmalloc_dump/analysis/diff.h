/* Comparing two dumps of one process: chunks kept, new and gone; pages by what changed on them. */
#ifndef PTMD_DIFF_H
#define PTMD_DIFF_H

#include "analysis/analysis.h"

/* What changed on a page of the newer dump, by what the page holds now (a list as in format.h). A page
 * is "mostly free" when free bytes (bins, caches, top) are more than half of it, "mostly live" when
 * in-use bytes are; either of the two new_* changes needs the page resident now and not so before. */
#define PTMD_PAGE_CHANGES(X)                                                                                           \
    X(PTMD_PCHG_UNCHANGED, 0, "unchanged")                                                                             \
    X(PTMD_PCHG_NEW_IN_USE, 1, "new_in_use") /* resident and mostly live now, not before (or was not there) */         \
    X(PTMD_PCHG_NEW_FREE_RESIDENT, 2,                                                                                  \
      "new_free_resident")               /* resident and mostly free now, not before, whatever it held */              \
    X(PTMD_PCHG_RELEASED, 3, "released") /* resident before, not now (nor swapped) */                                  \
    X(PTMD_PCHG_NEW_PAGE, 4, "new_page") /* a page the older dump did not have, neither of the above */
enum { PTMD_PAGE_CHANGES(PTMD_ENUM_CONSTANT) PTMD_PCHG_COUNT = 5 };
extern const char *const ptmd_page_change_names[PTMD_PCHG_COUNT];

typedef struct {
    uint64_t same_count, same_bytes; /* same address, size and state in both */
    uint64_t new_count, new_bytes;   /* only in the newer dump (as that address/size/state) */
    uint64_t gone_count, gone_bytes; /* only in the older dump */
    uint64_t pages[PTMD_PCHG_COUNT]; /* pages of the newer dump by change */
    uint64_t became_resident;        /* pages resident now that were not (or did not exist) */
} ptmd_diff_totals;

/* Index of the first chunk that differs in address, size or state between two dumps of one heap (the
 * shorter count when one is a prefix of the other), or -1 when both hold the same chunks. */
long ptmd_first_difference(const ptmd_view *a, const ptmd_view *b);

/* Classifies a page of the newer dump from its usage and flags now and, when the older dump has the page,
 * then (ua NULL: it did not). */
uint8_t ptmd_page_change(const ptmd_page_usage *ua, uint8_t fa, const ptmd_page_usage *ub, uint8_t fb,
                         uint64_t page_size);

/* change[0 .. b->n_pages): a PTMD_PCHG_* per page of b. */
void ptmd_diff(const ptmd_view *a, const ptmd_page_usage *ua, const ptmd_view *b, const ptmd_page_usage *ub,
               ptmd_diff_totals *t, uint8_t *change);

#endif
