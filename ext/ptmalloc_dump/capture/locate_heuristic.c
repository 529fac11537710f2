/* Finding malloc's globals without any symbol file, from the live process and libc's own image:
 *
 * - main_arena: libc initialises `main_arena.next = &main_arena`, which leaves a relative relocation
 *   (RELA or RELR) whose target minus its addend is the offset of `next`. Every such candidate must then
 *   look like an arena: empty bins pointing at themselves (fd == bk == the bin's own address - 16),
 *   the others pointing out of libc, `top` inside its heap, `system_mem` sane, a plausible mutex.
 *   Without the relocation the writable segment is scanned for the same structure.
 * - mp_: the struct in libc's writable segment whose sbrk_base starts the main heap, whose n_mmaps and
 *   mmapped_mem equal mallinfo2()'s hblks and hblkhd, and whose tcache settings are in range. While the
 *   main arena is contiguous its heap is the system_mem bytes ending at top's end; once sbrk has failed
 *   (NONCONTIGUOUS_BIT) top lies in a region mmapped in its place and sbrk_base is where the first of
 *   the arena's regions begins: at the start of the [heap] mapping, or at a page of an anonymous one
 *   when sbrk never worked, with a main-arena chunk (prev_size 0, PREV_INUSE, neither IS_MMAPPED nor
 *   NON_MAIN_ARENA) first.
 * - tcache_key and every thread's tcache are found during the walk, by structure (tcache.c), which
 *   also tells glibc 2.43's __tcache_dummy (all zero, inside libc's image) from a live tcache.
 * Field offsets come from the version's layout and are confirmed by these structural checks; a glibc
 * newer than the table is tried with the newest layout and accepted only if they pass. */
#define _GNU_SOURCE
#include "capture/locate_heuristic.h"
#include "capture/elfread.h"
#include "format/format.h"
#include "capture/procfs.h"
#include "capture/mallinfo.h"
#include "capture/source_self.h"

#include <malloc.h>
#include <string.h>

#define PTMD_MAX_CANDIDATES 64

typedef struct {
    uint64_t next_off;
    uint64_t found[PTMD_MAX_CANDIDATES];
    size_t n;
} reloc_ctx;

static void on_reloc(uint64_t vaddr, uint64_t addend, void *arg)
{
    reloc_ctx *c = arg;
    if (vaddr - addend == c->next_off && c->n < PTMD_MAX_CANDIDATES) c->found[c->n++] = addend;
}

/* Does av look like glibc's main_arena under layout L? Every bin is empty (fd == bk == the bin) or a
 * well-linked list leaving libc (fd->bk == bk->fd == the bin); min_empty empty bins are required
 * (more when there is no relocation witness). */
static int arena_shape(const ptmd_libc *lc, const ptmd_layout *L, ptmd_source *mem, const ptmd_maps *maps, uintptr_t av,
                       int min_empty, uint64_t *top_end, uint64_t *system_mem, uint32_t *flags)
{
    uint32_t mutex = UINT32_MAX;
    uint64_t top = 1, size;
    int i, self = 0;
    const ptmd_map *m;
    if (av < lc->rw_start || av + L->ms_size > lc->rw_end || (av & 7)) return 0;
    ptmd_source_get(mem, av + L->ms_mutex, &mutex, 4);
    if (mutex > 2) return 0;
    for (i = 1; i < PTMD_NBINS; i++) {
        uint64_t head = ptmd_bin_at(av + L->ms_bins, i), fd = 1, bk = 1;
        ptmd_source_get(mem, head + PTMD_MCHUNK_FD, &fd, 8);
        ptmd_source_get(mem, head + PTMD_MCHUNK_BK, &bk, 8);
        uint64_t back, fwd;
        if (fd == head && bk == head) {
            self++;
            continue;
        }
        if ((fd & 15) || (bk & 15) || !fd || !bk) return 0;
        if ((fd >= lc->rw_start && fd < lc->rw_end) || (bk >= lc->rw_start && bk < lc->rw_end)) return 0;
        if (ptmd_source_read(mem, fd + PTMD_MCHUNK_BK, &back, 8) != 0 || back != head) return 0;
        if (ptmd_source_read(mem, bk + PTMD_MCHUNK_FD, &fwd, 8) != 0 || fwd != head) return 0;
    }
    if (self < min_empty) return 0;
    ptmd_source_get(mem, av + L->ms_top, &top, 8);
    ptmd_source_get(mem, av + L->ms_system_mem, system_mem, 8);
    ptmd_source_get(mem, av + L->ms_flags, flags, 4);
    if (top == ptmd_initial_top(av + L->ms_bins)) { /* initial_top: a main arena never used */
        *top_end = 0;
        return *system_mem == 0;
    }
    if ((top & 15) || ptmd_source_read(mem, top + 8, &size, 8) != 0) return 0;
    size = ptmd_chunksize(size);
    m = ptmd_maps_find(maps, top);
    if (!m || size < PTMD_MINSIZE || top + size > m->end) return 0;
    /* system_mem need not be whole pages: see validate_once in arena.c */
    if (*system_mem < size || *system_mem > (1ull << 47)) return 0;
    *top_end = top + size;
    return 1;
}

static uintptr_t find_main_arena(const ptmd_libc *lc, const ptmd_layout *L, ptmd_source *mem, const ptmd_maps *maps,
                                 uint64_t *top_end, uint64_t *system_mem, uint32_t *flags)
{
    ptmd_elf_file f;
    ptmd_err ignored;
    reloc_ctx rc;
    uintptr_t hit = 0, av;
    size_t i, hits = 0;
    memset(&rc, 0, sizeof(rc));
    rc.next_off = L->ms_next;
    if (ptmd_elf_open(&f, lc->libc_path, &ignored) == 0) {
        ptmd_elf_relative_relocs(&f, on_reloc, &rc);
        ptmd_elf_close(&f);
    }
    for (i = 0; i < rc.n; i++) {
        av = lc->libc_base + rc.found[i];
        if (arena_shape(lc, L, mem, maps, av, 0, top_end, system_mem, flags)) {
            hit = av;
            hits++;
        }
    }
    if (hits == 1) return hit;
    /* no witness: the writable segment, word by word */
    hits = 0;
    for (av = (lc->rw_start + 7) & ~(uintptr_t)7; av + L->ms_size <= lc->rw_end; av += 8)
        if (arena_shape(lc, L, mem, maps, av, 16, top_end, system_mem, flags)) {
            hit = av;
            hits++;
        }
    return hits == 1 ? hit : 0;
}

/* Where the first region of a non-contiguous main arena can begin: see the head of this file. */
static int first_region_at(ptmd_source *mem, const ptmd_maps *maps, uint64_t sbrk_base)
{
    const ptmd_map *m = ptmd_maps_find(maps, sbrk_base);
    uint64_t first = sbrk_base + ((PTMD_MALLOC_ALIGNMENT - ((sbrk_base + PTMD_CHUNK_HDR_SZ) & PTMD_MALLOC_ALIGN_MASK)) &
                                  PTMD_MALLOC_ALIGN_MASK);
    uint64_t hdr[2];
    if (!m) return 0;
    if (m->kind == PTMD_MAPKIND_BRK ? sbrk_base - m->start >= PTMD_MALLOC_ALIGNMENT
                                    : m->kind != PTMD_MAPKIND_ANON || (sbrk_base & 4095) != 0)
        return 0;
    if (ptmd_source_read(mem, first, hdr, sizeof(hdr)) != 0) return 0;
    return hdr[0] == 0 && (hdr[1] & PTMD_SIZE_BITS) == PTMD_PREV_INUSE && ptmd_chunksize(hdr[1]) >= PTMD_MINSIZE;
}

/* mi: this process's mallinfo2(), which n_mmaps and mmapped_mem must equal; NULL for another process
 * or a core, where they must only agree with each other and their maxima. */
static int mp_shape(const ptmd_layout *L, uintptr_t mp, uint64_t top_end, uint64_t system_mem,
                    const ptmd_mallinfo2_rec *mi, int exact, uint32_t flags, ptmd_source *mem, const ptmd_maps *maps)
{
    uint64_t sbrk_base = 0, mmapped_mem = 0, mmap_threshold = UINT64_MAX, tcache_bins = 0, tcache_count = 0;
    uint64_t max_mmapped_mem = 0;
    int32_t n_mmaps = -1, max_n_mmaps = -1;
    ptmd_source_get(mem, mp + L->mp_sbrk_base, &sbrk_base, 8);
    ptmd_source_get(mem, mp + L->mp_n_mmaps, &n_mmaps, 4);
    ptmd_source_get(mem, mp + L->mp_mmapped_mem, &mmapped_mem, 8);
    ptmd_source_get(mem, mp + L->mp_mmap_threshold, &mmap_threshold, 8);
    ptmd_source_get(mem, mp + L->mp_tcache_bins, &tcache_bins, 8);
    ptmd_source_get(mem, mp + L->mp_tcache_count, &tcache_count, 8);
    if (n_mmaps < 0) return 0;
    if (mi) {
        if ((uint64_t)n_mmaps != mi->hblks) return 0;
        if (exact ? mmapped_mem != mi->hblkhd : (mmapped_mem & 0xffffffffu) != mi->hblkhd) return 0;
    } else {
        ptmd_source_get(mem, mp + L->mp_max_n_mmaps, &max_n_mmaps, 4);
        ptmd_source_get(mem, mp + L->mp_max_mmapped_mem, &max_mmapped_mem, 8);
        /* each mmapped chunk is whole pages (2.43's mremap adds 16 bytes per remap to the sum) */
        if (n_mmaps > max_n_mmaps || mmapped_mem > max_mmapped_mem || (mmapped_mem & 15) ||
            (n_mmaps == 0) != (mmapped_mem == 0) || mmapped_mem < (uint64_t)n_mmaps * 4096)
            return 0;
    }
    if (mmap_threshold > (64ull << 20) || tcache_bins > PTMD_TCACHE_MAX_BINS_MAX || tcache_count > 65535) return 0;
    if (top_end && (flags & PTMD_NONCONTIGUOUS_BIT)) return sbrk_base && first_region_at(mem, maps, sbrk_base);
    if (top_end) return sbrk_base <= top_end && top_end - sbrk_base == system_mem;
    return sbrk_base == 0;
}

static uintptr_t find_mp(const ptmd_libc *lc, const ptmd_layout *L, uint64_t top_end, uint64_t system_mem,
                         uint32_t flags, ptmd_source *mem, const ptmd_maps *maps, const ptmd_mallinfo2_rec *mi,
                         int exact)
{
    uintptr_t mp, hit = 0;
    size_t hits = 0;
    for (mp = (lc->rw_start + 7) & ~(uintptr_t)7; mp + L->mp_size <= lc->rw_end; mp += 8) {
        if (mp + L->mp_size > lc->main_arena && mp < lc->main_arena + L->ms_size) continue;
        if (mp_shape(L, mp, top_end, system_mem, mi, exact, flags, mem, maps)) {
            hit = mp;
            hits++;
        }
    }
    return hits == 1 ? hit : 0;
}

/* main_arena and mp_ by structure in mem (this process, or another's memory) with its mappings. */
static int locate_in(ptmd_libc *lc, ptmd_source *mem, const ptmd_maps *maps, const ptmd_mallinfo2_rec *mi, int exact)
{
    const ptmd_layout *L = lc->layout ? lc->layout : ptmd_layout_for(2, ptmd_layout_newest_minor());
    uint64_t top_end = 0, system_mem = 0;
    uint32_t flags = 0;
    uintptr_t av;
    if (lc->major != 2 || (lc->minor < 27) || !L) return 0;
    av = find_main_arena(lc, L, mem, maps, &top_end, &system_mem, &flags);
    if (!av) return 0;
    lc->main_arena = av;
    lc->mp = find_mp(lc, L, top_end, system_mem, flags, mem, maps, mi, exact);
    lc->tcache_key = 0;
    lc->tcache_dummy = 0;
    lc->tcache_tls = lc->thread_arena_tls = -1;
    lc->symbol_source = PTMD_SYMSRC_HEURISTIC;
    ptmd_strlcpy(lc->symbol_file, "", sizeof(lc->symbol_file));
    if (!lc->layout) lc->layout = L; /* newer than the table: the structure checks passed */
    return 1;
}

int ptmd_locate_heuristic_in(ptmd_libc *lc, ptmd_source *mem, const ptmd_maps *maps)
{
    return locate_in(lc, mem, maps, NULL, 0);
}

int ptmd_locate_heuristic(ptmd_libc *lc, ptmd_err *err)
{
    ptmd_source mem;
    ptmd_maps maps;
    ptmd_mallinfo2_rec mi;
    int found = 0, exact;
    if (lc->major != 2 || (lc->minor < 27)) return 0;
    memset(&maps, 0, sizeof(maps));
    if (ptmd_source_self(&mem, err) != 0) return 0;
    if (ptmd_maps_load(&maps, err) != 0) goto out;
    exact = ptmd_mallinfo(&mi);
    found = locate_in(lc, &mem, &maps, &mi, exact);
out:
    ptmd_maps_release(&maps);
    ptmd_source_release(&mem);
    return found;
}
