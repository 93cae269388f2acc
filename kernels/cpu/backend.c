/* backend.c - the CPU backend's op table (see cpu.h). */
#include "kernels/cpu/cpu.h"

#include <stdlib.h>

#include "core/log.h"

#include "kernels/cpu/attn.h"
#include "kernels/cpu/attn_res.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/embed.h"
#include "kernels/cpu/ew.h"
#include "kernels/cpu/glu.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/kda_gate.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/router.h"

static const struct k3_ops cpu_ops = {
    .name = "cpu",
    .matmul = k3_cpu_matmul,
    .embed = k3_cpu_embed,
    .rmsnorm = k3_cpu_rmsnorm,
    .l2norm = k3_cpu_l2norm,
    .conv = k3_cpu_conv,
    .kda_gate = k3_cpu_kda_gate,
    .kda = k3_cpu_kda,
    .attn = k3_cpu_attn,
    .glu = k3_cpu_glu,
    .router = k3_cpu_router,
    .moe = k3_cpu_moe,
    .attn_res = k3_cpu_attn_res,
    .ew = k3_cpu_ew,
};

int k3_cpu_backend_init(struct k3_backend *be, int n_threads)
{
    struct k3_cpu *cpu = calloc(1, sizeof *cpu);
    if (!cpu) return -1;
    if (k3_pool_init(&cpu->pool, n_threads) != 0) {
        free(cpu);
        return -1;
    }
    cpu->scratch = calloc((size_t)cpu->pool.n_threads * K3_CPU_N_SLOTS, sizeof *cpu->scratch);
    if (!cpu->scratch) {
        k3_pool_free(&cpu->pool);
        free(cpu);
        return -1;
    }
    be->ops = &cpu_ops;
    be->impl = cpu;
    be->n_threads = cpu->pool.n_threads;
    return 0;
}

void k3_cpu_backend_free(struct k3_backend *be)
{
    struct k3_cpu *cpu = be->impl;
    if (!cpu) return;
    for (int i = 0; i < cpu->pool.n_threads * K3_CPU_N_SLOTS; i++) free(cpu->scratch[i].p);
    free(cpu->scratch);
    k3_pool_free(&cpu->pool);
    free(cpu);
    be->impl = NULL;
}

void *k3_cpu_scratch(struct k3_backend *be, int worker, enum k3_cpu_slot slot, size_t bytes)
{
    struct k3_cpu *cpu = be->impl;
    K3_CHECK(worker >= 0 && worker < cpu->pool.n_threads, "worker %d of %d", worker, cpu->pool.n_threads);
    struct k3_cpu_scratch *s = &cpu->scratch[worker * K3_CPU_N_SLOTS + slot];
    if (s->bytes < bytes) {
        /* Grow to the next power of two so slowly growing sizes (a KV length
         * during decode) reallocate O(log n) times, not every step. */
        size_t n = 4096;
        while (n < bytes) n *= 2;
        free(s->p);
        s->p = aligned_alloc(64, n);
        K3_CHECK(s->p, "out of memory for %zu bytes of CPU scratch", n);
        s->bytes = n;
    }
    return s->p;
}
