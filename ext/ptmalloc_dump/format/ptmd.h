/* Shared internal declarations: error reporting and small helpers used by every concern. */
#ifndef PTMD_H
#define PTMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

#include "format/format.h"

#define PTMD_UNUSED(x) ((void)(x))
#define PTMD_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Error kinds a plain-C core function can report; the binding maps each to a Ruby class. */
typedef enum {
    PTMD_OK = 0,
    PTMD_E_SYSTEM,    /* a system call failed: errno and the path are kept */
    PTMD_E_SYMBOLS,   /* no usable symbol file for libc */
    PTMD_E_LIBC,      /* glibc version or live structures not understood */
    PTMD_E_ALLOCATOR, /* malloc is not glibc's */
    PTMD_E_PLATFORM,  /* not Linux x86-64 glibc */
    PTMD_E_FORMAT,    /* a dump file is malformed */
    PTMD_E_ARGUMENT,  /* caller misuse */
    PTMD_E_BUSY,      /* a dump is already running in this process */
    PTMD_E_HEAP,      /* the heap is damaged in a way that rules out what was asked */
    PTMD_E_NOMEM,     /* mmap for scratch memory failed */
    PTMD_E_INTERNAL,  /* a library we rely on failed (libpng) */
    PTMD_E_PTRACE,    /* another process may not be traced (Yama, another user, no CAP_SYS_PTRACE) */
    PTMD_E_TARGET,    /* the target process does not exist or exited while it was read */
    PTMD_E_LOCKED,    /* an arena of another process stayed locked each time it was stopped */
    PTMD_E_CORE,      /* a core file is not a whole x86-64 ELF core */
    PTMD_E_STOP       /* a thread of another process did not stop in time */
} ptmd_errcode;

typedef struct {
    ptmd_errcode code;
    int sys_errno;  /* for PTMD_E_SYSTEM */
    char path[512]; /* for PTMD_E_SYSTEM: what the call was about */
    char msg[2048];
} ptmd_err;

/* Records an error; formats like snprintf. Always returns -1 so callers can `return ptmd_fail(...)`. */
int ptmd_fail(ptmd_err *err, ptmd_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records a failed system call with errno and the path or object it concerned. */
int ptmd_fail_sys(ptmd_err *err, int sys_errno, const char *path, const char *what);

/* Bounded string helpers that never allocate. */
size_t ptmd_strlcpy(char *dst, const char *src, size_t size);
size_t ptmd_strlcat(char *dst, const char *src, size_t size);

uint64_t ptmd_now_ns(void); /* CLOCK_MONOTONIC */
/* Lower-case hex of bytes into out (2*len+1 bytes). */
void ptmd_hex(const unsigned char *id, size_t len, char *out);

#endif
