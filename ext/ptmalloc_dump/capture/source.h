/* Where the walk's memory comes from: this process (direct reads, fault-free ones where memory may
 * vanish), or a copy of another process's memory taken while it was stopped with ptrace (a table of
 * regions, each a remote range and the local mmapped copy of it, with the page residency pagemap gave
 * for it). Every read of the target's memory by the walk goes through here. A core file is the third
 * source: its PT_LOAD segments, mapped read-only from the file, are the regions. */
#ifndef PTMD_SOURCE_H
#define PTMD_SOURCE_H

#include "format/ptmd.h"
#include "capture/procfs.h"
#include "capture/scratch.h"

#define PTMD_SOURCE_MAX_TASKS 4096

typedef enum { PTMD_SOURCE_SELF = 0, PTMD_SOURCE_PID = 1, PTMD_SOURCE_CORE = 2 } ptmd_source_kind;

/* One range of the copy: [start, end) of the target, its bytes at local, one PTMD_PAGE_* byte per
 * page at pages (the residency pagemap gave while the target was stopped). */
typedef struct {
    uint64_t start, end;
    unsigned char *local;
    uint8_t *pages;
} ptmd_region;

typedef struct ptmd_source {
    ptmd_source_kind kind;
    int pid;
    ptmd_memreader mem;                 /* the self source's fault-free reads */

    /* a copy: regions in address order, apart (mmap-backed), and the last one a read hit */
    ptmd_buf regions;
    size_t n_regions;
    size_t last;
    uint64_t copied_bytes;              /* bytes read from the target */
    size_t page_size;
    int gone;                           /* the target exited while it was copied */

    /* a core file: mapped read-only (the regions point into it), its NT_FILE note, the main thread's
     * stack pointer */
    const unsigned char *core;
    size_t core_size;
    const unsigned char *nt_file;
    size_t nt_file_len;
    uint64_t main_sp;
    int ppid;

    /* the threads: seized with ptrace, in the order they were, or a core's (mmapped, MAX_TASKS) */
    int *tids;
    uint64_t *fs_base;                  /* each one's thread pointer (PTRACE_GETREGS, NT_PRSTATUS), 0 unknown */
    int n_tids;
    int n_seized;                       /* of tids, those still seized (0 once detached) */
    uint64_t stopped_ns;                /* CLOCK_MONOTONIC when the first thread was seized */
    uint64_t pause_ns;                  /* how long the target stayed stopped (set by detach) */
} ptmd_source;

/* This process as the source: opens the fault-free reader. */
int ptmd_source_self(ptmd_source *s, ptmd_err *err);
/* Seizes and interrupts every thread of pid (re-listing /proc/PID/task until no new one appears),
 * waiting until each has stopped, and reads each one's fs_base. On failure every thread seized is
 * detached again. */
int ptmd_source_attach(ptmd_source *s, int pid, ptmd_err *err);
/* Detaches every seized thread (the target runs again) and records the pause; safe to call twice.
 * Threads of a target that exited meanwhile are reaped (but the leader when this process is its
 * parent, whose own wait is left its status). */
void ptmd_source_detach(ptmd_source *s);
/* Whether the target has exited: no such process, a zombie, or its memory already gone. */
int ptmd_source_gone(const ptmd_source *s);
/* Test hook: with PTMALLOC_DUMP_TEST_KILL_TARGET=step in the environment, at that step of a dump of
 * another process ("seized": every thread stopped, before the lock check; "maps": its mappings read,
 * before pagemap; "copy": pagemap read, before the bytes) the target is sent SIGKILL, and this waits
 * (bounded) until its memory is gone, so that every step after meets a process that has exited. */
void ptmd_source_test_kill(const ptmd_source *s, const char *step);
/* While the target is stopped: copies the mappings of maps that the walk reads (private readable
 * and writable ones, and libc's image [lo, hi)) into local mmapped regions, with their residency
 * from /proc/PID/pagemap. Anonymous pages neither resident nor swapped are not read (they read as
 * zeros, and reading them would make them resident); file-backed ones are read whole. Mappings left
 * out lose PTMD_MAP_R in maps, so that a readability check agrees with the copy. */
/* Copy buffers made ready while the target still runs: a fresh page costs the kernel a fault when
 * the copy first writes it, and the faults of a few hundred MiB took most of the time the target was
 * stopped. ptmd_source_prefault maps a buffer for each region the copy will take (from mappings read
 * before the stop) and faults in its pages where the target's were resident or swapped then; the
 * copy takes a spare whose region starts where its own does (resized to it), and maps afresh where
 * none does. A failure here only loses the head start. */
typedef struct {
    ptmd_buf regions;                   /* ptmd_region; local NULL once taken (pages unused) */
    size_t n;
} ptmd_copy_spare;
void ptmd_source_prefault(ptmd_copy_spare *sp, int pid, const ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi);
void ptmd_copy_spare_release(ptmd_copy_spare *sp);
int ptmd_source_copy(ptmd_source *s, ptmd_maps *maps, uint64_t lib_lo, uint64_t lib_hi, ptmd_copy_spare *spare,
                     ptmd_err *err);
/* Reads len bytes at the target's addr straight from the stopped target (before the copy). */
int ptmd_source_read_live(const ptmd_source *s, uint64_t addr, void *dst, size_t len);
/* A core file as the source: its PT_LOAD segments as regions (every page the core holds marked
 * present: a core has no residency), its mappings into maps (file-backed where NT_FILE names a file,
 * unreadable where the core left the bytes out), the threads and their fs_base from NT_PRSTATUS, the
 * pid and parent from NT_PRPSINFO. PTMD_E_CORE when the file is not a whole x86-64 ELF core. */
int ptmd_source_open_core(ptmd_source *s, const char *path, ptmd_maps *maps, ptmd_err *err);
/* Entry i of the core's NT_FILE note: start, end, file offset (bytes) and path (NUL-terminated
 * inside the note). 0 when there is such an entry. */
int ptmd_source_core_file(const ptmd_source *s, size_t i, uint64_t *start, uint64_t *end, uint64_t *offset,
                          const char **path);
/* A running process as a source while it is located: every read made in place (process_vm_readv),
 * but for one range read once into a region (libc's writable data, which the search by structure
 * reads word by word). Its values may be changing: what is found with it is checked again on the
 * copy. The region: -1 when the range cannot be read (reads stay in place). */
void ptmd_source_live(ptmd_source *s, int pid);
int ptmd_source_live_region(ptmd_source *s, uint64_t start, uint64_t end);
/* Unmaps the copy and closes the reader; detaches first if needed. */
void ptmd_source_release(ptmd_source *s);

/* The local copy of [addr, addr + len) when one region holds all of it, else NULL (copy sources). */
const unsigned char *ptmd_source_find(ptmd_source *s, uint64_t addr, size_t len);

static inline const unsigned char *ptmd_source_at(ptmd_source *s, uint64_t addr, size_t len)
{
    const ptmd_region *r = (const ptmd_region *)(const void *)s->regions.base + s->last;
    if (s->n_regions && addr >= r->start && addr < r->end && len <= r->end - addr) return r->local + (addr - r->start);
    return ptmd_source_find(s, addr, len);
}

/* Reads len bytes at the target's addr; 0 when all were read. Never faults. */
int ptmd_source_read(ptmd_source *s, uint64_t addr, void *dst, size_t len);
/* [addr, addr + len) known to be mapped (in libc's image, say): in place for this process, from the
 * copy else; 0 when all len bytes were read. */
static inline int ptmd_source_get(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    const unsigned char *p;
    if (s->kind == PTMD_SOURCE_SELF) p = (const unsigned char *)(uintptr_t)addr;
    else if (!(p = ptmd_source_at(s, addr, len))) return ptmd_source_read(s, addr, dst, len);
    __builtin_memcpy(dst, p, len);
    return 0;
}

/* Reads `each` bytes at every address in addrs[0..n) into dst (n*each bytes); ok[i] says which succeeded. */
void ptmd_source_read_many(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok);
/* A 64-bit word of the target, 0 when it cannot be read (outside the copy). */
uint64_t ptmd_source_rd64_slow(ptmd_source *s, uint64_t addr);
/* The copy's page residency for npages pages from the page-aligned start: 0 when the copy covers
 * them all (out filled), -1 otherwise. */
int ptmd_source_pages(const ptmd_source *s, uint64_t start, size_t npages, uint8_t *out);

#endif
