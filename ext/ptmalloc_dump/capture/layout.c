/* The per-version layout table. Every entry was read off that release's malloc/malloc.c and
 * malloc/arena.c (USE_TCACHE, tunables on as distributions build it); the structures are the same on
 * x86-64 and aarch64 (LP64, a 4-byte lock). Checked against the DWARF of Debian's libc6-dbg for
 * 2.31, 2.36, 2.41 and 2.43 on both (script/glibc_layouts.rb) and of the running libc in every
 * compat row (spec/glibc_rules_spec.rb). */
#include "capture/layout.h"
#include "capture/arch.h"

/* struct malloc_state, 2.27 .. 2.42 (2.27 added have_fastchunks: "malloc: Use atomics for
 * have_fastchunks"; before that fastbinsY followed flags directly). */
#define MS_2_27                                                                                                        \
    .ms_mutex = 0, .ms_flags = 4, .ms_have_fastchunks = 8, .ms_fastbins = 16, .ms_top = 96, .ms_last_remainder = 104,  \
    .ms_bins = 112, .ms_binmap = 2144, .ms_next = 2160, .ms_next_free = 2168, .ms_attached_threads = 2176,             \
    .ms_system_mem = 2184, .ms_max_system_mem = 2192, .ms_size = 2200, .nfastbins = 10

/* struct malloc_par before 2.35. */
#define MP_2_27                                                                                                        \
    .mp_trim_threshold = 0, .mp_top_pad = 8, .mp_mmap_threshold = 16, .mp_arena_test = 24, .mp_arena_max = 32,         \
    .mp_hp_pagesize = PTMD_NONE, .mp_n_mmaps = 40, .mp_n_mmaps_max = 44, .mp_max_n_mmaps = 48,                         \
    .mp_no_dyn_threshold = 52, .mp_mmapped_mem = 56, .mp_max_mmapped_mem = 64, .mp_sbrk_base = 72,                     \
    .mp_tcache_bins = 80, .mp_tcache_max_bytes = 88, .mp_tcache_count = 96, .mp_tcache_unsorted_limit = 104,           \
    .mp_size = 112

/* 2.35 added thp_pagesize, hp_pagesize and hp_flags after arena_max (hugetlb tunables). */
#define MP_2_35                                                                                                        \
    .mp_trim_threshold = 0, .mp_top_pad = 8, .mp_mmap_threshold = 16, .mp_arena_test = 24, .mp_arena_max = 32,         \
    .mp_hp_pagesize = 48, .mp_n_mmaps = 60, .mp_n_mmaps_max = 64, .mp_max_n_mmaps = 68, .mp_no_dyn_threshold = 72,     \
    .mp_mmapped_mem = 80, .mp_max_mmapped_mem = 88, .mp_sbrk_base = 96, .mp_tcache_bins = 104,                         \
    .mp_tcache_max_bytes = 112, .mp_tcache_count = 120, .mp_tcache_unsorted_limit = 128, .mp_size = 136

/* 2.43 added enum malloc_thp_mode_t thp_mode after arena_max (4 bytes and a 4-byte hole), moving
 * every later field 8 bytes on ("malloc: Enable THP always support on hugetlb tunable");
 * tcache_bins is tcache_small_bins. */
#define MP_2_43                                                                                                        \
    .mp_trim_threshold = 0, .mp_top_pad = 8, .mp_mmap_threshold = 16, .mp_arena_test = 24, .mp_arena_max = 32,         \
    .mp_hp_pagesize = 56, .mp_n_mmaps = 68, .mp_n_mmaps_max = 72, .mp_max_n_mmaps = 76, .mp_no_dyn_threshold = 80,     \
    .mp_mmapped_mem = 88, .mp_max_mmapped_mem = 96, .mp_sbrk_base = 104, .mp_tcache_bins = 112,                        \
    .mp_tcache_max_bytes = 120, .mp_tcache_count = 128, .mp_tcache_unsorted_limit = 136, .mp_size = 144

/* heap_info: 2.35 added pagesize (hugetlb arenas), growing it from 32 to 48 bytes. */
#define HI_2_27                                                                                                        \
    .hi_ar_ptr = 0, .hi_prev = 8, .hi_size = 16, .hi_mprotect_size = 24, .hi_pagesize = PTMD_NONE, .hi_size_total = 32
#define HI_2_35                                                                                                        \
    .hi_ar_ptr = 0, .hi_prev = 8, .hi_size = 16, .hi_mprotect_size = 24, .hi_pagesize = 32, .hi_size_total = 48

/* tcache_perthread_struct: char counts[64] until 2.29, uint16_t since 2.30 ("malloc: make
 * tcache counts uint16_t"). */
#define TC_U8                                                                                                          \
    .tcache_bins = 64, .tcache_large_bins = 0, .tcache_count_width = 1, .tcache_counts_are_slots = 0,                  \
    .tcache_entries_off = 64, .tcache_struct_size = 576
#define TC_U16                                                                                                         \
    .tcache_bins = 64, .tcache_large_bins = 0, .tcache_count_width = 2, .tcache_counts_are_slots = 0,                  \
    .tcache_entries_off = 128, .tcache_struct_size = 640

/* 2.42: tcache_perthread_struct holds num_slots[76] (free slots left, counting down from
 * mp_.tcache_count) and 76 entries: 64 small bins by exact size and 12 large bins by power of two,
 * each large list sorted by size ("malloc: add large tcache bins"). mp_.tcache_bins became
 * tcache_small_bins at the same offset. */
#define TC_2_42                                                                                                        \
    .tcache_bins = 64, .tcache_large_bins = 12, .tcache_count_width = 2, .tcache_counts_are_slots = 1,                 \
    .tcache_entries_off = 152, .tcache_struct_size = 760

/* 2.43: fastbins removed from malloc_state ("malloc: Remove fastbin infrastructure"): top follows
 * flags. */
#define MS_2_43                                                                                                        \
    .ms_mutex = 0, .ms_flags = 4, .ms_have_fastchunks = PTMD_NONE, .ms_fastbins = PTMD_NONE, .ms_top = 8,              \
    .ms_last_remainder = 16, .ms_bins = 24, .ms_binmap = 2056, .ms_next = 2072, .ms_next_free = 2080,                  \
    .ms_attached_threads = 2088, .ms_system_mem = 2096, .ms_max_system_mem = 2104, .ms_size = 2112, .nfastbins = 0

/* struct pthread (nptl/descr.h): its `list` links have sat at the same offset from 2.27 to 2.43
 * (capture/arch.h: 0x2c0 on x86-64, 0xc0 on aarch64). The lists of
 * threads (stack_used, __stack_user) were libpthread's data until 2.34 moved them, adjacent, into
 * _rtld_global as _dl_stack_used and _dl_stack_user ("nptl: Move stack list variables into
 * _rtld_global"). */
#define PT_LIBPTHREAD .pthread_list = PTMD_PTHREAD_LIST, .thread_lists_in_rtld = 0
#define PT_RTLD .pthread_list = PTMD_PTHREAD_LIST, .thread_lists_in_rtld = 1

static const ptmd_layout layouts[] = {
    /* 2.27, 2.28: no tcache_entry.key */
    { .minor_from = 27,
      .minor_to = 28,
      MS_2_27,
      MP_2_27,
      PT_LIBPTHREAD,
      HI_2_27,
      TC_U8,
      .tcache_entry_has_key = 0,
      .tcache_key_is_random = 0,
      .safe_linking = 0 },
    /* 2.29: key (the owning tcache) added for double-free detection */
    { .minor_from = 29,
      .minor_to = 29,
      MS_2_27,
      MP_2_27,
      PT_LIBPTHREAD,
      HI_2_27,
      TC_U8,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 0,
      .safe_linking = 0 },
    { .minor_from = 30,
      .minor_to = 31,
      MS_2_27,
      MP_2_27,
      PT_LIBPTHREAD,
      HI_2_27,
      TC_U16,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 0,
      .safe_linking = 0 },
    /* 2.32: safe-linking of tcache and fastbin next pointers */
    { .minor_from = 32,
      .minor_to = 33,
      MS_2_27,
      MP_2_27,
      PT_LIBPTHREAD,
      HI_2_27,
      TC_U16,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 0,
      .safe_linking = 1 },
    /* 2.34: key becomes the random tcache_key */
    { .minor_from = 34,
      .minor_to = 34,
      MS_2_27,
      MP_2_27,
      PT_RTLD,
      HI_2_27,
      TC_U16,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 1,
      .safe_linking = 1 },
    { .minor_from = 35,
      .minor_to = 41,
      MS_2_27,
      MP_2_35,
      PT_RTLD,
      HI_2_35,
      TC_U16,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 1,
      .safe_linking = 1 },
    { .minor_from = 42,
      .minor_to = 42,
      MS_2_27,
      MP_2_35,
      PT_RTLD,
      HI_2_35,
      TC_2_42,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 1,
      .safe_linking = 1 },
    /* 2.43: no fastbins; thp_mode in mp_; `tcache` points at __tcache_dummy instead of NULL and
     * tcache_shutting_down is gone ("malloc: avoid need for tcache == NULL checks"); the tcache
     * is made lazily (first free, or _int_malloc's stash via tcache_init (av)); default fill 16;
     * mmapped chunks keep a trailing header slot and may sit in tcache ("malloc: Change mmap chunk
     * layout", "malloc: Improve mmap interface"); mremap_chunk's mmapped_mem update forgets that
     * slot. */
    { .minor_from = 43,
      .minor_to = 43,
      MS_2_43,
      MP_2_43,
      PT_RTLD,
      HI_2_35,
      TC_2_42,
      .tcache_entry_has_key = 1,
      .tcache_key_is_random = 1,
      .safe_linking = 1,
      .tcache_dummy = 1,
      .tcache_struct_csize_int_malloc = 784 /* request2size (768) */,
      .tcache_holds_mmapped = 1,
      .mmap_chunk_tail_hdr = 1,
      .mremap_overcounts = 1,
      .heap_max_fixed = 1 },
};

const ptmd_layout *ptmd_layout_for(int major, int minor)
{
    size_t i;
    if (major != 2) return NULL;
    for (i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        if (minor >= layouts[i].minor_from && minor <= layouts[i].minor_to) return &layouts[i];
    return NULL;
}

int ptmd_layout_newest_minor(void)
{
    return layouts[sizeof(layouts) / sizeof(layouts[0]) - 1].minor_to;
}
