/* Assertions of the unit tests: a failed check prints where and what, and the run goes on. */
#ifndef PTMD_UNIT_CHECK_H
#define PTMD_UNIT_CHECK_H

#include "format/view.h"

#include <inttypes.h>
#include <stdio.h>

extern unsigned long unit_checks, unit_failures;
extern const char *unit_case;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        unit_checks++;                                                                                                 \
        if (!(cond)) {                                                                                                 \
            unit_failures++;                                                                                           \
            fprintf(stderr, "%s:%d: %s: check failed: %s: ", __FILE__, __LINE__, unit_case, #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)
#define CHECK_EQ(a, b)                                                                                                 \
    CHECK((uint64_t)(a) == (uint64_t)(b), "%s is %" PRIu64 ", expected %" PRIu64, #a, (uint64_t)(a), (uint64_t)(b))

/* The test groups (one file each). */
void test_format(void);
void test_index(void);
void test_analysis(void);
void test_dominators(void);
/* Runs the figures of analysis/ over a view the reader accepted (test_analysis.c). */
void exercise(const ptmd_view *v);

#endif
