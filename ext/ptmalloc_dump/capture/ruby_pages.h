/* Ruby's object pages found by their structure, without asking the GC (capture/ruby_pages.c). */
#ifndef PTMD_RUBY_PAGES_H
#define PTMD_RUBY_PAGES_H

#include "format/ptmd.h"
#include "capture/procfs.h"
#include "capture/scratch.h"

/* How this Ruby lays out a page, learned when the extension loads from the pages the GC lists
 * (ptmd_ruby_pages_learn) and checked there against every one of them: which word of the struct
 * holds the first slot's address, where its slot size and slot count are, and where its node in the
 * GC's list of pages is. */
typedef struct {
    uint64_t page_size;                  /* GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE]: the alignment of a body */
    uint64_t body_size;                  /* the bytes of a body: page_size, or less where malloc gives the
                                          * bodies (Ruby 2.7 and 3.0): its struct may follow within the alignment */
    uint32_t start_word;                 /* which word of struct heap_page holds the first slot's address */
    uint32_t const_stride;               /* the slot size of every page, or 0: ask stride_of */
    size_t (*stride_of)(uintptr_t slot); /* the slot size of the page holding slot (rb_gc_obj_slot_size) */
    uint32_t stride_at;                  /* byte offsets of the 16-bit slot size and slot count in the struct */
    uint32_t count_at;
    uint32_t node_word;               /* the word that begins the page's list node (ccan list: next, prev) */
    uint32_t start_mask;              /* while learning: words equal to the first slot's address on every page */
    uint32_t stride_mask, count_mask; /* while learning: 16-bit fields equal to the slot size, the count */
    uint32_t node_mask;               /* while learning: words whose next node points back at them */
    uint32_t pages_seen;
    ptmd_memreader mem;      /* while learning: a word that is no pointer is read without a fault */
    uint64_t brk_lo, brk_hi; /* while learning: the break's mappings ([heap]), first to last */
    int in_brk;              /* a page lies in the break's mapping (posix_memalign'd, Ruby 2.7): else
                              * the scan leaves malloc's main heap out */
    int bad;                 /* while learning: a page did not fit */
    int usable;
} ptmd_ruby_shape;

#define PTMD_RUBY_RECORD_WORDS 16     /* the words of struct heap_page read to know a page */
#define PTMD_RUBY_FIRST_SLOT_MAX 1024 /* the first slot lies past the header, within a slot or two */

/* The pointer a page body begins with could be its struct heap_page: 16-byte aligned (calloc'd)
 * and outside the body of body_size bytes (a list head that points at itself, as in TLS or any C
 * data, is none). */
static inline int ptmd_ruby_page_record_ok(uint64_t record, uint64_t body, uint64_t body_size)
{
    return record && !(record & 15) && !(record >= body && record - body < body_size);
}

/* Learning: one page as the GC lists it (its first and past-the-last slots, and its slot size). */
void ptmd_ruby_pages_learn(ptmd_ruby_shape *s, uint64_t start, uint64_t end, uint64_t stride);
/* After the last page: whether the shape fits them all. */
void ptmd_ruby_pages_learned(ptmd_ruby_shape *s);

/* Every page of Ruby's heap, by scanning the process's private anonymous memory at each page-size
 * boundary for a body that begins with a pointer to its struct heap_page; appends a ptmd_ruby_page
 * (start, end, stride) per page, by address. Allocates nothing (mmap-backed buffers, reads that
 * cannot fault). 0, or -1 with err set. */
int ptmd_ruby_pages_find(const ptmd_ruby_shape *s, ptmd_buf *pages, ptmd_err *err);

#endif
