/* What differs between the 64-bit Linux platforms the walker reads. malloc's structures are the same
 * on both (LP64, MALLOC_ALIGNMENT 16); around each thread they are not:
 *   - x86-64 is TLS variant II (TLS_TCB_AT_TP): the thread pointer (fs_base) is the TCB, which is the
 *     start of struct pthread (tcbhead_t, 0x2c0 bytes, is its header); static TLS lies below it;
 *   - aarch64 is variant I (TLS_DTV_AT_TP): the thread pointer (tpidr_el0) points at a 16-byte TCB
 *     (dtv, then a private word), struct pthread lies just below it (TLS_PRE_TCB_SIZE) and static TLS
 *     above it. struct pthread's header is 24 words of padding there.
 * glibc: sysdeps/x86_64/nptl/tls.h, sysdeps/aarch64/nptl/tls.h, nptl/descr.h. */
#ifndef PTMD_ARCH_H
#define PTMD_ARCH_H

#include <elf.h>
#include <stdint.h>

#if defined(__x86_64__)
#define PTMD_ARCH_NAME "x86-64"
#define PTMD_TLS_VARIANT 2
#define PTMD_TCB_DTV 8          /* tcbhead_t.dtv, from the thread pointer */
#define PTMD_PTHREAD_LIST 0x2c0 /* struct pthread's `list`, after tcbhead_t */
#define PTMD_R_RELATIVE R_X86_64_RELATIVE
#define PTMD_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define PTMD_ARCH_NAME "aarch64"
#define PTMD_TLS_VARIANT 1
#define PTMD_TCB_DTV 0
#define PTMD_PTHREAD_LIST 0xc0 /* after void *__padding[24] */
#define PTMD_R_RELATIVE R_AARCH64_RELATIVE
#define PTMD_ELF_MACHINE EM_AARCH64
#else
#error "ptmalloc_dump reads glibc's heap on x86-64 and aarch64 Linux only"
#endif

/* The calling thread's thread pointer. */
static inline uint64_t ptmd_thread_pointer(void)
{
    uint64_t tp;
#if defined(__x86_64__)
    __asm__("mov %%fs:0, %0" : "=r"(tp));
#else
    __asm__("mrs %0, tpidr_el0" : "=r"(tp));
#endif
    return tp;
}

/* struct pthread's robust-mutex list (nptl/descr.h), the same on both from 2.27 to 2.43: robust_prev
 * at `list` + 24, then struct robust_list_head { list, futex_offset, list_op_pending }. Every thread
 * sets futex_offset to offsetof (__data.__lock) - offsetof (__data.__list.__next) of a 64-bit
 * pthread_mutex_t, -32, when it starts (__tls_init_tp, create_thread). */
#define PTMD_PTHREAD_FUTEX_OFFSET_FROM_LIST 40
#define PTMD_PTHREAD_FUTEX_OFFSET ((uint64_t)-32)

#endif
