/* glibc malloc structure layouts (x86-64), one entry per range of glibc versions, in ONE place.
 *
 * Names mirror malloc/malloc.c and malloc/arena.c. Offsets are bytes from the start of each struct.
 *
 *   malloc_chunk ("malloc_chunk details" in malloc.c):
 *
 *     chunk-> +-----------------------------------------------+
 *             | mchunk_prev_size: size of previous chunk if free |  0
 *             +-----------------------------------------------+
 *             | mchunk_size: size | A(4) | M(2) | P(1)          |  8
 *       mem-> +-----------------------------------------------+
 *             | fd (free) / user data                         | 16   (tcache_entry.next, mangled >= 2.32)
 *             | bk (free) / user data                         | 24   (tcache_entry.key >= 2.29)
 *             | fd_nextsize, bk_nextsize (large free chunks)  | 32
 *             +-----------------------------------------------+
 *
 *   malloc_state (an arena), 2.27 .. 2.42:
 *
 *     0 mutex | 4 flags | 8 have_fastchunks | 16 fastbinsY[10] | 96 top | 104 last_remainder
 *     112 bins[254] | 2144 binmap[4] | 2160 next | 2168 next_free | 2176 attached_threads
 *     2184 system_mem | 2192 max_system_mem | sizeof 2200
 *
 *   malloc_state, 2.43 (no fastbins):
 *
 *     0 mutex | 4 flags | 8 top | 16 last_remainder | 24 bins[254] | 2056 binmap[4] | 2072 next
 *     2080 next_free | 2088 attached_threads | 2096 system_mem | 2104 max_system_mem | sizeof 2112
 *
 *   mmapped chunk (sysmalloc_mmap, _int_memalign; mmap_set_chunk from 2.43):
 *
 *     base ->  +-----------------------------------------------+  page aligned
 *              | lead (memalign'd chunks only)                 |
 *     chunk -> | prev_size: offset from base [| MMAP_HP, 2.43+] |
 *              | size | IS_MMAPPED                             |
 *              | user data ...                                 |
 *              +-----------------------------------------------+  up to 2.42: base + offset + size
 *              | next-chunk header slot (16 bytes, 2.43+)      |
 *     end ->   +-----------------------------------------------+  2.43: base + offset + size + 16
 *
 *   heap_info (a non-main heap, aligned to heap_max_size()):
 *
 *     0 ar_ptr | 8 prev | 16 size | 24 mprotect_size | [32 pagesize, 2.35+] | pad to 16
 *     sizeof 32 before 2.35, 48 since
 *
 *   tcache_perthread_struct:  counts[TCACHE_MAX_BINS] (uint8 < 2.30, uint16 since) then
 *                             entries[TCACHE_MAX_BINS] (tcache_entry *, pointing at mem)
 */
#ifndef PTMD_LAYOUT_H
#define PTMD_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "format/glibc.h"

/* Where a field is absent in a version, its offset is PTMD_NONE. */
#define PTMD_NONE ((size_t)-1)

typedef struct {
    int minor_from, minor_to; /* glibc 2.<from> .. 2.<to> inclusive */

    /* struct malloc_state */
    size_t ms_mutex, ms_flags, ms_have_fastchunks, ms_fastbins, ms_top, ms_last_remainder, ms_bins, ms_binmap, ms_next,
        ms_next_free, ms_attached_threads, ms_system_mem, ms_max_system_mem, ms_size;
    int nfastbins; /* 0 when the version has no fastbins */

    /* struct malloc_par (mp_) */
    size_t mp_trim_threshold, mp_top_pad, mp_mmap_threshold, mp_arena_test, mp_arena_max, mp_hp_pagesize, mp_n_mmaps,
        mp_n_mmaps_max, mp_max_n_mmaps, mp_no_dyn_threshold, mp_mmapped_mem, mp_max_mmapped_mem, mp_sbrk_base,
        mp_tcache_bins, mp_tcache_max_bytes, mp_tcache_count, mp_tcache_unsorted_limit, mp_size;

    /* heap_info */
    size_t hi_ar_ptr, hi_prev, hi_size, hi_mprotect_size, hi_pagesize, hi_size_total;

    /* tcache */
    int tcache_bins;             /* TCACHE_MAX_BINS: bins that hold chunks by exact size class */
    int tcache_large_bins;       /* extra bins for large sizes (2.42+), 0 before */
    int tcache_count_width;      /* bytes per counts[] element */
    int tcache_counts_are_slots; /* 1 when the array holds free slots (num_slots) instead of counts */
    size_t tcache_entries_off;   /* offset of entries[] in tcache_perthread_struct */
    size_t tcache_struct_size;   /* sizeof (tcache_perthread_struct) */
    int tcache_entry_has_key;    /* 2.29+ */
    int tcache_key_is_random;    /* 2.34+: key == tcache_key, before: key == the tcache itself */
    int safe_linking;            /* 2.32+ */
    /* 2.43+: a thread without a live tcache has `tcache` pointing at the all-zero __tcache_dummy
     * in libc's read-only data (.inactive, or .disabled 8 bytes on), never NULL */
    int tcache_dummy;
    /* 2.43+: tcache_init (av) from _int_malloc asks _int_malloc for request2size (sizeof (struct)),
     * padding the request twice: the struct's chunk is this size (0 when it is never allocated so) */
    size_t tcache_struct_csize_int_malloc;
    /* 2.43+: __libc_free puts mmapped chunks into the large tcache bins (no !chunk_is_mmapped test) */
    int tcache_holds_mmapped;
    /* 2.43+: mmap_set_chunk: an mmapped chunk's size is mapping - offset - CHUNK_HDR_SZ (the last 16
     * bytes are a next-chunk header slot) and bit 0 of prev_size is MMAP_HP; before, size was
     * mapping - offset and prev_size the offset alone */
    int mmap_chunk_tail_hdr;
    /* 2.43: mremap_chunk adds new_size - size - offset to mp_.mmapped_mem, CHUNK_HDR_SZ more than the
     * mapping grew: mmapped_mem exceeds the mappings by 16 per remap, for good */
    int mremap_overcounts;
    /* heap_max_size () is HEAP_MAX_SIZE whatever mp_.hp_pagesize (2.42+: "malloc: Improve
     * arena_for_chunk()"); before, 4 * hp_pagesize when hugetlb arenas are set */
    int heap_max_fixed;

    /* struct pthread and the thread lists (threads.c) */
    size_t pthread_list;      /* offset of list_t list in struct pthread */
    int thread_lists_in_rtld; /* 2.34+: _dl_stack_used and _dl_stack_user, adjacent in _rtld_global */
} ptmd_layout;

/* The layout for glibc 2.<minor>, or NULL when the table has none. */
const ptmd_layout *ptmd_layout_for(int major, int minor);
/* Newest minor version the table knows. */
int ptmd_layout_newest_minor(void);

#endif
