/* The dump sequence. Everything that may allocate (locating libc, opening files, reading mappings,
 * the stream malloc_info() writes to) happens before the walk; from there to the rename of the file
 * nothing calls malloc, so malloc_info() and mallinfo2(), called right after the walk, describe
 * exactly the heap it saw. */
#define _GNU_SOURCE
#include "capture/dump.h"
#include "capture/arena.h"
#include "capture/refs.h"
#include "capture/residency.h"
#include "capture/roots.h"
#include "capture/threads.h"
#include "capture/outside.h"
#include "capture/ruby_heap.h"
#include "capture/source_core.h"
#include "capture/source_self.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PTMD_MALLOC_INFO_MAX (256u << 20)
#define PTMD_MALLOC_INFO_RESERVE (16u << 20)   /* about 2,000 arenas of malloc_info() output */
#define PTMD_MALLOC_INFO_PER_ARENA (16u << 10)  /* twice an arena's output with every bin in use */

static int dump_busy;

/* ---- glibc's own view, captured right after the walk -------------------------------------- */

/* One unbuffered FILE over an mmapped buffer, kept for the life of the process: creating it
 * mallocs, so it is made once (when the extension loads, ptmd_dump_setup) and merely rewound
 * afterwards. The buffer is reserved large (MAP_NORESERVE: untouched pages cost nothing) so that no
 * dump has to make a bigger one; only a ring of thousands of arenas does, before its walk. */
static FILE *mi_fp;
static char *mi_buf;
static size_t mi_cap;
static int mi_outgrown;     /* a dump's output did not fit: the next one gets a larger stream */

static int mi_stream(size_t cap, ptmd_err *err)
{
    if (mi_fp && mi_cap >= cap) return fseek(mi_fp, 0, SEEK_SET) == 0 ? 0 : ptmd_fail_sys(err, errno, "malloc_info", "rewind the stream for");
    if (mi_fp) fclose(mi_fp);
    if (mi_buf) munmap(mi_buf, mi_cap);
    mi_fp = NULL;
    mi_buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mi_buf == MAP_FAILED) {
        mi_buf = NULL;
        return ptmd_fail_sys(err, errno, "malloc_info", "mmap a buffer for");
    }
    mi_cap = cap;
    mi_fp = fmemopen(mi_buf, cap, "w");
    if (!mi_fp) return ptmd_fail_sys(err, errno, "malloc_info", "fmemopen for");
    /* unbuffered: stdio would otherwise malloc a buffer on the first write */
    setvbuf(mi_fp, NULL, _IONBF, 0);
    return 0;
}

/* Before the walk (making the stream mallocs): a stream of room for this many arenas' output, with
 * four times the room once a dump's output has outgrown it. */
static int oracles_prepare(size_t arenas, ptmd_err *err)
{
    size_t cap = mi_cap ? mi_cap : PTMD_MALLOC_INFO_RESERVE;
    while (cap < PTMD_MALLOC_INFO_MAX && (cap < arenas * PTMD_MALLOC_INFO_PER_ARENA || mi_outgrown)) {
        cap *= 4;
        mi_outgrown = 0;
    }
    return mi_stream(cap, err);
}

/* malloc_info() then mallinfo2(), back to back, right after the walk and with no allocation since it
 * began. Returns 0, or -1 when the output outgrew the stream (the next dump's is larger). */
static int capture_oracles(ptmd_dump_state *d)
{
    long n;
    if (!mi_fp) return -1;
    malloc_info(0, mi_fp);
    d->mallinfo_exact = ptmd_mallinfo(&d->mallinfo2);
    n = ftell(mi_fp);
    if (n < 0 || (size_t)n >= mi_cap - 1) {
        mi_outgrown = 1;
        return -1;
    }
    d->malloc_info = mi_buf;
    d->malloc_info_len = (size_t)n;
    return 0;
}

void ptmd_dump_setup(void)
{
    const ptmd_libc *lc;
    ptmd_memreader mem;
    ptmd_err err;
    memset(&err, 0, sizeof(err));
    mi_stream(PTMD_MALLOC_INFO_RESERVE, &err);
    if (ptmd_locate(NULL, PTMD_SYMBOLS_AUTO, &lc, &err) != 0) return;
    memset(&mem, 0, sizeof(mem));
    mem.mem_fd = -1;
    if (ptmd_memreader_open(&mem, &err) != 0) return;
    ptmd_check_allocator(lc, &mem, &err);
    ptmd_memreader_close(&mem);
}

/* ---- strings ------------------------------------------------------------------------------ */

static int add_string(ptmd_buf *b, const char *k, const char *v)
{
    uint16_t kl = (uint16_t)strnlen(k, 1024);
    uint32_t vl = (uint32_t)strnlen(v, 1u << 20);
    return ptmd_buf_append(b, &kl, 2) || ptmd_buf_append(b, k, kl) || ptmd_buf_append(b, &vl, 4) ||
           ptmd_buf_append(b, v, vl) ? -1 : 0;
}

/* The strings that say whether the Ruby pass ran, which a snapshot child whose pass failed replaces. */
static int ruby_layer_string(const char *key)
{
    return strcmp(key, "ruby_layer") == 0 || strcmp(key, "ruby_layer_reason") == 0 || strcmp(key, "ruby_code_reason") == 0;
}

static int collect_strings(ptmd_dump_state *d, const ptmd_libc *lc, const ptmd_dump_opts *o)
{
    char host[256] = "", hex[2 * sizeof(lc->build_id) + 1];
    const char *const *s;
    int replaced = d->ruby_problem[0] != '\0';
    gethostname(host, sizeof(host) - 1);
    ptmd_hex(lc->build_id, lc->build_id_len, hex);
    if (add_string(&d->strings, "glibc_version", lc->glibc_version) ||
        add_string(&d->strings, "libc_path", lc->libc_path) ||
        add_string(&d->strings, "libc_build_id", hex) ||
        add_string(&d->strings, "symbol_file", lc->symbol_file) ||
        add_string(&d->strings, "symbol_source", PTMD_NAME_OF(ptmd_symbol_source_names, lc->symbol_source)) ||
        add_string(&d->strings, "hostname", host))
        return -1;
    for (s = o->strings; s && s[0] && s[1]; s += 2)
        if (!(replaced && ruby_layer_string(s[0])) && add_string(&d->strings, s[0], s[1])) return -1;
    if (replaced && (add_string(&d->strings, "ruby_layer", "skipped") ||
                     add_string(&d->strings, "ruby_layer_reason", d->ruby_problem)))
        return -1;
    return 0;
}

/* trim_check: malloc_trim(0) after the walk, then the pages that were resident and are not any more,
 * per arena: what trimming really gave back, against which the report's estimate is checked. */
static int trim_check(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_walk *w = &d->w;
    size_t h, nh = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), na = PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec);
    uint8_t after[4096];
    if (!ptmd_buf_push(&d->trim, na * sizeof(uint64_t) + 1)) return ptmd_fail_sys(err, errno, "trim check", "mmap");
    d->trim.len = na * sizeof(uint64_t);
    malloc_trim(0);
    for (h = 0; h < nh; h++) {
        const ptmd_heap_rec *hp = PTMD_W_HEAP(w, h);
        uint64_t p = 0;
        if (hp->arena == PTMD_NO_ARENA) continue;
        while (p < hp->n_pages) {
            uint64_t n = hp->n_pages - p < sizeof(after) ? hp->n_pages - p : sizeof(after), k;
            ptmd_source_pages(&w->src, hp->page_base + p * w->page_size, n, after);
            for (k = 0; k < n; k++)
                if ((w->pages.base[hp->first_page + p + k] & PTMD_PAGE_PRESENT) && !(after[k] & (PTMD_PAGE_PRESENT | PTMD_PAGE_SWAPPED)))
                    *PTMD_BUF_AT(&d->trim, uint64_t, hp->arena) += w->page_size;
            p += n;
        }
    }
    return 0;
}

/* ---- the whole RSS ------------------------------------------------------------------------ */

/* The mappings and VmRSS, right after the walk's page residency so that the two describe one moment.
 * A snapshot child takes its parent's (read_parent_mappings). Where /proc/self/smaps cannot be read the
 * dump goes on without them (the RSS is then not accounted), as residency falls back to mincore. */
static void capture_mappings(ptmd_dump_state *d)
{
    ptmd_err ignored;
    if (d->parent_mappings) {
        if (d->parent_mappings->present) d->mappings = *d->parent_mappings;
        return;
    }
    if (ptmd_mappings_read(&d->mappings, 0, &ignored) != 0) d->mappings.present = 0;
}

/* A snapshot child's first act: its parent's smaps and VmRSS. The child's own would describe the
 * child (fork copies no page table entries of file mappings without private pages, so a mapped file
 * would show next to nothing; the other threads are gone), while the dump describes the parent at the
 * fork. Reading them in the parent before the fork would lengthen its pause by the whole smaps walk
 * (tens of milliseconds on a large heap, as long as the rest of the pause); read here, they lag the
 * fork by about the time a fork takes to return, during which the parent runs on. Left out when the
 * parent is already gone. */
static void read_parent_mappings(ptmd_mappings *m, int parent)
{
    ptmd_err ignored;
    if (getppid() != parent || ptmd_mappings_read(m, parent, &ignored) != 0) {
        m->present = 0;
        return;
    }
    m->head.flags |= PTMD_MAPF_PARENT;
}

/* Resident bytes of each Ruby page's body: the OS pages its slots span, from pagemap. */
static int ruby_page_rss(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_walk *w = &d->w;
    size_t i, n = PTMD_BUF_COUNT(&d->ruby.pages, ptmd_ruby_page);
    uint64_t ps = w->page_size;
    uint8_t flags[64];
    if (!d->ruby.present) return 0;
    if (ptmd_buf_reserve(&d->ruby_rss, n * sizeof(uint64_t) + 8) != 0) return ptmd_fail_sys(err, errno, "Ruby page residency", "mmap");
    d->ruby_rss.len = n * sizeof(uint64_t);
    for (i = 0; i < n; i++) {
        const ptmd_ruby_page *pg = PTMD_BUF_AT(&d->ruby.pages, ptmd_ruby_page, i);
        uint64_t lo = pg->start & ~(ps - 1), hi = (pg->end + ps - 1) & ~(ps - 1), bytes = 0;
        while (lo < hi) {
            size_t k, m = (hi - lo) / ps < sizeof(flags) ? (size_t)((hi - lo) / ps) : sizeof(flags);
            if (ptmd_source_pages(&w->src, (uintptr_t)lo, m, flags) != 0) break;
            for (k = 0; k < m; k++)
                if (flags[k] & PTMD_PAGE_PRESENT) bytes += ps;
            lo += m * ps;
        }
        *PTMD_BUF_AT(&d->ruby_rss, uint64_t, i) = bytes;
    }
    return 0;
}

static void write_rss_sections(ptmd_dump_state *d)
{
    ptmd_writer *wr = &d->writer;
    const ptmd_mappings *m = &d->mappings;
    if (d->ruby.present) {
        ptmd_writer_section(wr, PTMD_SEC_GC, 1, &d->ruby.gc, sizeof(d->ruby.gc));
        if (d->ruby_rss.base)
            ptmd_writer_section(wr, PTMD_SEC_RUBY_PAGE_RSS, PTMD_BUF_COUNT(&d->ruby_rss, uint64_t), d->ruby_rss.base,
                                d->ruby_rss.len);
    }
    if (m->present) {
        uint64_t len = sizeof(m->head) + m->recs.len + m->paths.len;
        ptmd_writer_begin(wr, PTMD_SEC_MAPPINGS, PTMD_BUF_COUNT(&m->recs, ptmd_mapping_rec), len);
        ptmd_writer_put(wr, &m->head, sizeof(m->head));
        ptmd_writer_put(wr, m->recs.base, m->recs.len);
        ptmd_writer_put(wr, m->paths.base, m->paths.len);
        ptmd_writer_end(wr, len);
    }
}

/* ---- the sequence ------------------------------------------------------------------------- */

static void fill_meta(ptmd_dump_state *d, const ptmd_libc *lc, const struct timespec *now)
{
    ptmd_meta *m = &d->meta;
    ptmd_walk *w = &d->w;
    const ptmd_layout *L = lc->layout;
    /* a snapshot child describes its parent's heap: the process dumped is the parent */
    m->pid = (uint64_t)(d->snapshot ? getppid() : getpid());
    m->ppid = d->snapshot ? 0 : (uint64_t)getppid();
    m->time_sec = now->tv_sec;
    m->time_nsec = (uint64_t)now->tv_nsec;
    m->page_size = w->page_size;
    m->main_arena = lc->main_arena;
    m->mp_addr = lc->mp;
    m->libc_base = lc->libc_base;
    m->sbrk_base = w->sbrk_base;
    m->heap_max_size = w->heap_max;
    if (w->have_mp) {
        m->mmap_threshold = ptmd_mapped_word(w, lc->mp + L->mp_mmap_threshold);
        m->trim_threshold = ptmd_mapped_word(w, lc->mp + L->mp_trim_threshold);
        m->top_pad = ptmd_mapped_word(w, lc->mp + L->mp_top_pad);
        m->arena_max = ptmd_mapped_word(w, lc->mp + L->mp_arena_max);
        m->arena_test = ptmd_mapped_word(w, lc->mp + L->mp_arena_test);
        m->max_mmapped_mem = ptmd_mapped_word(w, lc->mp + L->mp_max_mmapped_mem);
        if (L->mp_tcache_max_bytes != PTMD_NONE) m->tcache_max_bytes = ptmd_mapped_word(w, lc->mp + L->mp_tcache_max_bytes);
    }
    m->n_mmaps = w->n_mmaps;
    m->mmapped_mem = w->mmapped_mem;
    m->tcache_bins = w->tcache_bins;
    m->tcache_count = w->tcache_count_max;
    m->lock_wait_ns = w->lock_wait_ns;
    m->symbol_source = (uint32_t)lc->symbol_source;
    m->residency_source = w->src.pagemap.source;
    m->glibc_major = (uint32_t)lc->major;
    m->glibc_minor = (uint32_t)lc->minor;
    m->flags = (L->safe_linking ? PTMD_MF_SAFE_LINKING : 0) | (L->tcache_bins ? PTMD_MF_TCACHE : 0) |
               (w->have_tcache_key ? PTMD_MF_TCACHE_KEY : 0) | (w->have_mp ? PTMD_MF_MP : 0) |
               (w->threads_complete ? PTMD_MF_THREADS_COMPLETE : 0) |
               (L->mremap_overcounts ? PTMD_MF_MREMAP_OVERCOUNT : 0);
    m->thread_count = w->thread_count;
}

/* The chunk table goes out without addresses (each heap's chunks tile it), staged through a fixed
 * stack buffer. */
static void write_chunk_words(ptmd_writer *wr, const ptmd_walk *w)
{
    uint64_t words[4096];
    size_t n = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec), i = 0;
    const ptmd_chunk_rec *r = (const ptmd_chunk_rec *)(const void *)w->chunks.base;
    ptmd_writer_begin(wr, PTMD_SEC_CHUNKS, n, (uint64_t)n * 8);
    while (i < n) {
        size_t k, m = n - i < 4096 ? n - i : 4096;
        for (k = 0; k < m; k++) words[k] = r[i + k].word;
        ptmd_writer_put(wr, words, m * 8);
        i += m;
    }
    ptmd_writer_end(wr, (uint64_t)n * 8);
}

static void write_sections(ptmd_dump_state *d)
{
    ptmd_writer *wr = &d->writer;
    ptmd_walk *w = &d->w;
    ptmd_writer_section(wr, PTMD_SEC_META, 1, &d->meta, sizeof(d->meta));
    ptmd_writer_section(wr, PTMD_SEC_STRINGS, 0, d->strings.base, d->strings.len);
    ptmd_writer_section(wr, PTMD_SEC_MALLINFO2, 1, &d->mallinfo2, sizeof(d->mallinfo2));
    ptmd_writer_section(wr, PTMD_SEC_MALLOC_INFO, d->malloc_info_len, d->malloc_info, d->malloc_info_len);
    ptmd_writer_section(wr, PTMD_SEC_ARENAS, PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec), w->arenas.base, w->arenas.len);
    ptmd_writer_section(wr, PTMD_SEC_HEAPS, PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec), w->heaps.base, w->heaps.len);
    write_chunk_words(wr, w);
    ptmd_writer_section(wr, PTMD_SEC_PAGES, w->pages.len, w->pages.base, w->pages.len);
    ptmd_writer_section(wr, PTMD_SEC_THREADS, PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec), w->threads.base, w->threads.len);
    ptmd_writer_section(wr, PTMD_SEC_ANOMALIES, PTMD_BUF_COUNT(&w->anomalies, ptmd_anomaly_rec), w->anomalies.base, w->anomalies.len);
    if (w->L->tcache_bins)
        ptmd_writer_section(wr, PTMD_SEC_TCACHE_ENTRIES, PTMD_BUF_COUNT(&w->tcache_entries, ptmd_tcache_entry),
                            w->tcache_entries.base, w->tcache_entries.len);
    if (d->ruby.present) {
        const ptmd_ruby_data *r = &d->ruby;
        ptmd_writer_section(wr, PTMD_SEC_RUBY_META, 1, &r->meta, sizeof(r->meta));
        ptmd_writer_section(wr, PTMD_SEC_RUBY_PAGES, PTMD_BUF_COUNT(&r->pages, ptmd_ruby_page), r->pages.base, r->pages.len);
        ptmd_writer_section(wr, PTMD_SEC_RUBY_OBJECTS, PTMD_BUF_COUNT(&r->objects, ptmd_ruby_object), r->objects.base,
                            r->objects.len);
        ptmd_writer_section(wr, PTMD_SEC_RUBY_WORDS, PTMD_BUF_COUNT(&r->words, uint64_t), r->words.base, r->words.len);
        ptmd_writer_section(wr, PTMD_SEC_RUBY_NAMES, r->n_names, r->names.base, r->names.len);
        if (r->code_present) {
            ptmd_writer_section(wr, PTMD_SEC_RUBY_CODE, PTMD_BUF_COUNT(&r->code, ptmd_ruby_code), r->code.base, r->code.len);
            ptmd_writer_section(wr, PTMD_SEC_RUBY_CODE_NAMES, r->n_code_names, r->code_names.base, r->code_names.len);
        }
    }
    if (w->references) {
        ptmd_writer_section(wr, PTMD_SEC_REFS, PTMD_BUF_COUNT(&w->refs, ptmd_ref), w->refs.base, w->refs.len);
        ptmd_writer_section(wr, PTMD_SEC_INT_REFS, PTMD_BUF_COUNT(&w->int_refs, ptmd_ref), w->int_refs.base, w->int_refs.len);
        ptmd_writer_section(wr, PTMD_SEC_ROOTS, PTMD_BUF_COUNT(&w->roots, ptmd_root_rec), w->roots.base, w->roots.len);
        ptmd_writer_section(wr, PTMD_SEC_ROOT_REFS, PTMD_BUF_COUNT(&w->root_refs, ptmd_root_ref), w->root_refs.base,
                            w->root_refs.len);
    }
    if (d->has_source) ptmd_writer_section(wr, PTMD_SEC_SOURCE, 1, &d->source, sizeof(d->source));
    if (d->has_snapshot) ptmd_writer_section(wr, PTMD_SEC_SNAPSHOT, 1, &d->snap, sizeof(d->snap));
    if (d->trim.base)
        ptmd_writer_section(wr, PTMD_SEC_TRIM_CHECK, PTMD_BUF_COUNT(&d->trim, uint64_t), d->trim.base, d->trim.len);
    write_rss_sections(d);
}

/* Whether libc as the parent located it serves a target that asks for `symbols`. */
static int reuses_parent_libc(const ptmd_libc *lc, int symbols)
{
    int by_structure = lc->symbol_source == PTMD_SYMSRC_HEURISTIC;
    if (symbols == PTMD_SYMBOLS_HEURISTIC) return by_structure;
    if (symbols == PTMD_SYMBOLS_FILE) return !by_structure;
    return 1;
}

/* For the roots: the caller's callee-saved registers as they are here (setjmp keeps rbx and r12 to
 * r15 as they are), and the frame just below this function's caller, above which the dumping
 * thread's stack is the program's (the callee-saved registers that caller spilled included) and
 * below which everything is the dump's own. */
static __attribute__((noinline)) void note_caller(ptmd_walk *w)
{
    jmp_buf regs;
    setjmp(regs);
    memcpy(w->caller_regs, regs, sizeof(w->caller_regs) < sizeof(regs) ? sizeof(w->caller_regs) : sizeof(regs));
    w->caller_frame = (uint64_t)(uintptr_t)__builtin_frame_address(0);
}

/* The sections, then the file's end and its rename; a file size limit must fail the write with
 * EFBIG, not kill the process. */
static int write_file(ptmd_dump_state *d, ptmd_err *err)
{
    struct sigaction ign, old_xfsz;
    int rc;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ign, &old_xfsz);
    write_sections(d);
    rc = ptmd_writer_finish(&d->writer, PTMD_BUF_COUNT(&d->w.chunks, ptmd_chunk_rec), err);
    sigaction(SIGXFSZ, &old_xfsz, NULL);
    return rc;
}

void ptmd_dump_init(ptmd_dump_state *d)
{
    memset(d, 0, sizeof(*d));
    d->writer.fd = -1;
    d->w.src.mem.mem_fd = -1;
    d->w.src.pagemap.fd = -1;
}

int ptmd_dump_run(ptmd_dump_state *d, const ptmd_dump_opts *o, ptmd_err *err)
{
    const ptmd_libc *lc;
    struct timespec now;
    uint64_t t0, t1, t2;
    int rc = -1, expected = 0, oracles = 1, outgrown = 0, skipped = 0;

    if (!__atomic_compare_exchange_n(&dump_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return ptmd_fail(err, PTMD_E_BUSY, "a dump is already running in this process");
    /* a snapshot child takes the parent's answer: ptmd_locate takes a mutex, and finding libc afresh
     * the loader's lock, either of which another thread may have held at the fork. The parent located
     * libc for the first target; a later target that asks for the other source (check_symbol_free
     * dumps one snapshot by symbols and by structure) locates it here. */
    if (d->parent && d->parent->lc && reuses_parent_libc(d->parent->lc, o->symbols)) lc = d->parent->lc;
    else if (ptmd_locate(o->debug_dir, o->symbols, &lc, err) != 0) goto out;
    if (!lc->layout) {
        ptmd_fail(err, PTMD_E_LIBC, "glibc %s is not supported: ptmalloc_dump knows the malloc layouts of "
                  "glibc 2.27 to 2.%d", lc->glibc_version, ptmd_layout_newest_minor());
        goto out;
    }
    if (ptmd_walk_prepare(&d->w, lc, err) != 0) goto out;
    d->w.references = o->references;
    note_caller(&d->w);
    if (d->parent) {
        const ptmd_buf *given[3] = { &d->parent->threads, &d->parent->objects, &d->parent->gone };
        size_t k;
        d->w.given_threads = given[0];
        d->w.given_thread_count = d->parent->thread_count;
        d->w.given_threads_complete = d->parent->threads_complete;
        d->w.given_objects = given[1];
        d->w.given_tls_below = d->parent->tls_below;
        d->w.given_gone = given[2];
        /* the parent's lists are no mmapped chunks either */
        for (k = 0; k < 3; k++) {
            uint64_t r[2] = { (uint64_t)(uintptr_t)given[k]->base, (uint64_t)(uintptr_t)given[k]->base + given[k]->cap };
            if (given[k]->base && ptmd_buf_append(&d->w.exclude, r, sizeof(r)) != 0) {
                ptmd_fail_sys(err, errno, "exclusions", "mmap");
                goto out;
            }
        }
    }
    {
        /* Ruby's object pages hold no malloc chunk header unless they are malloc chunks themselves:
         * the mmapped-chunk scan skips them (as the Ruby pass listed them, or known by their structure
         * without it) */
        size_t i, n = PTMD_BUF_COUNT(&d->ruby.pages, ptmd_ruby_page);
        d->w.ruby_page_size = n ? 0 : d->ruby.page_size;
        for (i = 0; i < n; i++) {
            const ptmd_ruby_page *pg = PTMD_BUF_AT(&d->ruby.pages, ptmd_ruby_page, i);
            uint64_t r[2] = { pg->start, pg->end };
            if (ptmd_buf_append(&d->w.exclude, r, sizeof(r)) != 0) {
                ptmd_fail_sys(err, errno, "exclusions", "mmap");
                goto out;
            }
        }
    }
    if (ptmd_check_allocator(lc, &d->w.src.mem, err) != 0) goto out;
    if (ptmd_walk_validate(&d->w, err) != 0) goto out;
    if (collect_strings(d, lc, o) != 0) { ptmd_fail_sys(err, errno, "strings", "mmap"); goto out; }
    if (ptmd_writer_open(&d->writer, o->path, err) != 0) goto out;
    if (ptmd_arena_ring(&d->w, 0) < 0) { ptmd_fail_sys(err, errno, "arena ring", "mmap"); goto out; }
    if (oracles_prepare(PTMD_BUF_COUNT(&d->w.ring, uint64_t), err) != 0) goto out;

    /* from here until the rename: no malloc */
    clock_gettime(CLOCK_REALTIME, &now);
    t0 = ptmd_now_ns();
    if (ptmd_walk_run(&d->w, err) != 0) goto out;
    t1 = ptmd_now_ns();
    /* glibc's own counters right after, over the heap just walked, unless the walk found a list
     * broken that glibc would follow blindly (and crash the process on) */
    oracles = !d->w.lists_unsafe && o->oracles != PTMD_ORACLES_OFF;
    skipped = oracles && o->oracles == PTMD_ORACLES_AUTO && !o->fork_child &&
              d->w.list_entries > PTMD_ORACLES_AUTO_MAX_ENTRIES;
    oracles = oracles && !skipped;
    outgrown = oracles && capture_oracles(d) != 0;
    t2 = ptmd_now_ns();
    if (ptmd_walk_residency(&d->w, err) != 0) goto out;
    d->snapshot = o->fork_child;
    fill_meta(d, lc, &now);
    if (o->fork_child) d->meta.flags |= PTMD_MF_FORK_CHILD;
    if (!oracles || outgrown)
        d->meta.flags |= PTMD_MF_NO_ORACLES | (outgrown ? PTMD_MF_ORACLES_OUTGROWN : 0) |
                         (o->oracles == PTMD_ORACLES_OFF ? PTMD_MF_ORACLES_OFF : 0) |
                         (skipped ? PTMD_MF_ORACLES_SKIPPED : 0);
    else if (!d->mallinfo_exact) d->meta.flags |= PTMD_MF_MALLINFO32;
    d->meta.walk_ns = t1 - t0;
    d->meta.residency_ns = ptmd_now_ns() - t2;
    if (ruby_page_rss(d, err) != 0) goto out;
    capture_mappings(d);
    if (ptmd_walk_references(&d->w, err) != 0) goto out;
    if (ptmd_walk_roots(&d->w, err) != 0) goto out;
    if (o->trim_check && trim_check(d, err) != 0) goto out;
    if (d->ruby.present) {
        d->ruby.meta.refs_ns = d->w.refs_ns + d->w.roots_ns;
        if (o->references) d->ruby.meta.flags |= PTMD_RF_REFERENCES;
    }

    rc = write_file(d, err);
out:
    if (rc != 0) ptmd_writer_abort(&d->writer);
    __atomic_store_n(&dump_busy, 0, __ATOMIC_RELEASE);
    return rc;
}

/* The parent of another process, from /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold
 * anything but ends at the last ')'); 0 when unknown. */
static uint64_t process_ppid(int pid)
{
    char path[64], buf[1024];
    const char *p;
    uint64_t v = 0;
    ssize_t n;
    int fd;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    if (!(p = strrchr(buf, ')')) || p[1] != ' ' || !p[2] || p[3] != ' ') return 0;
    for (p += 4; *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
    return v;
}

/* The rest of a dump from outside (another process, a core), once its memory is in d->w.src and its
 * mappings in d->w.maps, libc located and the writer open: the walk on that memory and the file. A
 * live process's smaps (mappings_pid) are read after the walk, the process running again. */
static int outside_walk_write(ptmd_dump_state *d, const ptmd_dump_opts *o, ptmd_libc *lc, uint64_t ppid,
                              int mappings_pid, ptmd_err *err)
{
    struct timespec now;
    ptmd_err ignored;
    uint64_t t0, t1;
    if (ptmd_walk_prepare(&d->w, lc, err) != 0) return -1;
    if (!ptmd_outside_tls(&d->w, lc)) {
        lc->tcache_tls = lc->thread_arena_tls = -1;
        d->source.flags |= PTMD_SRCF_NO_TLS;
    }
    if (ptmd_walk_validate(&d->w, err) != 0) return -1;
    if (collect_strings(d, lc, o) != 0) return ptmd_fail_sys(err, errno, "strings", "mmap");
    clock_gettime(CLOCK_REALTIME, &now);
    t0 = ptmd_now_ns();
    if (ptmd_walk_run(&d->w, err) != 0) return -1;
    t1 = ptmd_now_ns();
    if (ptmd_walk_residency(&d->w, err) != 0) return -1;
    fill_meta(d, lc, &now);
    d->meta.pid = (uint64_t)d->w.src.pid;
    d->meta.ppid = ppid;
    d->meta.flags |= PTMD_MF_NO_ORACLES;
    d->meta.walk_ns = t1 - t0;
    d->meta.residency_ns = ptmd_now_ns() - t1;
    if (mappings_pid && ptmd_mappings_read(&d->mappings, mappings_pid, &ignored) != 0) d->mappings.present = 0;
    d->has_source = 1;
    return write_file(d, err);
}

/* main_arena holds no heap: its top is 0 while malloc_init_state has not run, initial_top (its own
 * unsorted bin) once it has and nothing was allocated. glibc 2.36 runs it on the first malloc, 2.43 at
 * start-up, whatever the process's malloc is. */
static int never_used(ptmd_walk *w, const ptmd_libc *lc)
{
    uint64_t top;
    if (ptmd_guarded_copy(w, lc->main_arena + lc->layout->ms_top, &top, sizeof(top)) != 0) return 0;
    return top == 0 || top == ptmd_initial_top(lc->main_arena + lc->layout->ms_bins);
}

static ptmd_libc *outside_libc(ptmd_dump_state *d, ptmd_err *err)
{
    ptmd_libc *lc = mmap(NULL, sizeof(*lc), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (lc == MAP_FAILED) {
        ptmd_fail_sys(err, errno, "libc of the target", "mmap");
        return NULL;
    }
    d->target_lc = lc;
    return lc;
}

int ptmd_dump_process(ptmd_dump_state *d, const ptmd_dump_opts *o, int pid, ptmd_err *err)
{
    ptmd_libc *lc;
    int rc = -1, expected = 0;

    if (pid <= 0) return ptmd_fail(err, PTMD_E_ARGUMENT, "not a process id: %d", pid);
    if (pid == (int)getpid())
        return ptmd_fail(err, PTMD_E_ARGUMENT, "process %d is this process: dump it with PtmallocDump.dump", pid);
    if (!__atomic_compare_exchange_n(&dump_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return ptmd_fail(err, PTMD_E_BUSY, "a dump is already running in this process");
    if (!(lc = outside_libc(d, err))) goto out;
    /* everything that can fail without stopping the target, first */
    if (ptmd_maps_load_pid(&d->w.maps, pid, err) != 0) goto out;
    if (!d->w.maps.count) {
        ptmd_fail(err, PTMD_E_TARGET, "process %d has no memory to read: it has exited (a zombie its parent has not "
                  "reaped yet) or is a kernel thread", pid);
        goto out;
    }
    if (ptmd_locate_process(pid, &d->w.maps, o->debug_dir, o->symbols, lc, err) != 0) goto out;
    d->source.flags = PTMD_SRCF_NO_RUBY | PTMD_SRCF_NO_REFERENCES | PTMD_SRCF_NO_ORACLES;
    if (ptmd_writer_open(&d->writer, o->path, err) != 0) goto out;
    if (ptmd_outside_copy(&d->w, lc, pid, &d->source, err) != 0) goto out;
    d->source.kind = d->w.src.ops->kind;
    /* the target runs again: the walk reads the copy */
    if (never_used(&d->w, lc)) {
        ptmd_fail(err, PTMD_E_ALLOCATOR, "glibc's malloc was never used in process %d (main_arena holds no "
                  "heap): it allocates with another allocator (jemalloc, tcmalloc, ...) or not at all, "
                  "and ptmalloc-dump reads glibc's malloc only", pid);
        goto out;
    }
    rc = outside_walk_write(d, o, lc, process_ppid(pid), pid, err);
out:
    if (rc != 0) ptmd_writer_abort(&d->writer);
    ptmd_source_let_go(&d->w.src);
    __atomic_store_n(&dump_busy, 0, __ATOMIC_RELEASE);
    return rc;
}

int ptmd_dump_core(ptmd_dump_state *d, const ptmd_dump_opts *o, const char *core, ptmd_err *err)
{
    ptmd_libc *lc;
    uint64_t held;
    int rc = -1, expected = 0;

    if (!__atomic_compare_exchange_n(&dump_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return ptmd_fail(err, PTMD_E_BUSY, "a dump is already running in this process");
    if (!(lc = outside_libc(d, err))) goto out;
    if (ptmd_source_open_core(&d->w.src, core, &d->w.maps, err) != 0) goto out;
    if (ptmd_locate_core(&d->w.src, &d->w.maps, core, o->debug_dir, o->symbols, lc, err) != 0) goto out;
    if (never_used(&d->w, lc)) {
        ptmd_fail(err, PTMD_E_ALLOCATOR, "glibc's malloc was never used in the process of core file %s (main_arena "
                  "holds no heap): it allocated with another allocator or not at all", core);
        goto out;
    }
    /* a core cannot be let go for a moment: a lock held in it is a heap caught mid-change */
    if ((held = ptmd_outside_held_arena(&d->w.src, lc)) != 0) {
        ptmd_fail(err, PTMD_E_LOCKED, "arena %#lx is locked in core file %s (a thread was inside malloc or free "
                  "when it was written): its lists may be half changed, so it is not walked", (unsigned long)held, core);
        goto out;
    }
    d->source.kind = d->w.src.ops->kind;
    d->source.flags = PTMD_SRCF_NO_RUBY | PTMD_SRCF_NO_REFERENCES | PTMD_SRCF_NO_ORACLES | PTMD_SRCF_NO_RESIDENCY;
    d->source.pid = (uint64_t)d->w.src.pid;
    d->source.copied_bytes = d->w.src.copied_bytes;
    d->source.threads = (uint32_t)d->w.src.n_tids;
    if (ptmd_writer_open(&d->writer, o->path, err) != 0) goto out;
    rc = outside_walk_write(d, o, lc, (uint64_t)d->w.src.ppid, 0, err);
out:
    if (rc != 0) ptmd_writer_abort(&d->writer);
    __atomic_store_n(&dump_busy, 0, __ATOMIC_RELEASE);
    return rc;
}

/* What the child must not find for itself, listed just before the fork:
 *   - the parent's threads: in the child, glibc's fork has moved every other thread to the stack
 *     cache with its tid cleared (reclaim_stacks), so the child could find their tcaches only by
 *     structure, and a damaged one not at all;
 *   - libc's location, whether malloc is glibc's, and the loaded objects' writable segments (roots):
 *     these call dl_iterate_phdr, dlopen, dlsym and dladdr, which take the loader's locks
 *     (dl_load_write_lock, dl_load_lock). A thread of the parent inside dlopen, dl_iterate_phdr or a
 *     TLS allocation at the fork leaves them held in the child for ever: glibc 2.36's fork resets
 *     dl_load_lock alone (posix/fork.c), and nothing else the lock protects in the child.
 * The child then takes no lock another thread could have held. */
static int before_fork(ptmd_dump_state *d, const ptmd_dump_opts *opts, size_t n_opts, ptmd_err *err)
{
    const ptmd_dump_opts *o = &opts[0];
    const ptmd_libc *lc;
    size_t i;
    int ring, references = 0;
    if (ptmd_locate(o->debug_dir, o->symbols, &lc, err) != 0) return -1;
    d->w.lc = lc;
    if (!lc->layout) return 0;                  /* the child says that the layout is unknown */
    if (ptmd_source_self(&d->w.src, err) != 0) return -1;
    if (ptmd_check_allocator(lc, &d->w.src.mem, err) != 0) return -1;
    if ((ring = ptmd_walk_ring_before_fork(&d->w, lc)) < 0) return ptmd_fail_sys(err, errno, "arena ring", "mmap");
    if (ring > 0) {
        const ptmd_anomaly_rec *a = PTMD_BUF_AT(&d->w.anomalies, ptmd_anomaly_rec, 0);
        size_t n = PTMD_BUF_COUNT(&d->w.ring, uint64_t);
        int cycle = a->kind == PTMD_AN_ARENA_RING;
        return ptmd_fail(err, PTMD_E_HEAP,
                         "the heap is damaged: arena %#lx's next (%#lx) %s; glibc's fork locks every arena "
                         "along the ring and would never return. Dump in process (fork: false): that records "
                         "the damage and walks the %lu arena%s before it",
                         (unsigned long)PTMD_BUF_AT(&d->w.ring, uint64_t, n - 1)[0],
                         (unsigned long)(cycle ? a->detail : a->address),
                         cycle ? "leads back to an arena already on the ring, not to main_arena" : "is not an arena",
                         (unsigned long)n, n == 1 ? "" : "s");
    }
    d->w.anomalies.len = 0;
    if (ptmd_walk_threads(&d->w, err) != 0) return -1;
    for (i = 0; i < n_opts; i++) references |= opts[i].references;
    if (references && ptmd_walk_objects(&d->w) != 0) return ptmd_fail_sys(err, errno, "root table", "mmap");
    return 0;
}

/* One line on stderr from a snapshot child whose parent does not wait for it: the error as the
 * parent would have raised it. */
static void report_failure(const char *path, const ptmd_err *e)
{
    char line[1024];
    int n;
    if (e->code == PTMD_E_SYSTEM)
        n = snprintf(line, sizeof(line), "ptmalloc_dump: snapshot process %d did not write %s: %s - %s %s\n",
                     (int)getpid(), path, strerror(e->sys_errno), e->msg, e->path);
    else
        n = snprintf(line, sizeof(line), "ptmalloc_dump: snapshot process %d did not write %s: %s\n",
                     (int)getpid(), path, e->msg);
    if (n > 0) {
        ssize_t k = write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        PTMD_UNUSED(k);
    }
}

/* The snapshot child's Ruby pass, on its copy, after its parent's mappings (which should lag the fork
 * as little as they can). A pass that cannot see every object leaves the dump without Ruby data, and
 * says why in the strings where the parent's would say it was recorded. */
static void child_ruby_pass(ptmd_dump_state *d)
{
    d->ruby.page_size = ptmd_ruby_heap_page_size();
    if (ptmd_ruby_pass_in_copy(&d->ruby, d->ruby_problem, sizeof(d->ruby_problem)) != 0) {
        ptmd_ruby_data empty;
        memset(&empty, 0, sizeof(empty));
        empty.page_size = d->ruby.page_size;
        d->ruby = empty;            /* what the pass had mapped goes with the child */
        d->snap.flags &= ~(uint32_t)PTMD_SNF_RUBY_IN_CHILD;
    }
}

int ptmd_dump_fork(ptmd_dump_state *d, const ptmd_dump_opts *opts, size_t n_opts, int ruby_in_child, int *pid_out,
                   int *errfd_out, ptmd_err *err)
{
    int fds[2];
    pid_t pid;
    int parent = (int)getpid();
    uint64_t t_fork;
    if (before_fork(d, opts, n_opts, err) != 0) return -1;
    if (pipe2(fds, O_CLOEXEC) != 0) return ptmd_fail_sys(err, errno, "pipe", "cannot create a pipe for the snapshot");
    if (ruby_in_child) d->snap.flags |= PTMD_SNF_RUBY_IN_CHILD;
    t_fork = ptmd_now_ns();
    d->snap.before_fork_ns = t_fork - d->snap_start;
    /* glibc's fork takes every arena lock around the fork: the child's heap is one consistent state */
    pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return ptmd_fail_sys(err, e, "fork", "cannot fork the snapshot process");
    }
    if (pid == 0) {
        size_t i;
        int rc = 0;
        d->snap.fork_ns = ptmd_now_ns() - t_fork;
        ptmd_close_sockets();
        close(fds[0]);
        signal(SIGPIPE, SIG_IGN);
        read_parent_mappings(&d->mappings, parent);
        if (ruby_in_child) child_ruby_pass(d);
        /* several dumps of the same frozen heap, one after the other: nothing runs in between */
        for (i = 0; i < n_opts && rc == 0; i++) {
            ptmd_dump_opts co = opts[i];
            ptmd_dump_state di;
            ptmd_err cerr;
            ptmd_dump_init(&di);
            di.ruby = d->ruby;                  /* recorded once for every target, shared read-only */
            di.snap = d->snap;
            di.has_snapshot = 1;
            memcpy(di.ruby_problem, d->ruby_problem, sizeof(di.ruby_problem));
            di.parent = &d->w;
            di.parent_mappings = &d->mappings;
            co.fork_child = 1;
            memset(&cerr, 0, sizeof(cerr));
            rc = ptmd_dump_run(&di, &co, &cerr);
            if (rc != 0) {
                ssize_t k = write(fds[1], &cerr, sizeof(cerr));
                PTMD_UNUSED(k);
                if (co.report_stderr) report_failure(co.path, &cerr);
            }
        }
        _exit(rc == 0 ? 0 : 1);
    }
    close(fds[1]);
    *pid_out = (int)pid;
    *errfd_out = fds[0];
    return 0;
}

static void view_rss(const ptmd_dump_state *d, ptmd_view *v)
{
    if (d->ruby.present) {
        v->gc = &d->ruby.gc;
        v->ruby_page_rss = (const uint64_t *)(const void *)d->ruby_rss.base;
        v->n_ruby_page_rss = PTMD_BUF_COUNT(&d->ruby_rss, uint64_t);
    }
    if (d->mappings.present) {
        v->mappings_head = &d->mappings.head;
        v->mappings = (const ptmd_mapping_rec *)(const void *)d->mappings.recs.base;
        v->n_mappings = PTMD_BUF_COUNT(&d->mappings.recs, ptmd_mapping_rec);
        v->mapping_paths = (const char *)d->mappings.paths.base;
    }
}

void ptmd_dump_view(const ptmd_dump_state *d, ptmd_view *v)
{
    const ptmd_walk *w = &d->w;
    memset(v, 0, sizeof(*v));
    v->meta = &d->meta;
    v->mallinfo2 = &d->mallinfo2;
    v->malloc_info = d->malloc_info;
    v->malloc_info_len = d->malloc_info_len;
    v->strings = d->strings.base;
    v->strings_len = d->strings.len;
    v->arenas = (const ptmd_arena_rec *)(const void *)w->arenas.base;
    v->n_arenas = PTMD_BUF_COUNT(&w->arenas, ptmd_arena_rec);
    v->heaps = (const ptmd_heap_rec *)(const void *)w->heaps.base;
    v->n_heaps = PTMD_BUF_COUNT(&w->heaps, ptmd_heap_rec);
    if (PTMD_BUF_COUNT(&w->heap_order, uint32_t) == v->n_heaps)   /* sorted once the heaps were final */
        v->heap_order = (const uint32_t *)(const void *)w->heap_order.base;
    v->chunks = (const ptmd_chunk_rec *)(const void *)w->chunks.base;
    v->n_chunks = PTMD_BUF_COUNT(&w->chunks, ptmd_chunk_rec);
    v->pages = w->pages.base;
    v->n_pages = w->pages.len;
    v->threads = (const ptmd_thread_rec *)(const void *)w->threads.base;
    v->n_threads = PTMD_BUF_COUNT(&w->threads, ptmd_thread_rec);
    v->anomalies = (const ptmd_anomaly_rec *)(const void *)w->anomalies.base;
    v->n_anomalies = PTMD_BUF_COUNT(&w->anomalies, ptmd_anomaly_rec);
    if (w->L && w->L->tcache_bins) {
        v->tcache_entries = (const ptmd_tcache_entry *)(const void *)w->tcache_entries.base;
        v->n_tcache_entries = PTMD_BUF_COUNT(&w->tcache_entries, ptmd_tcache_entry);
    }
    if (d->ruby.present) {
        v->ruby_meta = &d->ruby.meta;
        v->ruby_pages = (const ptmd_ruby_page *)(const void *)d->ruby.pages.base;
        v->n_ruby_pages = PTMD_BUF_COUNT(&d->ruby.pages, ptmd_ruby_page);
        v->ruby_objects = (const ptmd_ruby_object *)(const void *)d->ruby.objects.base;
        v->n_ruby_objects = PTMD_BUF_COUNT(&d->ruby.objects, ptmd_ruby_object);
        v->ruby_words = (const uint64_t *)(const void *)d->ruby.words.base;
        v->n_ruby_words = PTMD_BUF_COUNT(&d->ruby.words, uint64_t);
        v->ruby_names = d->ruby.names.base;
        v->ruby_names_len = d->ruby.names.len;
        v->n_ruby_names = d->ruby.n_names;
        if (d->ruby.code_present) {
            v->ruby_code = (const ptmd_ruby_code *)(const void *)d->ruby.code.base;
            v->n_ruby_code = PTMD_BUF_COUNT(&d->ruby.code, ptmd_ruby_code);
            v->ruby_code_names = d->ruby.code_names.base;
            v->ruby_code_names_len = d->ruby.code_names.len;
            v->n_ruby_code_names = d->ruby.n_code_names;
        }
    }
    if (w->references) {
        v->refs = (const ptmd_ref *)(const void *)w->refs.base;
        v->n_refs = PTMD_BUF_COUNT(&w->refs, ptmd_ref);
        v->int_refs = (const ptmd_ref *)(const void *)w->int_refs.base;
        v->n_int_refs = PTMD_BUF_COUNT(&w->int_refs, ptmd_ref);
        v->roots = (const ptmd_root_rec *)(const void *)w->roots.base;
        v->n_roots = PTMD_BUF_COUNT(&w->roots, ptmd_root_rec);
        v->root_refs = (const ptmd_root_ref *)(const void *)w->root_refs.base;
        v->n_root_refs = PTMD_BUF_COUNT(&w->root_refs, ptmd_root_ref);
    }
    if (d->trim.base) {
        v->trim_released = (const uint64_t *)(const void *)d->trim.base;
        v->n_trim_released = PTMD_BUF_COUNT(&d->trim, uint64_t);
    }
    if (d->has_snapshot) v->snapshot = &d->snap;
    view_rss(d, v);
}

void ptmd_dump_release(ptmd_dump_state *d)
{
    ptmd_buf_release(&d->trim);
    ptmd_buf_release(&d->ruby_rss);
    if (!d->parent_mappings) ptmd_mappings_release(&d->mappings);
    ptmd_buf_release(&d->ruby.pages);
    ptmd_buf_release(&d->ruby.objects);
    ptmd_buf_release(&d->ruby.words);
    ptmd_buf_release(&d->ruby.names);
    ptmd_buf_release(&d->ruby.code);
    ptmd_buf_release(&d->ruby.code_names);
    ptmd_writer_abort(&d->writer);
    ptmd_walk_release(&d->w);
    if (d->target_lc) munmap(d->target_lc, sizeof(*d->target_lc));
    d->target_lc = NULL;
    ptmd_buf_release(&d->strings);
    d->malloc_info = NULL;
}
