/* Finding libc in this process, its symbol file, and the addresses of malloc's globals. */
#ifndef PTMD_LOCATE_H
#define PTMD_LOCATE_H

#include "format/ptmd.h"
#include "capture/layout.h"
#include "capture/procfs.h"
#include <elf.h>
#include <limits.h>

#define PTMD_TRIED_MAX 8

typedef struct {
    /* the loaded libc */
    char libc_path[PATH_MAX];
    uintptr_t libc_base;              /* load bias (dlpi_addr) */
    uintptr_t rw_start, rw_end;       /* libc's writable PT_LOAD segment(s) */
    uintptr_t image_start, image_end; /* all of libc's PT_LOAD segments */
    size_t tls_modid;                 /* dlpi_tls_modid, 0 if libc has no TLS */
    size_t tls_size;                  /* libc's PT_TLS p_memsz */
    /* static TLS: a thread's struct pthread - tls_offset = its libc TLS block, modulo 2^64 (the block is
     * below it on x86-64, above it on aarch64: capture/arch.h) */
    uintptr_t tls_offset;
    uintptr_t tp_from_pthread; /* thread pointer - struct pthread: 0 on x86-64, TLS_PRE_TCB_SIZE on aarch64 */
    unsigned char build_id[64];
    size_t build_id_len;
    char glibc_version[32];
    int major, minor;
    const ptmd_layout *layout;
    int layout_assumed; /* glibc is newer than the table: its newest layout, on trial */

    /* where the symbols came from */
    int symbol_source; /* PTMD_SYMSRC_* */
    char symbol_file[PATH_MAX];
    char debug_dir[PATH_MAX];
    int symbols_mode;
    char tried[PTMD_TRIED_MAX][PATH_MAX];
    int ntried;

    /* resolved runtime addresses (0 when not available) */
    uintptr_t main_arena;
    uintptr_t mp;
    uintptr_t tcache_key;   /* &tcache_key (2.34+) */
    long tcache_tls;        /* offset of `tcache` in libc's TLS block, -1 if unknown */
    long thread_arena_tls;  /* offset of `thread_arena`, -1 if unknown */
    uintptr_t tcache_dummy; /* &__tcache_dummy (2.43+), 0 if unknown */
} ptmd_libc;

/* A way to resolve malloc's globals once libc is known; tried in order until one succeeds. */
typedef struct {
    /* 1 when found, 0 when this strategy has nothing, -1 on a hard error (err set). */
    int (*resolve)(ptmd_libc *lc, ptmd_err *err);
} ptmd_locator;

/* Which ways of finding malloc's globals may be used. */
enum {
    PTMD_SYMBOLS_AUTO = 0,     /* a symbol file, else by structure */
    PTMD_SYMBOLS_FILE = 1,     /* a symbol file only */
    PTMD_SYMBOLS_HEURISTIC = 2 /* by structure only */
};

/* Locates libc and resolves its malloc globals, caching the result per process, debug dir and mode.
 * debug_dir may be NULL for the default (PTMALLOC_DUMP_DEBUG_DIR, else /usr/lib/debug). */
int ptmd_locate(const char *debug_dir, int symbols, const ptmd_libc **out, ptmd_err *err);

/* libc of another process, from its mappings (/proc/PID/maps as read into maps, with their text):
 * path, load bias, segments, build-id (from its image in the target), version (from the image's
 * banner) and malloc's globals from a symbol file. The thread-local offsets need the target's threads
 * (tls_offset is left 0). Into lc, which is the caller's. */
int ptmd_locate_process(int pid, const ptmd_maps *maps, const char *debug_dir, int symbols, ptmd_libc *lc,
                        ptmd_err *err);
/* The same for the process a core file was written from (core opened by ptmd_source_open_core): libc
 * from its NT_FILE note, the build-id from its image in the core. */
struct ptmd_source;
int ptmd_locate_core(struct ptmd_source *core, const ptmd_maps *maps, const char *core_path, const char *debug_dir,
                     int symbols, ptmd_libc *lc, ptmd_err *err);

/* Fails with PTMD_E_ALLOCATOR when malloc in this process is not glibc's. May call malloc. */
int ptmd_check_allocator(const ptmd_libc *lc, ptmd_memreader *mem, ptmd_err *err);

/* The calling thread's libc TLS block (for thread-local malloc variables), or 0. */
uintptr_t ptmd_libc_tls_block_self(const ptmd_libc *lc);

#endif
