/* grow.h - buffers that grow on demand and are kept: sized by the first calls,
 * then reused, so a steady state allocates nothing (DESIGN.md §2). */
#ifndef K3_CORE_GROW_H
#define K3_CORE_GROW_H

#include <stdlib.h>

#include "core/log.h"

/* Returns p holding at least `need` elements of `elem` bytes, contents kept;
 * *cap (in elements) doubles from min_cap. Out of memory is fatal, naming what. */
static inline void *k3_grow(void *p, size_t *cap, size_t need, size_t elem, size_t min_cap,
                            const char *what)
{
    if (p && need <= *cap) return p;
    size_t n = *cap ? *cap : min_cap;
    while (n < need) n *= 2;
    void *q = realloc(p, n * elem);
    K3_CHECK(q, "out of memory growing %s to %zu x %zu bytes", what, n, elem);
    *cap = n;
    return q;
}

#endif
