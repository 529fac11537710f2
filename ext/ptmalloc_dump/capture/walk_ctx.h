/* The walk's state and its primitives, which every walk file shares: the ptmd_walk context, the arena
 * being walked, the records, and the reads of the target's memory. Nothing here calls malloc; results
 * accumulate in mmap-backed buffers. */
#ifndef PTMD_WALK_CTX_H
#define PTMD_WALK_CTX_H

#include "format/format.h"
#include "capture/locate.h"
#include "capture/procfs.h"
#include "capture/scratch.h"
#include "capture/source.h"

typedef struct ptmd_walk {
    const ptmd_libc *lc;
    const ptmd_layout *L;
    ptmd_maps maps;
    ptmd_source src; /* where every read of the target's memory goes (source.h) */
    size_t page_size;
    uint64_t heap_max;   /* heap_max_size() of this process */
    uint64_t tcache_key; /* value of tcache_key when known */
    int have_tcache_key;
    int have_mp;
    uint64_t sbrk_base, n_mmaps, mmapped_mem, tcache_count_max, tcache_bins;

    /* results (records of format.h) */
    ptmd_buf arenas, heaps, chunks, anomalies, threads, pages;
    ptmd_buf gone;             /* uint64 struct pthread of each thread on glibc's lists that is not
                                * running: finished, its stack cached for reuse (in a fork child
                                * also the parent's other threads), whose TLS glibc keeps */
    ptmd_buf tcache_entries;   /* ptmd_tcache_entry: each tcache chunk and the thread holding it */
    int tcache_entries_failed; /* a tcache entry could not be recorded (mmap failed) */

    /* scratch */
    ptmd_buf lists; /* open-addressing table of list entries for one arena */
    size_t lists_cap, lists_used;
    ptmd_buf notes;       /* ptmd_free_note: the arena's chunks free by their bits (bins.c) */
    ptmd_buf note_index;  /* uint32 open-addressing index over them */
    ptmd_buf note_links;  /* ptmd_note_link, one per note */
    ptmd_buf large_notes; /* ptmd_large_note, one per note of a large chunk */
    size_t note_mask;
    ptmd_buf tcache_cands;   /* uint64 chunk addresses of possible tcache structs */
    ptmd_buf heap_order;     /* uint32 heap indices sorted by start */
    ptmd_buf ring;           /* uint64 arena addresses from main_arena along next (ptmd_arena_ring) */
    ptmd_buf exclude;        /* sorted {start, end} ranges that hold no malloc chunk (Ruby's pages) */
    uint64_t ruby_page_size; /* without a list of Ruby's pages: their size, to know them by their
                              * structure (0: not done) */
    int references;          /* scan in-use chunks for pointers to chunks */
    ptmd_buf refs;           /* ptmd_ref */
    ptmd_buf int_refs;       /* ptmd_ref: a word of `from` is a Fixnum of `to`'s user address */
    ptmd_buf inner_refs;     /* ptmd_ref: a word of `from` points into `to`'s user data past its start */
    uint64_t refs_ns;
    ptmd_buf cmap; /* the chunk-start map (refs.c) */
    size_t cmap_n;
    uint64_t cmap_words, cmap_lo, cmap_hi, cmap_span;
    ptmd_buf roots;           /* ptmd_root_rec (roots.c) */
    ptmd_buf root_refs;       /* ptmd_root_ref */
    ptmd_buf root_inner_refs; /* ptmd_root_ref: a word pointing into the chunk's user data past its start */
    ptmd_buf objects;         /* ptmd_root_rec: the loaded objects' writable segments */
    uint64_t tls_below;       /* how far below a struct pthread the static TLS blocks reach (x86-64) */
    uint64_t tls_above;       /* how far above it they reach (aarch64) */
    uint64_t roots_ns;
    uint64_t caller_frame;   /* the dump's outermost frame: the dumping thread's stack above it */
    uint64_t caller_regs[8]; /* that thread's callee-saved registers at the dump's entry */

    uint64_t lock_wait_ns;
    /* a list or the arena ring that glibc's own malloc_info() and mallinfo2() follow without any check
     * (fd or bk, aborting on a misaligned fastbin chunk) was found broken or too long by the walk:
     * they must not be called */
    int lists_unsafe;
    uint64_t list_entries; /* fastbin and bin entries followed, over every arena */
    uint32_t thread_count;
    int threads_complete;

    /* a fork snapshot's child: the threads its parent listed just before the fork (fork leaves the
     * child's own lists with the forking thread alone), or NULL to list them here */
    const ptmd_buf *given_threads;
    uint32_t given_thread_count;
    int given_threads_complete;
    /* and the loaded objects' writable segments with the static TLS reach, which the parent listed
     * too: dl_iterate_phdr takes the loader's lock, which another thread of the parent may have
     * held at the fork, and then the child would wait for ever */
    const ptmd_buf *given_objects;
    uint64_t given_tls_below, given_tls_above;
    const ptmd_buf *given_gone; /* and the descriptors of its threads that were not running */

    /* a fork snapshot's parent: the PTMD_PAGE_* flags of its anonymous mappings, read just before the
     * fork (capture/residency.c), sharing_taken once read */
    ptmd_buf sharing;       /* ptmd_sharing_range, sorted by start */
    ptmd_buf sharing_pages; /* one flags byte per page of those ranges */
    int sharing_taken;
    /* a fork snapshot's child: that parent, whose reading gives its pages' exclusivity, or NULL */
    const struct ptmd_walk *sharing_from;
} ptmd_walk;

/* Pages [start, end) of the parent's reading, their flags from sharing_pages[first]. */
typedef struct {
    uint64_t start, end, first;
} ptmd_sharing_range;

/* One arena as the walk sees it. */
typedef struct {
    uint32_t index;
    uintptr_t av;
    int main;
    uint64_t top, top_size, top_end;
    uint32_t first_heap, n_heaps; /* into w->heaps */
    uint64_t bound;               /* most chunks the arena's memory could hold */
    int maps_reloaded;            /* /proc/self/maps read again under this arena's lock */
    size_t fast_entries;
    int heaps_broken; /* the heap_info chain did not end well (a cycle, a bad heap_info) */
    int heaps_sorted; /* its heaps are in address order (the main arena's regions) */
} ptmd_arena_ctx;

int ptmd_walk_anomaly(ptmd_walk *w, uint32_t kind, uint64_t address, uint64_t detail, uint32_t arena);
/* Index of the chunk record starting at addr, or -1 (binary search over heaps, then chunks). */
long ptmd_walk_find_chunk(ptmd_walk *w, uint64_t addr);
int ptmd_walk_sort_heaps(ptmd_walk *w);
/* Unmaps the walk's buffers and closes its mappings and source. */
void ptmd_walk_release(ptmd_walk *w);

/* How far ahead of the chunk being read a pass over a heap asks for the heap's cache lines. Each
 * header is found from the one before, so the loads form one dependent chain that the hardware
 * prefetchers do not run ahead of: every line of the next PTMD_PREFETCH_AHEAD bytes is requested in
 * turn, and most headers are then already in cache when the chain reaches them. A chunk larger than
 * that costs one wait at its end. Prefetches never fault, so this is only ever done on this process's
 * own memory (a copy is read through its regions). */
#define PTMD_PREFETCH_AHEAD 2048
#define PTMD_CACHE_LINE 64

/* Requests the lines of [*ahead, min(p + PTMD_PREFETCH_AHEAD, end)) and moves *ahead past them. */
static inline void ptmd_prefetch_ahead(uint64_t *ahead, uint64_t p, uint64_t end)
{
    uint64_t lim = end - p > PTMD_PREFETCH_AHEAD ? p + PTMD_PREFETCH_AHEAD : end, q = *ahead < p ? p : *ahead;
    for (; q < lim; q += PTMD_CACHE_LINE) __builtin_prefetch((const void *)(uintptr_t)q);
    *ahead = q;
}

/* The walk's own mmap-backed buffers: what its release frees, and what the mmapped-chunk scan must
 * not take for chunks. One list, so that a buffer added to ptmd_walk is added to both. */
#define PTMD_WALK_BUFFERS(w)                                                                                           \
    &(w)->arenas, &(w)->heaps, &(w)->chunks, &(w)->anomalies, &(w)->threads, &(w)->pages, &(w)->lists,                 \
        &(w)->tcache_cands, &(w)->heap_order, &(w)->ring, &(w)->exclude, &(w)->refs, &(w)->int_refs, &(w)->cmap,       \
        &(w)->roots, &(w)->root_refs, &(w)->objects, &(w)->tcache_entries, &(w)->gone, &(w)->notes, &(w)->note_index,  \
        &(w)->note_links, &(w)->large_notes, &(w)->sharing, &(w)->sharing_pages, &(w)->inner_refs,                     \
        &(w)->root_inner_refs

#define PTMD_W_ARENA(w, i) PTMD_BUF_AT(&(w)->arenas, ptmd_arena_rec, i)
#define PTMD_W_HEAP(w, i) PTMD_BUF_AT(&(w)->heaps, ptmd_heap_rec, i)
#define PTMD_W_CHUNK(w, i) PTMD_BUF_AT(&(w)->chunks, ptmd_chunk_rec, i)

/* The target's memory, by what the caller knows of it. ptmd_mapped_* read memory checked to be mapped:
 * this process's in place behind one predictable branch (the hot chunk loop's reads stay inlined
 * loads, no call), a copy's through its regions. ptmd_guarded_* read memory that may vanish (or lie
 * outside a copy) through the source's table, and never fault. */

/* A word; 0 when a copy does not hold it. */
static inline uint64_t ptmd_mapped_word(ptmd_walk *w, uint64_t addr)
{
    uint64_t v;
    if (__builtin_expect(w->src.in_place, 1)) {
        __builtin_memcpy(&v, (const void *)(uintptr_t)addr, sizeof(v));
        return v;
    }
    return ptmd_source_rd64_slow(&w->src, addr);
}

/* A word, with w->src.in_place read once by the caller, for the chunk loop: the flag stays in a
 * register where it would be loaded again after every store of a record (Ruby's -fno-strict-aliasing
 * lets any store alias it). */
static inline uint64_t ptmd_mapped_word_as(ptmd_walk *w, int in_place, uint64_t addr)
{
    uint64_t v;
    if (__builtin_expect(in_place, 1)) {
        __builtin_memcpy(&v, (const void *)(uintptr_t)addr, sizeof(v));
        return v;
    }
    return ptmd_source_rd64_slow(&w->src, addr);
}

/* A local pointer to [addr, addr + len), NULL when a copy does not hold it whole. */
static inline const void *ptmd_mapped_ptr(ptmd_walk *w, uint64_t addr, size_t len)
{
    if (__builtin_expect(w->src.in_place, 1)) return (const void *)(uintptr_t)addr;
    return ptmd_source_at(&w->src, addr, len);
}

/* len bytes; 0 when all were read. */
static inline int ptmd_guarded_copy(ptmd_walk *w, uint64_t addr, void *dst, size_t len)
{
    return ptmd_source_read(&w->src, addr, dst, len);
}

/* `each` bytes at each of addrs[0..n); ok[i] says which were read. */
static inline void ptmd_guarded_copy_many(ptmd_walk *w, const uintptr_t *addrs, size_t n, size_t each, void *dst,
                                          unsigned char *ok)
{
    ptmd_source_read_many(&w->src, addrs, n, each, dst, ok);
}

/* len bytes; -1 when a copy does not hold them whole. */
static inline int ptmd_mapped_copy(ptmd_walk *w, uint64_t addr, void *dst, size_t len)
{
    const void *p = ptmd_mapped_ptr(w, addr, len);
    if (!p) return -1;
    __builtin_memcpy(dst, p, len);
    return 0;
}

/* A live chunk's fields, by malloc.c's names (only on memory checked to be mapped) */
static inline uint64_t ptmd_mchunk_size(ptmd_walk *w, uint64_t p)
{
    return ptmd_mapped_word(w, p + PTMD_MCHUNK_SIZE);
}
static inline uint64_t ptmd_chunk_fd(ptmd_walk *w, uint64_t p)
{
    return ptmd_mapped_word(w, p + PTMD_MCHUNK_FD);
}
static inline uint64_t ptmd_chunk_bk(ptmd_walk *w, uint64_t p)
{
    return ptmd_mapped_word(w, p + PTMD_MCHUNK_BK);
}

#endif
