/* Error recording and small helpers shared by the plain-C core (no Ruby API, no malloc). */
#include "format/ptmd.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int ptmd_fail(ptmd_err *err, ptmd_errcode code, const char *fmt, ...)
{
    va_list ap;
    if (!err) return -1;
    err->code = code;
    err->sys_errno = 0;
    err->path[0] = '\0';
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return -1;
}

int ptmd_fail_sys(ptmd_err *err, int sys_errno, const char *path, const char *what)
{
    if (!err) return -1;
    err->code = PTMD_E_SYSTEM;
    err->sys_errno = sys_errno;
    ptmd_strlcpy(err->path, path ? path : "", sizeof(err->path));
    ptmd_strlcpy(err->msg, what ? what : "", sizeof(err->msg));
    return -1;
}

size_t ptmd_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size) {
        size_t k = n < size - 1 ? n : size - 1;
        memcpy(dst, src, k);
        dst[k] = '\0';
    }
    return n;
}

size_t ptmd_strlcat(char *dst, const char *src, size_t size)
{
    size_t d = strnlen(dst, size);
    if (d == size) return d + strlen(src);
    return d + ptmd_strlcpy(dst + d, src, size - d);
}

uint64_t ptmd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ptmd_hex(const unsigned char *id, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < len; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[2 * len] = '\0';
}
