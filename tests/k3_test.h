/* k3_test.h - the unit-test harness: CHECK macros that count and report, and
 * one summary line that CTest and CI read ("N passed, N failed").
 *
 *   int main(void) { test_x(); test_y(); return k3_test_summary(); }
 *
 * A test binary is one CTest test; each CHECK is one counted assertion. */
#ifndef K3_TESTS_K3_TEST_H
#define K3_TESTS_K3_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int k3_test_passed, k3_test_failed;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (cond) k3_test_passed++;                                            \
        else {                                                                 \
            k3_test_failed++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        if (cond) k3_test_passed++;                                            \
        else {                                                                 \
            k3_test_failed++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_STR_CONTAINS(haystack, needle)                                   \
    CHECK_MSG(strstr((haystack), (needle)) != NULL, "'%s' does not contain '%s'", \
              (haystack), (needle))

#define CHECK_NEAR(a, b, tol)                                                  \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)", \
              (double)(a), (double)(b), (double)(tol))

static inline int k3_test_summary(void)
{
    printf("%d passed, %d failed\n", k3_test_passed, k3_test_failed);
    return k3_test_failed ? 1 : 0;
}

#endif
