/* What holds in every glibc the gem knows (x86-64), named as malloc/malloc.c and malloc/arena.c name
 * it: chunk header sizes and bits, the bin and tcache index rules, safe-linking, and the structural
 * steps (chunk2mem, fd, bk, bin_at, initial_top, heap_for_ptr) the walk takes. Shared by the capture
 * (which reads live chunks) and the analysis (which sorts recorded ones into bins). What changes
 * between versions is in capture/layout.h. */
#ifndef PTMD_GLIBC_H
#define PTMD_GLIBC_H

#include <stdint.h>

#define PTMD_SIZE_SZ 8
#define PTMD_CHUNK_HDR_SZ 16
#define PTMD_MALLOC_ALIGNMENT 16
#define PTMD_MALLOC_ALIGN_MASK 15
#define PTMD_MINSIZE 32

#define PTMD_PREV_INUSE 0x1
#define PTMD_IS_MMAPPED 0x2
#define PTMD_NON_MAIN_ARENA 0x4
#define PTMD_SIZE_BITS 0x7
#define PTMD_MMAP_HP 0x1 /* prev_size bit of an mmapped chunk on huge pages (2.43+) */

#define PTMD_NBINS 128
#define PTMD_NSMALLBINS 64
#define PTMD_MIN_LARGE_SIZE 1024                        /* (NSMALLBINS - SMALLBIN_CORRECTION) * MALLOC_ALIGNMENT */
#define PTMD_MAX_FAST_CHUNK 176                         /* request2size(MAX_FAST_SIZE = 160) */
#define PTMD_DEFAULT_HEAP_MAX_SIZE (64ul * 1024 * 1024) /* 2 * DEFAULT_MMAP_THRESHOLD_MAX on 64-bit */
#define PTMD_TCACHE_MAX_BINS_MAX 128

#define PTMD_NONCONTIGUOUS_BIT 0x2 /* malloc_state.flags */

static inline uint64_t ptmd_chunksize(uint64_t mchunk_size)
{
    return mchunk_size & ~(uint64_t)PTMD_SIZE_BITS;
}

/* malloc_chunk's fields, as offsets from the chunk (the "malloc_chunk details" diagram in layout.h) */
#define PTMD_MCHUNK_PREV_SIZE 0
#define PTMD_MCHUNK_SIZE 8
#define PTMD_MCHUNK_FD 16 /* also tcache_entry.next */
#define PTMD_MCHUNK_BK 24 /* also tcache_entry.key */
#define PTMD_MCHUNK_FD_NEXTSIZE 32
#define PTMD_MCHUNK_BK_NEXTSIZE 40

/* chunk2mem / mem2chunk */
static inline uint64_t ptmd_chunk2mem(uint64_t chunk)
{
    return chunk + PTMD_CHUNK_HDR_SZ;
}
static inline uint64_t ptmd_mem2chunk(uint64_t mem)
{
    return mem - PTMD_CHUNK_HDR_SZ;
}

/* bin_at (av, i): the fake chunk whose fd and bk are bins[2i-2] and bins[2i-1], for av's bins[] at
 * `bins` (an absolute address); initial_top (av) is bin_at (av, 1), the top of an arena never used. */
static inline uint64_t ptmd_bin_at(uint64_t bins, int i)
{
    return bins + (uint64_t)(i - 1) * 2 * PTMD_SIZE_SZ - PTMD_MCHUNK_FD;
}
static inline uint64_t ptmd_initial_top(uint64_t bins)
{
    return ptmd_bin_at(bins, 1);
}

/* The main arena's brk heap begins at mp_.sbrk_base, which is not 16-byte aligned where the break had
 * moved before malloc's first sbrk (glibc before 2.33 copies GLIBC_TUNABLES with sbrk); the dump then
 * records the heap from the boundary below, since chunk records hold sizes in multiples of 16. The
 * bytes between that boundary and sbrk_base, which glibc does not count in system_mem: */
static inline uint64_t ptmd_sbrk_pad(uint64_t heap_start, uint64_t sbrk_base)
{
    return sbrk_base > heap_start && sbrk_base - heap_start < PTMD_MALLOC_ALIGNMENT ? sbrk_base - heap_start : 0;
}

/* heap_for_ptr: the heap_info of a non-main arena's chunk (heaps are aligned to heap_max_size ()) */
static inline uint64_t ptmd_heap_for_ptr(uint64_t ptr, uint64_t heap_max)
{
    return ptr & ~(heap_max - 1);
}

/* Bin index of a free chunk of this size in the regular bins (smallbin_index / largebin_index_64). */
static inline int ptmd_bin_index(uint64_t size)
{
    if (size < PTMD_MIN_LARGE_SIZE) return (int)(size >> 4); /* SMALLBIN_CORRECTION is 0 */
    if ((size >> 6) <= 48) return 48 + (int)(size >> 6);
    if ((size >> 9) <= 20) return 91 + (int)(size >> 9);
    if ((size >> 12) <= 10) return 110 + (int)(size >> 12);
    if ((size >> 15) <= 4) return 119 + (int)(size >> 15);
    if ((size >> 18) <= 2) return 124 + (int)(size >> 18);
    return 126;
}
/* Fastbin index (fastbin_index). */
static inline int ptmd_fastbin_index(uint64_t size)
{
    return (int)(size >> 4) - 2;
}
/* chunk size of a small tcache bin (tidx2usize plus the header, rounded as request2size does) */
static inline uint64_t ptmd_tidx2csize(int idx)
{
    return (uint64_t)idx * PTMD_MALLOC_ALIGNMENT + PTMD_MINSIZE;
}

/* Safe-linking (2.32+): stored = (address of the field >> 12) ^ pointer. */
static inline uint64_t ptmd_reveal_ptr(uint64_t field_addr, uint64_t stored)
{
    return (field_addr >> 12) ^ stored;
}

#endif
