/* Where the walk's memory comes from, behind one table of functions (ptmd_source_ops): this process
 * (source_self.c), another process stopped with ptrace and copied (source_ptrace.c, source_copy.c),
 * or a core file (source_core.c). Every read of the target's memory by the walk goes through here, and
 * the walk asks the table what it needs, never which source it has. A copy is a table of regions, each
 * a range of the target and the local bytes of it, with the page residency taken with it. */
#ifndef PTMD_SOURCE_H
#define PTMD_SOURCE_H

#include "format/format.h"
#include "format/ptmd.h"
#include "capture/procfs.h"
#include "capture/scratch.h"

#define PTMD_SOURCE_MAX_TASKS 4096

/* One range of the copy: [start, end) of the target, its bytes at local, one PTMD_PAGE_* byte per
 * page at pages (the residency pagemap gave while the target was stopped). */
typedef struct {
    uint64_t start, end;
    unsigned char *local;
    uint8_t *pages;
} ptmd_region;

typedef struct ptmd_source ptmd_source;

/* What differs between sources. A NULL function does what its comment says for NULL. */
typedef struct {
    uint32_t kind; /* PTMD_SOURCE_KIND_* (format.h), as the SOURCE section says */
    /* The target is this process: its addresses are read in place (and may be prefetched), its arena
     * locks are taken for the walk, the dump's own buffers lie among its mappings, and its threads are
     * found on glibc's lists. */
    int in_place;
    /* len bytes at addr into dst, 0 when all were read; never faults. */
    int (*read)(ptmd_source *s, uint64_t addr, void *dst, size_t len);
    /* `each` bytes at every address in addrs[0..n) into dst (n*each bytes); ok[i] says which succeeded. */
    void (*read_many)(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok);
    /* Reads the target as it is at this moment rather than as copied (a process stopped before its
     * copy); NULL: read. */
    int (*read_now)(ptmd_source *s, uint64_t addr, void *dst, size_t len);
    /* The PTMD_PAGE_* flags of npages pages from the page-aligned start: 0 when all are known. */
    int (*pages)(ptmd_source *s, uint64_t start, size_t npages, uint8_t *out);
    /* Reads the mappings into maps again, where they may have changed since they were read (this
     * process runs on while it is walked): 0, or -1 with err set. NULL: they cannot have changed. */
    int (*maps_again)(ptmd_source *s, ptmd_maps *maps, ptmd_err *err);
    /* The threads the source holds (stopped, or a core's): their ids and thread pointers; the count.
     * NULL: none (glibc's lists name them). */
    int (*threads)(const ptmd_source *s, const int **tids, const uint64_t **thread_ptr);
    /* Reads [start, end) once into a region, for reads word by word of a running target; NULL: none. */
    int (*hold_range)(ptmd_source *s, uint64_t start, uint64_t end);
    /* Lets the target run again; NULL: nothing holds it. */
    void (*let_go)(ptmd_source *s);
} ptmd_source_ops;

struct ptmd_source {
    const ptmd_source_ops *ops; /* what differs between sources; NULL until one is opened */
    int in_place;               /* ops->in_place, at hand for the hot reads */
    int pid;
    ptmd_memreader mem;   /* this process: its fault-free reads */
    ptmd_pagemap pagemap; /* this process: its residency; a copy's is in its regions, and
                           * only pagemap.source says where it came from */

    /* a copy: regions in address order, apart (mmap-backed), and the last one a read hit */
    ptmd_buf regions;
    size_t n_regions;
    size_t last;
    uint64_t copied_bytes; /* bytes read from the target */
    size_t page_size;
    int gone; /* the target exited while it was copied */

    /* a core file: mapped read-only (the regions point into it), its NT_FILE note, the main thread's
     * stack pointer */
    const unsigned char *core;
    size_t core_size;
    const unsigned char *nt_file;
    size_t nt_file_len;
    const unsigned char *auxv; /* its NT_AUXV note */
    size_t auxv_len;
    ptmd_buf made_nt_file; /* without NT_FILE: the note as the loaded objects' list tells it */
    uint64_t main_sp;
    int ppid;

    /* the threads: seized with ptrace, in the order they were, or a core's (mmapped, MAX_TASKS) */
    int *tids;
    uint64_t *thread_ptr; /* each one's thread pointer (PTRACE_GETREGS, NT_PRSTATUS), 0 unknown */
    int n_tids;
    int n_seized;        /* of tids, those still seized (0 once detached) */
    uint64_t stopped_ns; /* CLOCK_MONOTONIC when the first thread was seized */
    uint64_t pause_ns;   /* how long the target stayed stopped (set by detach) */
};

/* For the sources' own files: s zeroed, given its ops and pid; then the table of its threads. */
void ptmd_source_init(ptmd_source *s, const ptmd_source_ops *ops, int pid);
int ptmd_source_thread_table(ptmd_source *s);
/* Zeroed mmapped memory of len bytes, NULL when mmap fails. */
void *ptmd_source_zeroed(size_t len);

/* Unmaps the copy and closes the reader; lets the target go first if needed. */
void ptmd_source_release(ptmd_source *s);

/* The local copy of [addr, addr + len) when one region holds all of it, else NULL (copy sources). */
const unsigned char *ptmd_source_find(ptmd_source *s, uint64_t addr, size_t len);

static inline const unsigned char *ptmd_source_at(ptmd_source *s, uint64_t addr, size_t len)
{
    const ptmd_region *r = (const ptmd_region *)(const void *)s->regions.base + s->last;
    if (s->n_regions && addr >= r->start && addr < r->end && len <= r->end - addr) return r->local + (addr - r->start);
    return ptmd_source_find(s, addr, len);
}

/* The table's functions, through s->ops. */
static inline int ptmd_source_read(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    return s->ops->read(s, addr, dst, len);
}
static inline void ptmd_source_read_many(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst,
                                         unsigned char *ok)
{
    s->ops->read_many(s, addrs, n, each, dst, ok);
}
int ptmd_source_read_now(ptmd_source *s, uint64_t addr, void *dst, size_t len);
int ptmd_source_pages(ptmd_source *s, uint64_t start, size_t npages, uint8_t *out);
/* 1 when the mappings were read again, 0 when they cannot have changed, -1 when the read failed. */
int ptmd_source_maps_again(ptmd_source *s, ptmd_maps *maps, ptmd_err *err);
/* The count of the source's own threads (tids, thread_ptr), -1 when it holds none. */
int ptmd_source_threads(const ptmd_source *s, const int **tids, const uint64_t **thread_ptr);
void ptmd_source_hold_range(ptmd_source *s, uint64_t start, uint64_t end);
void ptmd_source_let_go(ptmd_source *s);

/* [addr, addr + len) known to be mapped (in libc's image, say): in place for this process, from the
 * copy else; 0 when all len bytes were read. */
static inline int ptmd_source_get(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    const unsigned char *p;
    if (s->in_place) p = (const unsigned char *)(uintptr_t)addr;
    else if (!(p = ptmd_source_at(s, addr, len))) return ptmd_source_read(s, addr, dst, len);
    __builtin_memcpy(dst, p, len);
    return 0;
}

/* A 64-bit word of the copy, 0 when it cannot be read (outside the copy). */
uint64_t ptmd_source_rd64_slow(ptmd_source *s, uint64_t addr);

/* For the copy sources' tables: len bytes of the copy (0 when all were read); each of many read so;
 * the copy's residency for npages pages from the page-aligned start (0 when it covers them all, out
 * filled; -1 otherwise); the threads held. */
int ptmd_source_copy_read(ptmd_source *s, uint64_t addr, void *dst, size_t len);
void ptmd_source_read_each(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok);
int ptmd_source_copy_pages(ptmd_source *s, uint64_t start, size_t npages, uint8_t *out);
int ptmd_source_held_threads(const ptmd_source *s, const int **tids, const uint64_t **thread_ptr);

#endif
