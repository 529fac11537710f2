/* The process's own view of itself: mappings, fault-free memory reads, page residency, threads. */
#ifndef PTMD_PROCFS_H
#define PTMD_PROCFS_H

#include "format/ptmd.h"
#include "capture/scratch.h"
#include "format/format.h"

enum { PTMD_MAP_R = 1, PTMD_MAP_W = 2, PTMD_MAP_X = 4, PTMD_MAP_PRIVATE = 8 };

typedef enum {
    PTMD_MAPKIND_ANON = 0, /* anonymous, no name (or [anon:...]) */
    PTMD_MAPKIND_BRK,      /* [heap] */
    PTMD_MAPKIND_STACK,    /* [stack] */
    PTMD_MAPKIND_FILE,     /* backed by a file */
    PTMD_MAPKIND_SPECIAL   /* [vdso], [vvar], [vsyscall], ... */
} ptmd_mapkind;

typedef struct {
    uint64_t start, end;
    uint64_t offset, inode;
    uint32_t prot;
    uint32_t kind;
} ptmd_map;

typedef struct {
    ptmd_buf text; /* raw /proc/self/maps */
    ptmd_buf maps; /* ptmd_map[], sorted by start */
    size_t count;
} ptmd_maps;

/* A whole /proc file into out (mmapped scratch grown step bytes at a time): open/read only. */
int ptmd_read_file(const char *path, ptmd_buf *out, size_t step, ptmd_err *err);
/* A small /proc file into buf (NUL-terminated, at most cap - 1 bytes): 0, or -1 when unreadable. */
int ptmd_read_small(const char *path, char *buf, size_t cap);
/* The state letter and the parent of a /proc/PID/stat or /proc/PID/task/TID/stat ("pid (comm) state
 * ppid ...": comm may hold anything but ends at the last ')'); either may be NULL. 0, or -1 when it
 * cannot be read. */
int ptmd_proc_stat(const char *path, char *state, int *ppid);
/* The parent of process pid, 0 when unknown. */
int ptmd_proc_parent(int pid);
/* A hexadecimal field at *pp (either case); *pp moves past it. */
uint64_t ptmd_parse_hex(const char **pp, const char *end);

int ptmd_maps_load(ptmd_maps *m, ptmd_err *err);
/* The mappings of another process (/proc/PID/maps); TargetGone when it does not exist. */
int ptmd_maps_load_pid(ptmd_maps *m, int pid, ptmd_err *err);
void ptmd_maps_release(ptmd_maps *m);
const ptmd_map *ptmd_maps_find(const ptmd_maps *m, uintptr_t addr);
/* True when [addr, addr+len) lies in readable mappings (adjacent ones may be chained). */
int ptmd_maps_readable(const ptmd_maps *m, uintptr_t addr, size_t len);

/* Reads of memory that another thread may unmap at any moment: never fault, report failure instead. */
typedef struct {
    int mem_fd; /* /proc/self/mem, used when process_vm_readv is refused */
    int use_vm_readv;
} ptmd_memreader;

int ptmd_memreader_open(ptmd_memreader *r, ptmd_err *err);
void ptmd_memreader_close(ptmd_memreader *r);
/* 0 when all len bytes were read. */
int ptmd_safe_read(ptmd_memreader *r, uintptr_t addr, void *dst, size_t len);
/* Reads `each` bytes at every address in addrs[0..n) into dst (n*each bytes); ok[i] says which succeeded. */
void ptmd_safe_read_many(ptmd_memreader *r, const uintptr_t *addrs, size_t n, size_t each, void *dst,
                         unsigned char *ok);

typedef struct {
    int fd; /* /proc/self/pagemap, or -1 to use mincore */
    ptmd_residency_source source;
    size_t page_size;
    uint64_t *entries; /* fixed scratch, mmapped */
    size_t cap;
} ptmd_pagemap;

int ptmd_pagemap_open(ptmd_pagemap *pm, ptmd_err *err);
void ptmd_pagemap_close(ptmd_pagemap *pm);
/* The PTMD_PAGE_* flags of one /proc/PID/pagemap entry. */
uint8_t ptmd_pagemap_flags(uint64_t entry);
/* Fills out[0..npages) with PTMD_PAGE_* flags for pages starting at the page-aligned `start`. */
int ptmd_pagemap_read(ptmd_pagemap *pm, uintptr_t start, size_t npages, uint8_t *out);

/* Thread ids of process pid (0: this one) from /proc/PID/task, without allocating; returns the count (may
 * exceed max), -1 when the process is gone. */
long ptmd_list_tids(int pid, int *tids, size_t max);
/* Closes every socket this process holds (a fork snapshot's child: it needs none, and a copy of a
 * worker's client connection kept open would keep the client waiting for the connection's end). */
void ptmd_close_sockets(void);

#endif
