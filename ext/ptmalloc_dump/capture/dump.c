/* The dump in process, in sequence. Everything that may allocate (locating libc, opening files, reading
 * mappings, the stream malloc_info() writes to) happens before the walk; from there to the rename of
 * the file nothing calls malloc, so malloc_info() and mallinfo2(), called right after the walk,
 * describe exactly the heap it saw. */
#define _GNU_SOURCE
#include "capture/dump.h"
#include "capture/arena.h"
#include "capture/dump_oracles.h"
#include "capture/dump_rss.h"
#include "capture/dump_trim.h"
#include "capture/dump_write.h"
#include "capture/refs.h"
#include "capture/residency.h"
#include "capture/roots.h"
#include "capture/walk.h"

#include <errno.h>
#include <setjmp.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static int dump_busy;

int ptmd_dump_begin(ptmd_err *err)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&dump_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return ptmd_fail(err, PTMD_E_BUSY, "a dump is already running in this process");
    return 0;
}

int ptmd_dump_end(ptmd_dump_state *d, int rc)
{
    if (rc != 0) ptmd_writer_abort(&d->writer);
    ptmd_source_let_go(&d->w.src);
    __atomic_store_n(&dump_busy, 0, __ATOMIC_RELEASE);
    return rc;
}

void ptmd_dump_setup(void)
{
    const ptmd_libc *lc;
    ptmd_memreader mem;
    ptmd_err err;
    memset(&err, 0, sizeof(err));
    ptmd_oracles_setup();
    if (ptmd_locate(NULL, PTMD_SYMBOLS_AUTO, &lc, &err) != 0) return;
    memset(&mem, 0, sizeof(mem));
    mem.mem_fd = -1;
    if (ptmd_memreader_open(&mem, &err) != 0) return;
    ptmd_check_allocator(lc, &mem, &err);
    ptmd_memreader_close(&mem);
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

void ptmd_dump_init(ptmd_dump_state *d)
{
    memset(d, 0, sizeof(*d));
    d->writer.fd = -1;
    d->w.src.mem.mem_fd = -1;
    d->w.src.pagemap.fd = -1;
}

/* A snapshot child's: what its parent listed before the fork (its threads, the loaded objects, the
 * threads not running and its pages' exclusivity), and the parent's lists among what is no mmapped
 * chunk. */
static int take_parent(ptmd_dump_state *d, ptmd_err *err)
{
    const ptmd_buf *given[5] = { &d->parent->threads, &d->parent->objects, &d->parent->gone, &d->parent->sharing,
                                 &d->parent->sharing_pages };
    const ptmd_pagemap *pm = &d->parent->src.pagemap;
    size_t k;
    d->w.given_threads = given[0];
    d->w.given_thread_count = d->parent->thread_count;
    d->w.given_threads_complete = d->parent->threads_complete;
    d->w.given_objects = given[1];
    d->w.given_tls_below = d->parent->tls_below;
    d->w.given_tls_above = d->parent->tls_above;
    d->w.given_gone = given[2];
    d->w.sharing_from = d->parent->sharing_taken ? d->parent : NULL;
    /* the parent's lists and its pagemap's scratch are no mmapped chunks either */
    if (pm->entries) {
        uint64_t r[2] = { (uint64_t)(uintptr_t)pm->entries, (uint64_t)(uintptr_t)pm->entries + pm->cap * 8 };
        if (ptmd_buf_append(&d->w.exclude, r, sizeof(r)) != 0) return ptmd_fail_sys(err, errno, "exclusions", "mmap");
    }
    for (k = 0; k < 5; k++) {
        uint64_t r[2] = { (uint64_t)(uintptr_t)given[k]->base, (uint64_t)(uintptr_t)given[k]->base + given[k]->cap };
        if (given[k]->base && ptmd_buf_append(&d->w.exclude, r, sizeof(r)) != 0)
            return ptmd_fail_sys(err, errno, "exclusions", "mmap");
    }
    return 0;
}

/* Ruby's object pages hold no malloc chunk header unless they are malloc chunks themselves: the
 * mmapped-chunk scan skips them (as the Ruby pass listed them, or known by their structure without
 * it). */
static int exclude_ruby_pages(ptmd_dump_state *d, ptmd_err *err)
{
    size_t i, n = PTMD_BUF_COUNT(&d->ruby.pages, ptmd_ruby_page);
    d->w.ruby_page_size = n ? 0 : d->ruby.page_size;
    for (i = 0; i < n; i++) {
        const ptmd_ruby_page *pg = PTMD_BUF_AT(&d->ruby.pages, ptmd_ruby_page, i);
        uint64_t r[2] = { pg->start, pg->end };
        if (ptmd_buf_append(&d->w.exclude, r, sizeof(r)) != 0) return ptmd_fail_sys(err, errno, "exclusions", "mmap");
    }
    return 0;
}

int ptmd_dump_run(ptmd_dump_state *d, const ptmd_dump_opts *o, ptmd_err *err)
{
    const ptmd_libc *lc;
    struct timespec now;
    uint64_t t0, t1, t2;
    int rc = -1, oracles = 1, outgrown = 0, skipped = 0;

    if (ptmd_dump_begin(err) != 0) return -1;
    /* a snapshot child takes the parent's answer: ptmd_locate takes a mutex, and finding libc afresh
     * the loader's lock, either of which another thread may have held at the fork. The parent located
     * libc for the first target; a later target that asks for the other source (check_symbol_free
     * dumps one snapshot by symbols and by structure) locates it here. */
    if (d->parent && d->parent->lc && reuses_parent_libc(d->parent->lc, o->symbols)) lc = d->parent->lc;
    else if (ptmd_locate(o->debug_dir, o->symbols, &lc, err) != 0) goto out;
    if (!lc->layout) {
        ptmd_fail(err, PTMD_E_LIBC,
                  "glibc %s is not supported: ptmalloc_dump knows the malloc layouts of "
                  "glibc 2.27 to 2.%d",
                  lc->glibc_version, ptmd_layout_newest_minor());
        goto out;
    }
    if (ptmd_walk_prepare(&d->w, lc, err) != 0) goto out;
    d->w.references = o->references;
    note_caller(&d->w);
    if (d->parent && take_parent(d, err) != 0) goto out;
    if (exclude_ruby_pages(d, err) != 0) goto out;
    if (ptmd_check_allocator(lc, &d->w.src.mem, err) != 0) goto out;
    if (ptmd_walk_validate(&d->w, err) != 0) goto out;
    if (ptmd_dump_strings(d, lc, o) != 0) {
        ptmd_fail_sys(err, errno, "strings", "mmap");
        goto out;
    }
    if (ptmd_writer_open(&d->writer, o->path, err) != 0) goto out;
    if (ptmd_arena_ring(&d->w, 0) < 0) {
        ptmd_fail_sys(err, errno, "arena ring", "mmap");
        goto out;
    }
    if (ptmd_oracles_prepare(PTMD_BUF_COUNT(&d->w.ring, uint64_t), err) != 0) goto out;

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
    outgrown = oracles && ptmd_oracles_capture(d) != 0;
    t2 = ptmd_now_ns();
    if (d->w.src.in_place && !d->native_state) d->native_state = ptmd_native_track_self();
    if (ptmd_native_track_capture(&d->w.src, d->native_state, d->ruby.present ? &d->ruby : NULL, &d->native) != 0) {
        ptmd_fail_sys(err, errno, "allocation tracker", "mmap");
        goto out;
    }
    if (ptmd_walk_residency(&d->w, err) != 0) goto out;
    d->snapshot = o->fork_child;
    ptmd_dump_meta(d, lc, &now);
    if (o->fork_child) d->meta.flags |= PTMD_MF_FORK_CHILD;
    if (d->w.sharing_from) d->meta.flags |= PTMD_MF_SHARING_BEFORE_FORK;
    if (!oracles || outgrown)
        d->meta.flags |= PTMD_MF_NO_ORACLES | (outgrown ? PTMD_MF_ORACLES_OUTGROWN : 0) |
                         (o->oracles == PTMD_ORACLES_OFF ? PTMD_MF_ORACLES_OFF : 0) |
                         (skipped ? PTMD_MF_ORACLES_SKIPPED : 0);
    else if (!d->mallinfo_exact) d->meta.flags |= PTMD_MF_MALLINFO32;
    d->meta.walk_ns = t1 - t0;
    d->meta.residency_ns = ptmd_now_ns() - t2;
    if (ptmd_dump_ruby_page_rss(d, err) != 0) goto out;
    ptmd_dump_mappings(d);
    if (ptmd_dump_scratch_rss(d, err) != 0) goto out;
    if (ptmd_walk_references(&d->w, err) != 0) goto out;
    if (ptmd_walk_roots(&d->w, err) != 0) goto out;
    if (o->trim_check && ptmd_dump_trim_check(d, err) != 0) goto out;
    if (d->ruby.present) {
        d->ruby.meta.refs_ns = d->w.refs_ns + d->w.roots_ns;
        if (o->references) d->ruby.meta.flags |= PTMD_RF_REFERENCES;
    }

    rc = ptmd_dump_write(d, err);
out:
    return ptmd_dump_end(d, rc);
}

void ptmd_dump_release(ptmd_dump_state *d)
{
    ptmd_buf_release(&d->trim);
    ptmd_buf_release(&d->ruby_rss);
    ptmd_buf_release(&d->scratch);
    ptmd_native_track_release(&d->native);
    if (!d->parent_mappings) ptmd_mappings_release(&d->mappings);
    ptmd_buf_release(&d->ruby.pages);
    ptmd_buf_release(&d->ruby.objects);
    ptmd_buf_release(&d->ruby.words);
    ptmd_buf_release(&d->ruby.names);
    ptmd_buf_release(&d->ruby.code);
    ptmd_buf_release(&d->ruby.code_names);
    ptmd_buf_release(&d->ruby.graph_counts);
    ptmd_buf_release(&d->ruby.graph_edges);
    ptmd_buf_release(&d->ruby.graph_roots);
    ptmd_buf_release(&d->ruby.graph_edge_names);
    ptmd_buf_release(&d->ruby.stacks);
    ptmd_buf_release(&d->ruby.frames);
    ptmd_buf_release(&d->ruby.traced);
    ptmd_buf_release(&d->ruby.site_names);
    ptmd_writer_abort(&d->writer);
    ptmd_walk_release(&d->w);
    if (d->target_lc) munmap(d->target_lc, sizeof(*d->target_lc));
    d->target_lc = NULL;
    ptmd_buf_release(&d->strings);
    d->malloc_info = NULL;
}
