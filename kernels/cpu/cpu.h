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

/* Per-worker scratch that grows and is kept: once a call of a given size has
 * run, the same call allocates nothing again (DESIGN.md §2: nothing is
 * allocated on the decode path). RANGE is for the per-worker part of an op
 * (inside k3_pool_for), OP for an op's own buffers on the calling thread
 * (worker 0), so an op may hold OP buffers while it runs other ops. */
enum k3_cpu_slot { K3_CPU_SLOT_RANGE = 0, K3_CPU_SLOT_OP, K3_CPU_N_SLOTS };

struct k3_cpu_scratch {
    void *p;
    size_t bytes;
};

struct k3_cpu {
    struct k3_pool pool;
    struct k3_cpu_scratch *scratch;  /* [n_threads][K3_CPU_N_SLOTS] */
};

static inline struct k3_pool *k3_cpu_pool(struct k3_backend *be)
{
    return &((struct k3_cpu *)be->impl)->pool;
}

/* At least `bytes` of scratch for (worker, slot), 64-byte aligned; the
 * contents are not kept between calls. Fatal on out of memory. */
void *k3_cpu_scratch(struct k3_backend *be, int worker, enum k3_cpu_slot slot, size_t bytes);

#endif
