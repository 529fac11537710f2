/* The dump file format, shared by the writer and the reader. Documented field by field in doc/FORMAT.md.
 *
 *   file   := preamble section* end
 *   preamble (16 bytes): magic "PTMDUMP\0", u32 format_version, u32 endian mark 0x01020304
 *   section  := u32 type, u32 reserved (0), u64 count, u64 length, payload[length], zero pad to 8
 *   end      := a section of type PTMD_SEC_END whose payload is ptmd_footer; it is the last 56 bytes
 *
 * All integers are little-endian. Records are fixed-size structs (sizes asserted below).
 */
#ifndef PTMD_FORMAT_H
#define PTMD_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define PTMD_MAGIC "PTMDUMP" /* 8 bytes with the NUL */
#define PTMD_FORMAT_VERSION 1
#define PTMD_ENDIAN_MARK 0x01020304u
#define PTMD_FOOTER_MAGIC 0x454d5450u /* "PTME" */

/* Each enumeration of the file is one list of (constant, value, name): the enum is made from it
 * here, its names (format/names.c) and the Ruby constants (bindings/format_module.c) from the same
 * list. A list is applied to a macro X(constant, value, name). */
#define PTMD_ENUM_CONSTANT(constant, value, name) constant = (value),
#define PTMD_ENUM_NAME(constant, value, name) [value] = name,

/* names[value], or "unknown" for a value the list does not name (a file can hold any number). */
const char *ptmd_name_of(const char *const *names, size_t n, uint32_t value);
#define PTMD_NAME_OF(names, value) ptmd_name_of((names), sizeof(names) / sizeof((names)[0]), (uint32_t)(value))

/* The file's sections, in type order, one line each: X(constant, type, name, required, record, rule,
 * shape, view fields...). `record` is the struct of its records (unsigned char for a section of bytes),
 * `rule` what format/reader.c checks of it beyond its shape (or NULL), and the shape says how the
 * payload maps onto ptmd_view's fields (format/view.h):
 *   ONE, f              one record, count 1, at v->f
 *   RECORDS, f, n       v->n records at v->f
 *   PAIRS, f, len       key/value strings (u16 klen, key, u32 vlen, value), count 0
 *   TEXT, f, len        ASCII text, count = its length
 *   NAMES, f, len, n    n entries: u64 key, u32 kind, u32 len, name, zero pad to 8
 *   MAPPINGS, head, f, n, paths   a head, n records, then the bytes of the paths
 * The enum, the names, the reader's rules and dispatch, what the writer writes of a view
 * (format/view.c), PtmallocDump::Format::SECTIONS and the fuzzer's mutations are made from it. */
#define PTMD_REQUIRED 1
#define PTMD_SECTIONS(X)                                                                                               \
    X(PTMD_SEC_META, 1, "meta", PTMD_REQUIRED, ptmd_meta, NULL, ONE, meta)                                             \
    X(PTMD_SEC_STRINGS, 2, "strings", 0, unsigned char, NULL, PAIRS, strings, strings_len)                             \
    X(PTMD_SEC_MALLINFO2, 3, "mallinfo2", PTMD_REQUIRED, ptmd_mallinfo2_rec, NULL, ONE, mallinfo2)                     \
    X(PTMD_SEC_MALLOC_INFO, 4, "malloc_info", 0, unsigned char, NULL, TEXT, malloc_info, malloc_info_len)              \
    X(PTMD_SEC_ARENAS, 5, "arenas", PTMD_REQUIRED, ptmd_arena_rec, NULL, RECORDS, arenas, n_arenas)                    \
    X(PTMD_SEC_HEAPS, 6, "heaps", PTMD_REQUIRED, ptmd_heap_rec, NULL, RECORDS, heaps, n_heaps)                         \
    /* a chunk record without its address (implied: each heap's chunks tile it, in order, from heap.start) */          \
    X(PTMD_SEC_CHUNKS, 7, "chunks", PTMD_REQUIRED, uint64_t, NULL, RECORDS, chunk_words, n_chunks)                     \
    /* PTMD_PAGE_* flags, one byte per page */                                                                         \
    X(PTMD_SEC_PAGES, 8, "pages", PTMD_REQUIRED, uint8_t, NULL, RECORDS, pages, n_pages)                               \
    X(PTMD_SEC_THREADS, 9, "threads", 0, ptmd_thread_rec, NULL, RECORDS, threads, n_threads)                           \
    X(PTMD_SEC_ANOMALIES, 10, "anomalies", 0, ptmd_anomaly_rec, NULL, RECORDS, anomalies, n_anomalies)                 \
    X(PTMD_SEC_RUBY_META, 11, "ruby_meta", 0, ptmd_ruby_meta, NULL, ONE, ruby_meta)                                    \
    X(PTMD_SEC_RUBY_PAGES, 12, "ruby_pages", 0, ptmd_ruby_page, NULL, RECORDS, ruby_pages, n_ruby_pages)               \
    X(PTMD_SEC_RUBY_OBJECTS, 13, "ruby_objects", 0, ptmd_ruby_object, NULL, RECORDS, ruby_objects, n_ruby_objects)     \
    /* the objects' candidate pointer words, in object order */                                                        \
    X(PTMD_SEC_RUBY_WORDS, 14, "ruby_words", 0, uint64_t, NULL, RECORDS, ruby_words, n_ruby_words)                     \
    X(PTMD_SEC_RUBY_NAMES, 15, "ruby_names", 0, unsigned char, NULL, NAMES, ruby_names, ruby_names_len, n_ruby_names)  \
    /* chunk -> chunk pointers (references: true) */                                                                   \
    X(PTMD_SEC_REFS, 16, "refs", 0, ptmd_ref, NULL, RECORDS, refs, n_refs)                                             \
    /* bytes malloc_trim(0) released, per arena (trim_check: true) */                                                  \
    X(PTMD_SEC_TRIM_CHECK, 17, "trim_check", 0, uint64_t, NULL, RECORDS, trim_released, n_trim_released)               \
    X(PTMD_SEC_MAPPINGS, 18, "mappings", 0, ptmd_mapping_rec, NULL, MAPPINGS, mappings_head, mappings, n_mappings,     \
      mapping_paths)                                                                                                   \
    /* GC.stat's counts at the Ruby pass */                                                                            \
    X(PTMD_SEC_GC, 19, "gc", 0, ptmd_gc_rec, NULL, ONE, gc)                                                            \
    /* memory outside malloc scanned for chunk addresses, and root -> chunk pointers */                                \
    X(PTMD_SEC_ROOTS, 20, "roots", 0, ptmd_root_rec, NULL, RECORDS, roots, n_roots)                                    \
    X(PTMD_SEC_ROOT_REFS, 21, "root_refs", 0, ptmd_root_ref, NULL, RECORDS, root_refs, n_root_refs)                    \
    /* by address: code objects and the module defining them */                                                        \
    X(PTMD_SEC_RUBY_CODE, 22, "ruby_code", 0, ptmd_ruby_code, NULL, RECORDS, ruby_code, n_ruby_code)                   \
    /* resident bytes of each Ruby page's body (RUBY_PAGES order) */                                                   \
    X(PTMD_SEC_RUBY_PAGE_RSS, 23, "ruby_page_rss", 0, uint64_t, NULL, RECORDS, ruby_page_rss, n_ruby_page_rss)         \
    /* chunk -> chunk as a Ruby Integer ((address << 1) | 1) */                                                        \
    X(PTMD_SEC_INT_REFS, 26, "int_refs", 0, ptmd_ref, NULL, RECORDS, int_refs, n_int_refs)                             \
    /* the code records' modules, methods and paths */                                                                 \
    X(PTMD_SEC_RUBY_CODE_NAMES, 29, "ruby_code_names", 0, unsigned char, NULL, NAMES, ruby_code_names,                 \
      ruby_code_names_len, n_ruby_code_names)                                                                          \
    /* which thread's tcache holds each tcache chunk */                                                                \
    X(PTMD_SEC_TCACHE_ENTRIES, 36, "tcache_entries", 0, ptmd_tcache_entry, NULL, RECORDS, tcache_entries,              \
      n_tcache_entries)                                                                                                \
    /* the dump was taken from outside the process */                                                                  \
    X(PTMD_SEC_SOURCE, 40, "source", 0, ptmd_source_rec, check_source, ONE, source)                                    \
    /* a fork snapshot's parent, what it paused for */                                                                 \
    X(PTMD_SEC_SNAPSHOT, 41, "snapshot", 0, ptmd_snapshot_rec, check_snapshot, ONE, snapshot)                          \
    /* the Ruby object graph (graph: true): what it took and what it left out */                                       \
    X(PTMD_SEC_RUBY_GRAPH, 42, "ruby_graph", 0, ptmd_ruby_graph_rec, check_graph_rec, ONE, ruby_graph)                 \
    /* per object (RUBY_OBJECTS order), how many of RUBY_EDGES are its references */                                   \
    X(PTMD_SEC_RUBY_EDGE_COUNTS, 43, "ruby_edge_counts", 0, uint32_t, NULL, RECORDS, ruby_edge_counts,                 \
      n_ruby_edge_counts)                                                                                              \
    /* the objects each object references (what the GC marks from it), as RUBY_OBJECTS indices */                      \
    X(PTMD_SEC_RUBY_EDGES, 44, "ruby_edges", 0, uint32_t, NULL, RECORDS, ruby_edges, n_ruby_edges)                     \
    X(PTMD_SEC_RUBY_ROOTS, 45, "ruby_roots", 0, ptmd_ruby_root, NULL, RECORDS, ruby_roots, n_ruby_roots)               \
    /* names of references where Ruby knows one: instance variable, constant, Array index, Hash key */                 \
    X(PTMD_SEC_RUBY_EDGE_NAMES, 46, "ruby_edge_names", 0, ptmd_ruby_edge_name, NULL, RECORDS, ruby_edge_names,         \
      n_ruby_edge_names)                                                                                               \
    /* allocation tracing (PtmallocDump.trace_allocations): how it sampled */                                          \
    X(PTMD_SEC_ALLOC_TRACE, 47, "alloc_trace", 0, ptmd_alloc_trace_rec, check_alloc_trace_rec, ONE, alloc_trace)       \
    /* the traced stacks: each a run of RUBY_FRAMES, innermost first */                                                \
    X(PTMD_SEC_RUBY_STACKS, 48, "ruby_stacks", 0, ptmd_ruby_stack, NULL, RECORDS, ruby_stacks, n_ruby_stacks)          \
    X(PTMD_SEC_RUBY_FRAMES, 49, "ruby_frames", 0, ptmd_ruby_frame, NULL, RECORDS, ruby_frames, n_ruby_frames)          \
    /* the traced objects not yet freed, by address, and the stack that allocated each */                              \
    X(PTMD_SEC_RUBY_TRACED, 50, "ruby_traced", 0, ptmd_ruby_traced, NULL, RECORDS, ruby_traced, n_ruby_traced)         \
    /* the frames' paths, methods and owners */                                                                        \
    X(PTMD_SEC_RUBY_SITE_NAMES, 51, "ruby_site_names", 0, unsigned char, NULL, NAMES, ruby_site_names,                 \
      ruby_site_names_len, n_ruby_site_names)                                                                          \
    /* the allocation tracker (ptmalloc-dump --track): how it sampled, its own memory */                               \
    X(PTMD_SEC_NATIVE_TRACK, 52, "native_track", 0, ptmd_native_track_rec, check_native_track_rec, ONE, native_track)  \
    /* the sampled blocks not yet freed, by address, and the stack that allocated each */                              \
    X(PTMD_SEC_NATIVE_SAMPLES, 53, "native_samples", 0, ptmd_native_sample, NULL, RECORDS, native_samples,             \
      n_native_samples)                                                                                                \
    /* the stacks: each a run of NATIVE_PCS (innermost first) and a run of NATIVE_FRAMES (Ruby's, innermost first) */  \
    X(PTMD_SEC_NATIVE_STACKS, 54, "native_stacks", 0, ptmd_native_stack, NULL, RECORDS, native_stacks,                 \
      n_native_stacks)                                                                                                 \
    X(PTMD_SEC_NATIVE_PCS, 55, "native_pcs", 0, uint64_t, NULL, RECORDS, native_pcs, n_native_pcs)                     \
    X(PTMD_SEC_NATIVE_FRAMES, 56, "native_frames", 0, ptmd_ruby_frame, NULL, RECORDS, native_frames, n_native_frames)  \
    /* the Ruby frames' paths and methods */                                                                           \
    X(PTMD_SEC_NATIVE_NAMES, 57, "native_names", 0, unsigned char, NULL, NAMES, native_names, native_names_len,        \
      n_native_names)                                                                                                  \
    /* chunk -> chunk through a word pointing into the target's user data past its start (interior) */                 \
    X(PTMD_SEC_INNER_REFS, 58, "inner_refs", 0, ptmd_ref, NULL, RECORDS, inner_refs, n_inner_refs)                     \
    /* root -> chunk through a word pointing into the chunk's user data past its start */                              \
    X(PTMD_SEC_ROOT_INNER_REFS, 59, "root_inner_refs", 0, ptmd_root_ref, NULL, RECORDS, root_inner_refs,               \
      n_root_inner_refs)                                                                                               \
    /* the in-process dump's own mappings at the reading of the mappings, with their resident bytes */                 \
    X(PTMD_SEC_SCRATCH, 60, "scratch", 0, ptmd_scratch_rec, NULL, RECORDS, scratch, n_scratch)

#define PTMD_SECTION_CONSTANT(constant, value, ...) constant = (value),
#define PTMD_SECTION_ONE(...) +1
typedef enum { PTMD_SECTIONS(PTMD_SECTION_CONSTANT) PTMD_SEC_END = 0xffff } ptmd_section_type;
enum { PTMD_SEC_COUNT = 0 PTMD_SECTIONS(PTMD_SECTION_ONE) };
/* Bytes per record of a shape: fixed for ONE and RECORDS, free (0) for the others. */
#define PTMD_SHAPE_FIXED_ONE 1
#define PTMD_SHAPE_FIXED_RECORDS 1
#define PTMD_SHAPE_FIXED_PAIRS 0
#define PTMD_SHAPE_FIXED_TEXT 0
#define PTMD_SHAPE_FIXED_NAMES 0
#define PTMD_SHAPE_FIXED_MAPPINGS 0
#define PTMD_SHAPE_RECORD_SIZE(shape, record) (PTMD_SHAPE_FIXED_##shape * sizeof(record))
/* The section's name ("meta", "ruby_code_names", ...), or "unknown" for a type the list does not hold. */
const char *ptmd_section_name(uint32_t type);

/* Chunk states: the low 4 bits of ptmd_chunk_rec.word. */
#define PTMD_STATES(X)                                                                                                 \
    X(PTMD_ST_IN_USE, 0, "in_use")                                                                                     \
    X(PTMD_ST_TCACHE, 1, "tcache")   /* in some thread's tcache (looks in use to the arena) */                         \
    X(PTMD_ST_FASTBIN, 2, "fastbin") /* in a fastbin (looks in use too) */                                             \
    X(PTMD_ST_UNSORTED, 3, "unsorted")                                                                                 \
    X(PTMD_ST_SMALLBIN, 4, "smallbin")                                                                                 \
    X(PTMD_ST_LARGEBIN, 5, "largebin")                                                                                 \
    X(PTMD_ST_TOP, 6, "top")                                                                                           \
    X(PTMD_ST_MMAPPED, 7, "mmapped") /* a chunk of its own mapping: allocated */                                       \
    X(PTMD_ST_META, 8, "meta")       /* heap_info, the arena struct, fenceposts */
typedef enum { PTMD_STATES(PTMD_ENUM_CONSTANT) PTMD_ST_COUNT = 9 } ptmd_state;
extern const char *const ptmd_state_names[PTMD_ST_COUNT];

/* Allocated to the program: in use in an arena, or a chunk of its own mapping. */
static inline int ptmd_state_is_allocated(int state)
{
    return state == PTMD_ST_IN_USE || state == PTMD_ST_MMAPPED;
}
/* Free for the allocator: a tcache, a fastbin, a bin, or top. */
static inline int ptmd_state_is_free(int state)
{
    return state >= PTMD_ST_TCACHE && state <= PTMD_ST_TOP;
}

/* Chunk flags: bits 56..63 of ptmd_chunk_rec.word. The list gives each flag's bit within those 8 bits
 * (Chunk#flags in Ruby); PTMD_CF_WORD puts it where the word holds it. */
#define PTMD_CF_SHIFT 56
#define PTMD_CHUNK_FLAGS(X)                                                                                            \
    X(PTMD_CF_ANOMALY, 1u << 0, "anomaly")               /* an anomaly record names this chunk */                      \
    X(PTMD_CF_TCACHE_STRUCT, 1u << 1, "tcache_struct")   /* a thread's tcache_perthread_struct */                      \
    X(PTMD_CF_LAST_REMAINDER, 1u << 2, "last_remainder") /* the arena's last_remainder */                              \
    X(PTMD_CF_FREE_BIT, 1u << 3, "free_bit")             /* the next chunk's PREV_INUSE bit says free */
enum { PTMD_CHUNK_FLAGS(PTMD_ENUM_CONSTANT) };
#define PTMD_CF_WORD(flag) ((uint64_t)(flag) << PTMD_CF_SHIFT)
#define PTMD_CF_RAW_SHIFT 60 /* bits 60..62: the chunk's own P, M, A bits as found */
#define PTMD_SIZE_MASK 0x00fffffffffffff0ull

/* In memory a chunk record carries its address; in the file only `word` is stored. */
typedef struct {
    uint64_t addr; /* chunk address (not the user pointer: that is addr + 16) */
    uint64_t word; /* size (multiple of 16) | state | flags << 56 */
} ptmd_chunk_rec;

static inline uint64_t ptmd_rec_size(const ptmd_chunk_rec *r)
{
    return r->word & PTMD_SIZE_MASK;
}
static inline int ptmd_rec_state(const ptmd_chunk_rec *r)
{
    return (int)(r->word & 0xf);
}
static inline uint64_t ptmd_rec_raw_bits(const ptmd_chunk_rec *r)
{
    return (r->word >> PTMD_CF_RAW_SHIFT) & 7;
}
static inline int ptmd_rec_is_allocated(const ptmd_chunk_rec *r)
{
    return ptmd_state_is_allocated(ptmd_rec_state(r));
}
static inline void ptmd_rec_set_state(ptmd_chunk_rec *r, int st)
{
    r->word = (r->word & ~0xfull) | (uint64_t)st;
}

/* Per-page residency flags (the PAGES section): bit values */
#define PTMD_PAGE_FLAGS(X)                                                                                             \
    X(PTMD_PAGE_PRESENT, 1, "present")                  /* in RAM */                                                   \
    X(PTMD_PAGE_SWAPPED, 2, "swapped")                  /* in swap */                                                  \
    X(PTMD_PAGE_EXCLUSIVE, 4, "exclusive")              /* mapped by this process only (not shared copy-on-write) */   \
    X(PTMD_PAGE_FILE, 8, "file")                        /* file page or shared anonymous page */                       \
    X(PTMD_PAGE_SHARING_UNKNOWN, 16, "sharing_unknown") /* present; exclusive or not is unknown (FORMAT.md) */
enum { PTMD_PAGE_FLAGS(PTMD_ENUM_CONSTANT) };

#define PTMD_RESIDENCY_SOURCES(X) X(PTMD_RESIDENCY_PAGEMAP, 1, "pagemap") X(PTMD_RESIDENCY_MINCORE, 2, "mincore")
typedef enum { PTMD_RESIDENCY_SOURCES(PTMD_ENUM_CONSTANT) PTMD_RESIDENCY_COUNT = 3 } ptmd_residency_source;
extern const char *const ptmd_residency_source_names[PTMD_RESIDENCY_COUNT];

/* Symbol sources: how main_arena was found. */
#define PTMD_SYMBOL_SOURCES(X)                                                                                         \
    X(PTMD_SYMSRC_SYMTAB, 1, "symtab")       /* libc's own .symtab */                                                  \
    X(PTMD_SYMSRC_BUILD_ID, 2, "build_id")   /* <debugdir>/.build-id/xx/rest.debug */                                  \
    X(PTMD_SYMSRC_DEBUGLINK, 3, "debuglink") /* .gnu_debuglink name, CRC checked */                                    \
    X(PTMD_SYMSRC_HEURISTIC, 4, "heuristic") /* found by structure, no symbols */
enum { PTMD_SYMBOL_SOURCES(PTMD_ENUM_CONSTANT) PTMD_SYMSRC_COUNT = 5 };
extern const char *const ptmd_symbol_source_names[PTMD_SYMSRC_COUNT];

/* ptmd_meta.flags: bit values */
#define PTMD_META_FLAGS(X)                                                                                             \
    X(PTMD_MF_SAFE_LINKING, 1u << 0, "safe_linking")                                                                   \
    X(PTMD_MF_TCACHE, 1u << 1, "tcache")                                                                               \
    X(PTMD_MF_TCACHE_KEY, 1u << 2, "tcache_key")             /* tcache_key was read */                                 \
    X(PTMD_MF_MP, 1u << 3, "mp")                             /* mp_ was read */                                        \
    X(PTMD_MF_FORK_CHILD, 1u << 4, "fork_child")             /* written by a forked snapshot child */                  \
    X(PTMD_MF_THREADS_COMPLETE, 1u << 5, "threads_complete") /* every thread in /proc/self/task was found */           \
    X(PTMD_MF_NO_ORACLES, 1u << 6,                                                                                     \
      "no_oracles") /* malloc_info/mallinfo2 not captured: a list is corrupt, or bit 9, 10 or 11 */                    \
    X(PTMD_MF_MALLINFO32, 1u << 7, "mallinfo32") /* glibc < 2.33: MALLINFO2 holds mallinfo()'s low 32 bits */          \
    X(PTMD_MF_MREMAP_OVERCOUNT, 1u << 8,                                                                               \
      "mremap_overcount") /* 2.43: mmapped_mem 16 bytes too many per mremap_chunk */                                   \
    X(PTMD_MF_ORACLES_OUTGROWN, 1u << 9, "oracles_outgrown") /* malloc_info's output outgrew its stream: not kept */   \
    X(PTMD_MF_ORACLES_OFF, 1u << 10, "oracles_off")          /* dumped with oracles: false */                          \
    X(PTMD_MF_ORACLES_SKIPPED, 1u << 11,                                                                               \
      "oracles_skipped") /* oracles: :auto, and the lists held more than it follows */                                 \
    X(PTMD_MF_SHARING_BEFORE_FORK, 1u << 12,                                                                           \
      "sharing_before_fork") /* a snapshot's EXCLUSIVE bits are its parent's, read before the fork */
enum { PTMD_META_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t pid;
    uint64_t ppid;
    int64_t time_sec;
    uint64_t time_nsec;
    uint64_t page_size;
    uint64_t main_arena;
    uint64_t mp_addr;
    uint64_t libc_base;
    uint64_t sbrk_base;
    uint64_t heap_max_size;
    uint64_t mmap_threshold;
    uint64_t trim_threshold;
    uint64_t top_pad;
    uint64_t arena_max;
    uint64_t arena_test;
    uint64_t n_mmaps;     /* mp_.n_mmaps */
    uint64_t mmapped_mem; /* mp_.mmapped_mem */
    uint64_t max_mmapped_mem;
    uint64_t tcache_bins;
    uint64_t tcache_count;
    uint64_t tcache_max_bytes;
    uint64_t walk_ns; /* from the mallinfo capture to the end of the walk */
    uint64_t residency_ns;
    uint64_t lock_wait_ns;     /* time spent waiting for arena locks */
    uint32_t symbol_source;    /* PTMD_SYMSRC_* */
    uint32_t residency_source; /* PTMD_RESIDENCY_* */
    uint32_t glibc_major;
    uint32_t glibc_minor;
    uint32_t flags;        /* PTMD_MF_* */
    uint32_t thread_count; /* entries of /proc/self/task at the walk */
} ptmd_meta;

/* Whether the dump knows if a present page (PTMD_PAGE_* flags f) is mapped by the process alone: from
 * pagemap (mincore cannot tell), in a fork snapshot from its parent's reading before the fork, and not
 * marked PTMD_PAGE_SHARING_UNKNOWN. */
static inline int ptmd_page_sharing_known(const ptmd_meta *m, uint8_t f)
{
    if (!m || m->residency_source != PTMD_RESIDENCY_PAGEMAP || !(f & PTMD_PAGE_PRESENT)) return 0;
    if ((m->flags & PTMD_MF_FORK_CHILD) && !(m->flags & PTMD_MF_SHARING_BEFORE_FORK)) return 0;
    return !(f & PTMD_PAGE_SHARING_UNKNOWN);
}
/* A present page known to be still shared copy-on-write with another process (a parent, a child). */
static inline int ptmd_page_shared(const ptmd_meta *m, uint8_t f)
{
    return ptmd_page_sharing_known(m, f) && !(f & PTMD_PAGE_EXCLUSIVE);
}

typedef struct {
    uint64_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
} ptmd_mallinfo2_rec;

/* ptmd_arena_rec.flags: bit values */
#define PTMD_ARENA_FLAGS(X)                                                                                            \
    X(PTMD_AF_MAIN, 1u << 0, "main")                                                                                   \
    X(PTMD_AF_NONCONTIGUOUS, 1u << 1, "noncontiguous")                                                                 \
    X(PTMD_AF_HAVE_FASTCHUNKS, 1u << 2, "have_fastchunks")                                                             \
    X(PTMD_AF_LOCKED, 1u << 3, "locked")   /* walked under its own mutex */                                            \
    X(PTMD_AF_CORRUPT, 1u << 4, "corrupt") /* the walk of this arena recorded anomalies */
enum { PTMD_ARENA_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t address;
    uint64_t top;
    uint64_t top_size;
    uint64_t last_remainder;
    uint64_t system_mem;
    uint64_t max_system_mem;
    uint64_t next;
    uint64_t next_free;
    uint64_t attached_threads;
    uint32_t flags;       /* PTMD_AF_* */
    uint32_t glibc_flags; /* malloc_state.flags */
    uint32_t first_heap;
    uint32_t n_heaps;
} ptmd_arena_rec;

#define PTMD_HEAP_KINDS(X)                                                                                             \
    X(PTMD_HEAP_SBRK, 1, "sbrk")                   /* the main arena's brk region */                                   \
    X(PTMD_HEAP_MMAP_HEAP, 2, "mmap_heap")         /* a non-main arena's heap_info region */                           \
    X(PTMD_HEAP_MMAPPED_CHUNK, 3, "mmapped_chunk") /* the mapping of one mmapped chunk */                              \
    X(PTMD_HEAP_MAIN_MMAP, 4, "main_mmap")         /* a region mmapped for the main arena when sbrk failed */
enum { PTMD_HEAP_KINDS(PTMD_ENUM_CONSTANT) PTMD_HEAP_KIND_COUNT = 5 };
extern const char *const ptmd_heap_kind_names[PTMD_HEAP_KIND_COUNT];
#define PTMD_HF_TRUNCATED (1u << 0) /* the chunk walk stopped before the end */
#define PTMD_NO_ARENA 0xffffffffu

typedef struct {
    uint64_t start;         /* first byte accounted to the heap */
    uint64_t end;           /* end of the walked region */
    uint64_t reserved_end;  /* end of the address space reserved for it */
    uint64_t prev;          /* heap_info.prev (mmap heaps) */
    uint64_t mprotect_size; /* heap_info.mprotect_size (mmap heaps) */
    uint64_t first_chunk;   /* index into the chunk table */
    uint64_t n_chunks;
    uint64_t first_page; /* index into the page table */
    uint64_t n_pages;
    uint64_t page_base; /* address of the first page */
    uint32_t arena;     /* index into the arena table, PTMD_NO_ARENA for mmapped chunks */
    uint32_t kind;      /* PTMD_HEAP_* */
    uint32_t flags;     /* PTMD_HF_* */
    uint32_t reserved;
} ptmd_heap_rec;

/* ptmd_thread_rec.flags: bit values */
#define PTMD_THREAD_FLAGS(X)                                                                                           \
    X(PTMD_TF_CURRENT, 1u << 0, "current") /* the thread that wrote the dump */                                        \
    X(PTMD_TF_TLS, 1u << 1, "tls")         /* tcache pointer read from the thread's TLS */                             \
    X(PTMD_TF_SCAN, 1u << 2, "scan")       /* tcache found by structure among in-use chunks */                         \
    X(PTMD_TF_EXITING, 1u << 3, "exiting") /* emptying its tcache on exit while it was read */
enum { PTMD_THREAD_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t pthread; /* struct pthread (0 when unknown) */
    uint64_t tcache;  /* tcache_perthread_struct user address, 0 if none */
    uint64_t arena;   /* thread_arena, 0 if unknown */
    uint64_t tcache_bytes;
    uint32_t tid;   /* 0 when unknown */
    uint32_t flags; /* PTMD_TF_* */
    uint32_t tcache_count;
    uint32_t reserved;
} ptmd_thread_rec;

#define PTMD_ANOMALY_KINDS(X)                                                                                          \
    X(PTMD_AN_BAD_SIZE, 1, "bad_size")                  /* a chunk size that is impossible here */                     \
    X(PTMD_AN_PAST_END, 2, "past_end")                  /* a chunk that runs past its heap */                          \
    X(PTMD_AN_FREE_NOT_IN_BIN, 3, "free_not_in_bin")    /* free by the PREV_INUSE bit, in no list */                   \
    X(PTMD_AN_LIST_NOT_CHUNK, 4, "list_not_chunk")      /* a list entry that is no chunk of the walk */                \
    X(PTMD_AN_LIST_IN_USE, 5, "list_in_use")            /* a bin entry whose chunk is marked in use */                 \
    X(PTMD_AN_FASTBIN_FREE, 6, "fastbin_free")          /* a fastbin/tcache entry marked free */                       \
    X(PTMD_AN_BAD_POINTER, 7, "bad_pointer")            /* a list pointer outside the arena or misaligned */           \
    X(PTMD_AN_LIST_CYCLE, 8, "list_cycle")              /* a list longer than the heap could hold */                   \
    X(PTMD_AN_LIST_LINK, 9, "list_link")                /* fd->bk != chunk */                                          \
    X(PTMD_AN_WRONG_BIN, 10, "wrong_bin")               /* a size that does not belong to its bin */                   \
    X(PTMD_AN_DUPLICATE, 11, "duplicate")               /* a chunk in two lists */                                     \
    X(PTMD_AN_TOP, 12, "top")                           /* top does not end its heap */                                \
    X(PTMD_AN_NONCONTIGUOUS, 13, "noncontiguous")       /* no longer recorded: its regions are walked */               \
    X(PTMD_AN_SYSTEM_MEM, 14, "system_mem")             /* system_mem differs from the walked size */                  \
    X(PTMD_AN_HEAP_INFO, 15, "heap_info")               /* a heap_info that does not check out */                      \
    X(PTMD_AN_TCACHE_COUNT, 16, "tcache_count")         /* a tcache chain longer or shorter than its count */          \
    X(PTMD_AN_TCACHE_KEY, 17, "tcache_key")             /* a tcache entry whose key is wrong */                        \
    X(PTMD_AN_MMAPPED_MISMATCH, 18, "mmapped_mismatch") /* mmapped chunks differ from mp_'s counts */                  \
    X(PTMD_AN_WRONG_ARENA, 19, "wrong_arena")           /* NON_MAIN_ARENA bit disagrees with the arena */              \
    X(PTMD_AN_NEXTSIZE, 20, "nextsize")                 /* a large bin's fd_nextsize/bk_nextsize ring is broken */     \
    X(PTMD_AN_ARENA_RING, 21, "arena_ring")             /* the arenas' next links do not lead back to main_arena */
typedef enum { PTMD_ANOMALY_KINDS(PTMD_ENUM_CONSTANT) PTMD_AN_COUNT = 22 } ptmd_anomaly_kind;
extern const char *const ptmd_anomaly_names[PTMD_AN_COUNT];

typedef struct {
    uint64_t address;
    uint64_t detail; /* kind-specific: the bad value, expected size, ... */
    uint32_t kind;   /* ptmd_anomaly_kind */
    uint32_t arena;  /* arena index or PTMD_NO_ARENA */
} ptmd_anomaly_rec;

/* One chunk of a thread's tcache list (TCACHE_ENTRIES), in the order the walk followed them: thread by
 * thread, each bin from its head. */
typedef struct {
    uint32_t chunk;    /* index into the chunk table: a chunk of state tcache */
    uint32_t thread;   /* index into THREADS: the thread whose tcache_perthread_struct lists it */
    uint16_t bin;      /* the tcache bin (tidx) */
    uint16_t position; /* place in the bin's list from its head (0: the next malloc of the size takes it) */
    uint32_t reserved;
} ptmd_tcache_entry;

/* ---- Ruby's heap (RUBY_* sections) ---- */

#define PTMD_RF_REFERENCES (1u << 0) /* the REFS section was recorded */
#define PTMD_RF_PAGES_FROM_GC                                                                                          \
    (1u << 1) /* the pass took the pages from rb_objspace_each_objects, which
               * ends a pending lazy sweep and mallocs before the capture (the
               * pages' layout is not known for this Ruby, or the pages found
               * by their structure did not hold heap_live_slots objects) */
#define PTMD_RF_IN_SNAPSHOT                                                                                            \
    (1u << 2) /* the pass ran in the fork snapshot's child, on its copy of the
               * parent's memory: the parent paused for the fork only */

typedef struct {
    uint64_t heap_allocated_pages; /* GC.stat, taken in the same GC-disabled window as the pass */
    uint64_t heap_live_slots;
    uint64_t heap_free_slots;
    uint64_t total_allocated_objects;
    uint64_t pass_ns;         /* the Ruby pass */
    uint64_t refs_ns;         /* the reference scan: chunks, then roots */
    uint32_t flags;           /* PTMD_RF_* */
    uint32_t heap_tomb_pages; /* GC.stat: empty pages kept for reuse, which the pass does not see */
} ptmd_ruby_meta;

typedef struct {
    uint64_t start, end;        /* the slots of one ObjectSpace page */
    uint32_t stride;            /* slot size */
    uint32_t total, live, free; /* slots */
    uint64_t reserved;
} ptmd_ruby_page;

/* RUBY_NAMES entry kinds (CLASS, DATA_TYPE, and for the graph MODULE, SYMBOL, ROOT_CATEGORY, STRING) and
 * RUBY_CODE_NAMES entry kinds (MODULE, METHOD, PATH). MODULE's key is the module, its name its own
 * ("" when anonymous). */
enum {
    PTMD_NAME_CLASS = 1,
    PTMD_NAME_DATA_TYPE = 2,
    PTMD_NAME_MODULE = 3,
    PTMD_NAME_METHOD = 4,
    PTMD_NAME_PATH = 5,
    PTMD_NAME_VM_TABLE = 6,
    PTMD_NAME_SYMBOL = 7,        /* key: the ID; an instance variable's, constant's, global's or Symbol key's name */
    PTMD_NAME_ROOT_CATEGORY = 8, /* key: the category's number; the GC's name for a kind of root ("vm") */
    PTMD_NAME_STRING = 9         /* key: the String's address; its first bytes (a Hash key) */
};
#define PTMD_NO_NAME 0xffffffffu

typedef struct {
    uint64_t address;   /* the VALUE: ObjectSpace.dump's "address" */
    uint32_t klass;     /* index into the class names, PTMD_NO_NAME for hidden objects */
    uint32_t data_type; /* index into the names (typed data), else PTMD_NO_NAME */
    uint8_t type;       /* ruby_value_type (T_STRING ...) */
    uint8_t subtype;    /* imemo type for T_IMEMO */
    uint16_t n_words;   /* candidate pointer words in RUBY_WORDS */
    uint32_t flags;     /* PTMD_OF_* */
} ptmd_ruby_object;

/* ---- Ruby's object graph (RUBY_GRAPH, RUBY_EDGE_COUNTS, RUBY_EDGES, RUBY_ROOTS, RUBY_EDGE_NAMES) ---- */

#define PTMD_GRAPH_FLAGS(X)                                                                                            \
    X(PTMD_GRF_CONSTANT_NAMES, 1u << 0, "constant_names")         /* constants named (their tables were found) */      \
    X(PTMD_GRF_GLOBAL_NAMES, 1u << 1, "global_names")             /* global variables named (their table was found) */ \
    X(PTMD_GRF_THREAD_LOCAL_NAMES, 1u << 2, "thread_local_names") /* Thread#[] variables named */
enum { PTMD_GRAPH_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t graph_ns;      /* the capture of the graph */
    uint64_t dropped_edges; /* references to objects the Ruby pass did not record (garbage, or off its pages) */
    uint64_t named_limit;   /* the most references named per object (Array indices, Hash keys) */
    uint32_t flags;         /* PTMD_GRF_* */
    uint32_t reserved;
} ptmd_ruby_graph_rec;

/* ---- Allocation sites (ALLOC_TRACE, RUBY_STACKS, RUBY_FRAMES, RUBY_TRACED, RUBY_SITE_NAMES) ---- */

typedef struct {
    uint64_t every;      /* the mean gap between sampled new objects (1: every object) */
    uint64_t seen;       /* new objects since tracing started */
    uint64_t sampled;    /* of them, sampled */
    uint64_t dropped;    /* sampled but not kept: the table of traced objects was full */
    uint64_t started_ns; /* when tracing started (CLOCK_REALTIME) */
    uint32_t max_frames; /* the deepest stack kept: deeper ones keep their innermost frames */
    uint32_t reserved;
} ptmd_alloc_trace_rec;

typedef struct {
    uint32_t first;    /* index into RUBY_FRAMES */
    uint32_t n_frames; /* 0: no Ruby frame was running (the VM's own allocation, a C thread's) */
} ptmd_ruby_stack;

/* A Ruby frame as rb_profile_frames gives it: indices into RUBY_SITE_NAMES, PTMD_NO_NAME where Ruby has
 * none (a C method has no path). */
typedef struct {
    uint32_t path;  /* kind PATH: the file */
    uint32_t label; /* kind METHOD: the method or block ("block in work") */
    uint32_t owner; /* kind MODULE: the class or module defining the method ("#<Class:Foo>" for Foo.bar) */
    int32_t line;   /* the line running, 0 for a C method */
} ptmd_ruby_frame;

/* ---- The allocation tracker (NATIVE_TRACK, NATIVE_SAMPLES, NATIVE_STACKS, NATIVE_PCS, NATIVE_FRAMES,
 * NATIVE_NAMES): malloc's blocks sampled by bytes, each with its native and Ruby stack ---- */

#define PTMD_NATIVE_MAX_REGIONS 16
#define PTMD_NATIVE_MAX_PCS 48
#define PTMD_NATIVE_MAX_FRAMES 64
#define PTMD_NATIVE_TRACK_FLAGS(X)                                                                                     \
    X(PTMD_NTF_RUBY, 1u << 0, "ruby")         /* Ruby's frames were recorded where a thread held the GVL */            \
    X(PTMD_NTF_FULL, 1u << 1, "full")         /* a table was full: samples were dropped */                             \
    X(PTMD_NTF_PARTIAL, 1u << 2, "partial")   /* a table could not be read whole: its samples are left out */          \
    X(PTMD_NTF_UNLOCKED, 1u << 3, "unlocked") /* read while its lock was held (a stopped writer, a fork's child) */
enum { PTMD_NATIVE_TRACK_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t start, length, resident; /* resident: bytes in RAM at the capture */
} ptmd_native_region;

typedef struct {
    uint64_t mean_bytes; /* the mean of the byte sampler's exponential draws: a block of n bytes was
                          * sampled with probability 1 - exp(-n / mean_bytes) */
    uint64_t started_ns; /* when tracking started (CLOCK_REALTIME) */
    uint64_t sampled;    /* samples taken */
    uint64_t freed;      /* sampled blocks freed since */
    uint64_t dropped;    /* samples not kept: a table was full */
    uint32_t flags;      /* PTMD_NTF_* */
    uint32_t pid;        /* the process that started tracking */
    uint32_t n_regions;  /* the tracker's own mappings: its share of RSS */
    uint32_t reserved;
    ptmd_native_region regions[PTMD_NATIVE_MAX_REGIONS];
} ptmd_native_track_rec;

typedef struct {
    uint64_t address; /* what malloc returned */
    uint64_t size;    /* the bytes asked for */
    uint32_t stack;   /* index into NATIVE_STACKS */
    uint32_t reserved;
} ptmd_native_sample;

typedef struct {
    uint32_t first_pc, n_pcs;       /* NATIVE_PCS */
    uint32_t first_frame, n_frames; /* NATIVE_FRAMES: 0 when no Ruby frame was running or its thread had no GVL */
} ptmd_native_stack;

typedef struct {
    uint64_t address; /* the object: an address in RUBY_OBJECTS when the Ruby pass recorded it */
    uint32_t stack;   /* index into RUBY_STACKS */
    uint32_t reserved;
} ptmd_ruby_traced;

/* A root: an object the GC marks without any object referencing it, in the GC's category for it
 * (rb_objspace_reachable_objects_from_root). */
typedef struct {
    uint32_t object;   /* index into RUBY_OBJECTS */
    uint32_t category; /* index into RUBY_NAMES, kind ROOT_CATEGORY */
    uint32_t name;     /* index into RUBY_NAMES, kind SYMBOL: the global variable holding it; else PTMD_NO_NAME */
    uint32_t flags;    /* PTMD_RRF_* */
} ptmd_ruby_root;
/* a word on a machine stack or in saved registers that looks like the object's address (the GC marks
 * those conservatively: "machine_context"), not a reference Ruby knows it holds */
#define PTMD_RRF_CONSERVATIVE (1u << 0)

#define PTMD_EDGE_KINDS(X)                                                                                             \
    X(PTMD_EDGE_IVAR, 1, "ivar")                 /* detail: the name (SYMBOL): @x, or @@x for a class variable */      \
    X(PTMD_EDGE_CONSTANT, 2, "constant")         /* detail: the name (SYMBOL) */                                       \
    X(PTMD_EDGE_INDEX, 3, "index")               /* detail: the Array index */                                         \
    X(PTMD_EDGE_KEY_SYMBOL, 4, "key_symbol")     /* a Hash value; detail: its Symbol key's name (SYMBOL) */            \
    X(PTMD_EDGE_KEY_STRING, 5, "key_string")     /* a Hash value; detail: its String key (STRING) */                   \
    X(PTMD_EDGE_KEY_INTEGER, 6, "key_integer")   /* a Hash value; detail: its Integer key (int32) */                   \
    X(PTMD_EDGE_THREAD_LOCAL, 7, "thread_local") /* a Thread's; detail: its Thread#[] key (SYMBOL) */                  \
    X(PTMD_EDGE_STACK, 8, "stack") /* a Thread's or Fiber's stacks: frames, words that look like references; 0 */
typedef enum { PTMD_EDGE_KINDS(PTMD_ENUM_CONSTANT) PTMD_EDGE_KIND_COUNT = 9 } ptmd_edge_kind;
extern const char *const ptmd_edge_kind_names[PTMD_EDGE_KIND_COUNT];

/* The name of a reference, in RUBY_EDGES order. */
typedef struct {
    uint32_t edge; /* index into RUBY_EDGES */
    uint32_t kind; /* ptmd_edge_kind */
    uint32_t detail;
    uint32_t reserved;
} ptmd_ruby_edge_name;

/* ptmd_ruby_object.flags: bit values (bits 4..7 are kept for code ownership) */
#define PTMD_OBJECT_FLAGS(X)                                                                                           \
    X(PTMD_OF_OLD, 1u << 0, "old")         /* promoted by the GC: survived enough marks to be old */                   \
    X(PTMD_OF_GARBAGE, 1u << 1, "garbage") /* dead, on a page the pending lazy sweep has not reached */
enum { PTMD_OBJECT_FLAGS(PTMD_ENUM_CONSTANT) };

/* ---- where the memory came from (SOURCE section) ---- */

/* ptmd_source_rec.kind (a file without the section: this process, PTMD_SOURCE_KIND_SELF) */
#define PTMD_SOURCE_KINDS(X)                                                                                           \
    X(PTMD_SOURCE_KIND_SELF, 1, "self") /* the process dumped itself (PtmallocDump.dump) */                            \
    X(PTMD_SOURCE_KIND_PID, 2, "pid")   /* another process, stopped with ptrace and copied */                          \
    X(PTMD_SOURCE_KIND_CORE, 3, "core") /* a core file */
enum { PTMD_SOURCE_KINDS(PTMD_ENUM_CONSTANT) PTMD_SOURCE_KIND_COUNT = 4 };
extern const char *const ptmd_source_kind_names[PTMD_SOURCE_KIND_COUNT];

/* ptmd_source_rec.flags: what the source could not give */
#define PTMD_SOURCE_FLAGS(X)                                                                                           \
    X(PTMD_SRCF_NO_RUBY, 1u << 0, "no_ruby")             /* Ruby's objects: they need the in-process dump */           \
    X(PTMD_SRCF_NO_REFERENCES, 1u << 1, "no_references") /* the pointer graph and its roots */                         \
    X(PTMD_SRCF_NO_ORACLES, 1u << 2, "no_oracles")       /* mallinfo2()/malloc_info(): not callable there */           \
    X(PTMD_SRCF_NO_RESIDENCY, 1u << 3, "no_residency")   /* page residency (a core file) */                            \
    X(PTMD_SRCF_NO_TLS, 1u << 4, "no_tls")               /* the threads' tcache pointers from TLS: by structure only */
enum { PTMD_SOURCE_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint32_t kind;         /* PTMD_SOURCE_KIND_* */
    uint32_t flags;        /* PTMD_SRCF_* */
    uint64_t pid;          /* the process read (a core's: the one it was written from) */
    uint64_t pause_ns;     /* how long the process was stopped: its last stop, seize to detach */
    uint64_t copied_bytes; /* bytes of its memory copied while it was stopped */
    uint32_t threads;      /* threads stopped */
    uint32_t attempts;     /* stops it took to find every arena lock free (1: the first) */
    uint64_t reserved;     /* 0 */
} ptmd_source_rec;

/* ---- a fork snapshot's parent (SNAPSHOT section) ---- */

/* ptmd_snapshot_rec.flags: where the Ruby pass ran */
#define PTMD_SNAPSHOT_FLAGS(X)                                                                                         \
    X(PTMD_SNF_RUBY_IN_CHILD, 1u << 0, "ruby_in_child")   /* in the snapshot process, on its copy */                   \
    X(PTMD_SNF_RUBY_IN_PARENT, 1u << 1, "ruby_in_parent") /* in the parent before the fork: this Ruby's
                                                              pages are not known by their structure */
enum { PTMD_SNAPSHOT_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t before_fork_ns; /* the parent, from the dump's call to fork(): libc, threads, roots,
                                           and the Ruby pass or gc: true's GC where they ran there */
    uint64_t ruby_pass_ns;   /* of which the Ruby pass (0 when the child ran it) */
    uint64_t gc_ns;          /* of which gc: true's full GC */
    uint64_t fork_ns;        /* from the parent's fork() to the child's first step */
    uint32_t flags;          /* PTMD_SNF_* */
    uint32_t reserved;       /* 0 */
} ptmd_snapshot_rec;

/* ---- the GC's counts (GC section) ---- */

/* ptmd_gc_rec.flags: bit values */
#define PTMD_GC_FLAGS(X)                                                                                               \
    X(PTMD_GF_FULL_GC, 1u << 0, "full_gc")       /* the dump ran a full GC first (gc: true) */                         \
    X(PTMD_GF_LAST_MAJOR, 1u << 1, "last_major") /* GC.latest_gc_info: the latest GC was major */                      \
    X(PTMD_GF_SWEEPING, 1u << 2, "sweeping")     /* a lazy sweep was pending when the pass began */
enum { PTMD_GC_FLAGS(PTMD_ENUM_CONSTANT) };

typedef struct {
    uint64_t count, major_gc_count, minor_gc_count;
    uint64_t total_allocated_objects, total_freed_objects;
    uint64_t old_objects, old_objects_limit;
    uint64_t heap_live_slots;
    uint64_t malloc_increase_bytes, oldmalloc_increase_bytes;
    uint64_t time_ms; /* GC.stat(:time), 0 where the Ruby has none */
    uint32_t flags;   /* PTMD_GF_* */
    uint32_t reserved;
} ptmd_gc_rec;

/* ---- the process's mappings (MAPPINGS section), from /proc/PID/smaps ---- */

#define PTMD_MAPPING_KINDS(X)                                                                                          \
    X(PTMD_MK_ANON, 0, "anonymous")  /* no name, or [anon:...] */                                                      \
    X(PTMD_MK_BRK, 1, "brk")         /* [heap] */                                                                      \
    X(PTMD_MK_STACK, 2, "stack")     /* [stack] */                                                                     \
    X(PTMD_MK_FILE, 3, "file")       /* a file, by path */                                                             \
    X(PTMD_MK_SPECIAL, 4, "special") /* [vdso], [vvar], [vsyscall], ... */
typedef enum { PTMD_MAPPING_KINDS(PTMD_ENUM_CONSTANT) PTMD_MK_COUNT = 5 } ptmd_mapping_kind;
extern const char *const ptmd_mapping_kind_names[PTMD_MK_COUNT];

/* ptmd_mapping_rec.prot: bit values, as /proc/PID/maps prints them */
enum { PTMD_MP_READ = 1, PTMD_MP_WRITE = 2, PTMD_MP_EXEC = 4, PTMD_MP_SHARED = 8 };

/* ptmd_mappings_head.flags */
#define PTMD_MAPF_PARENT (1u << 0) /* the parent's, read by a snapshot child as its first act */
#define PTMD_MAPF_APPROX (1u << 1) /* smaps and VmRSS still disagreed after the last read: error_kib */

typedef struct {
    uint64_t vm_rss;                        /* /proc/PID/status VmRSS, read right after smaps */
    uint64_t rss_anon, rss_file, rss_shmem; /* the same file's RssAnon, RssFile, RssShmem */
    uint64_t read_ns;                       /* reading smaps and status */
    uint64_t paths_len;                     /* bytes of paths after the records */
    uint32_t flags;                         /* PTMD_MAPF_* */
    uint32_t error_kib;                     /* the kept read's disagreement: the larger of VmRSS's change across it and
                         * smaps' Rss sum against VmRSS after it, KiB (0 in dumps written before) */
} ptmd_mappings_head;

typedef struct {
    uint64_t start, end;
    uint64_t rss;           /* Rss: resident bytes */
    uint64_t private_bytes; /* Private_Clean + Private_Dirty */
    uint64_t shared_bytes;  /* Shared_Clean + Shared_Dirty */
    uint64_t swap;          /* Swap */
    uint64_t anonymous;     /* Anonymous */
    uint64_t offset, inode;
    uint32_t path_off, path_len; /* the path in the paths area (kind file and the [names]) */
    uint32_t prot;               /* PTMD_MP_* */
    uint32_t kind;               /* PTMD_MK_* */
} ptmd_mapping_rec;

/* What a RUBY_CODE record is: the malloc memory its object owns is charged to its module. */
#define PTMD_CODE_KINDS(X)                                                                                             \
    X(PTMD_CODE_MODULE, 1, "module")             /* a class, module or include class: its own tables */                \
    X(PTMD_CODE_METHOD_ENTRY, 2, "method_entry") /* a method entry (imemo ment) of its method table */                 \
    X(PTMD_CODE_ISEQ, 3, "iseq")                 /* a method's iseq, or a block's within a method */                   \
    X(PTMD_CODE_VM_TABLE, 4, "vm_table")         /* a VM-wide table: address is its malloc'd memory */
enum { PTMD_CODE_KINDS(PTMD_ENUM_CONSTANT) PTMD_CODE_KIND_COUNT = 5 };
extern const char *const ptmd_code_kind_names[PTMD_CODE_KIND_COUNT];

typedef struct {
    uint64_t address; /* the object (a T_IMEMO, T_CLASS, T_MODULE or T_ICLASS slot); a vm_table's
                       * user address */
    uint32_t module;  /* RUBY_CODE_NAMES index of the defining module (a vm_table's name), PTMD_NO_NAME */
    uint32_t method;  /* RUBY_CODE_NAMES index of the method's name, PTMD_NO_NAME */
    uint32_t path;    /* RUBY_CODE_NAMES index of the method's source path, PTMD_NO_NAME */
    uint32_t line;    /* the method's first line, 0 when unknown */
    uint32_t kind;    /* PTMD_CODE_* */
    uint32_t reserved;
} ptmd_ruby_code;

typedef struct {
    uint32_t from, to; /* chunk indices: a word of `from` equals `to`'s user address */
} ptmd_ref;

/* What a root range is (ptmd_root_rec.kind). */
#define PTMD_ROOT_KINDS(X)                                                                                             \
    X(PTMD_ROOT_DATA, 1, "data")           /* a writable PT_LOAD segment of a loaded object */                         \
    X(PTMD_ROOT_STACK, 2, "stack")         /* a thread's stack */                                                      \
    X(PTMD_ROOT_TLS, 3, "tls")             /* a thread's static TLS and struct pthread */                              \
    X(PTMD_ROOT_REGISTERS, 4, "registers") /* the dumping thread's callee-saved registers */
enum { PTMD_ROOT_KINDS(PTMD_ENUM_CONSTANT) PTMD_ROOT_KIND_COUNT = 5 };
extern const char *const ptmd_root_kind_names[PTMD_ROOT_KIND_COUNT];

#define PTMD_ROOT_NAME_MAX 96
typedef struct {
    uint64_t start, end;           /* the range scanned (end > start) */
    uint32_t kind;                 /* PTMD_ROOT_* */
    uint32_t tid;                  /* the thread of a stack, TLS or registers; 0 else */
    char name[PTMD_ROOT_NAME_MAX]; /* NUL-terminated: the object's path (its tail when longer), or
                                    * "stack of thread N" ... */
} ptmd_root_rec;

typedef struct {
    uint64_t where; /* address of the word in the root */
    uint32_t root;  /* index into ROOTS */
    uint32_t chunk; /* index into the chunk table: the word equals its user address
                     * (a thread's DTV pointer: 16 bytes past it, as glibc keeps it) */
} ptmd_root_ref;

/* One of the dump's own mappings (its scratch buffers), as the capture measured it right after
 * reading the mappings. */
typedef struct {
    uint64_t start, length, resident;
} ptmd_scratch_rec;

typedef struct {
    uint32_t type;
    uint32_t reserved;
    uint64_t count;
    uint64_t length;
} ptmd_section_hdr;

typedef struct {
    uint64_t n_sections; /* sections before END */
    uint64_t n_chunks;
    uint64_t body_length; /* bytes before the END section header */
    uint32_t crc32;       /* CRC-32 of those bytes */
    uint32_t magic;       /* PTMD_FOOTER_MAGIC */
} ptmd_footer;

_Static_assert(sizeof(ptmd_chunk_rec) == 16, "chunk record is 16 bytes");
_Static_assert(sizeof(ptmd_meta) == 216, "meta layout");
_Static_assert(sizeof(ptmd_mallinfo2_rec) == 80, "mallinfo2 layout");
_Static_assert(sizeof(ptmd_arena_rec) == 88, "arena record layout");
_Static_assert(sizeof(ptmd_heap_rec) == 96, "heap record layout");
_Static_assert(sizeof(ptmd_thread_rec) == 48, "thread record layout");
_Static_assert(sizeof(ptmd_anomaly_rec) == 24, "anomaly record layout");
_Static_assert(sizeof(ptmd_tcache_entry) == 16, "tcache entry layout");
_Static_assert(sizeof(ptmd_section_hdr) == 24, "section header layout");
_Static_assert(sizeof(ptmd_ruby_meta) == 56, "ruby meta layout");
_Static_assert(sizeof(ptmd_ruby_page) == 40, "ruby page layout");
_Static_assert(sizeof(ptmd_ruby_object) == 24, "ruby object layout");
_Static_assert(sizeof(ptmd_ref) == 8, "ref layout");
_Static_assert(sizeof(ptmd_scratch_rec) == 24, "scratch record layout");
_Static_assert(sizeof(ptmd_gc_rec) == 96, "gc record layout");
_Static_assert(sizeof(ptmd_source_rec) == 48, "source record layout");
_Static_assert(sizeof(ptmd_snapshot_rec) == 40, "snapshot record layout");
_Static_assert(sizeof(ptmd_mappings_head) == 56, "mappings head layout");
_Static_assert(sizeof(ptmd_mapping_rec) == 88, "mapping record layout");
_Static_assert(sizeof(ptmd_ruby_code) == 32, "ruby code layout");
_Static_assert(sizeof(ptmd_footer) == 32, "footer layout");
_Static_assert(sizeof(ptmd_root_rec) == 120, "root record layout");
_Static_assert(sizeof(ptmd_root_ref) == 16, "root reference layout");
_Static_assert(sizeof(ptmd_ruby_graph_rec) == 32, "ruby graph record layout");
_Static_assert(sizeof(ptmd_ruby_root) == 16, "ruby root layout");
_Static_assert(sizeof(ptmd_ruby_edge_name) == 16, "ruby edge name layout");
_Static_assert(sizeof(ptmd_alloc_trace_rec) == 48, "allocation trace record layout");
_Static_assert(sizeof(ptmd_ruby_stack) == 8, "ruby stack layout");
_Static_assert(sizeof(ptmd_ruby_frame) == 16, "ruby frame layout");
_Static_assert(sizeof(ptmd_ruby_traced) == 16, "ruby traced object layout");
_Static_assert(sizeof(ptmd_native_track_rec) == 440, "native track record layout");
_Static_assert(sizeof(ptmd_native_sample) == 24, "native sample layout");
_Static_assert(sizeof(ptmd_native_stack) == 16, "native stack layout");

#define PTMD_PREAMBLE_SIZE 16
#define PTMD_END_SIZE (sizeof(ptmd_section_hdr) + sizeof(ptmd_footer))

#endif
