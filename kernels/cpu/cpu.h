/* cpu.h - the CPU backend: init/free, and what its op files share.
 *
 * k3_cpu_backend_init() fills a `struct k3_backend` whose table points at the
 * k3_cpu_<op> functions (one op per file pair in this folder) and whose impl is
 * a thread pool. Every op splits its outer loop over the pool with a static
 * split, so results are bitwise reproducible for a given thread count. */
#ifndef K3_KERNELS_CPU_CPU_H
#define K3_KERNELS_CPU_CPU_H

#include "kernels/ops.h"
#include "kernels/cpu/pool.h"

/* n_threads <= 0: all cores this process may use. Returns 0 or -1. */
int k3_cpu_backend_init(struct k3_backend *be, int n_threads);
void k3_cpu_backend_free(struct k3_backend *be);

static inline struct k3_pool *k3_cpu_pool(struct k3_backend *be)
{
    return (struct k3_pool *)be->impl;
}

#endif
