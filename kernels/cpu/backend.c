/* backend.c - the CPU backend's op table (see cpu.h). */
#include "kernels/cpu/cpu.h"

#include <stdlib.h>

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
    struct k3_pool *pool = malloc(sizeof *pool);
    if (!pool) return -1;
    if (k3_pool_init(pool, n_threads) != 0) {
        free(pool);
        return -1;
    }
    be->ops = &cpu_ops;
    be->impl = pool;
    be->n_threads = pool->n_threads;
    return 0;
}

void k3_cpu_backend_free(struct k3_backend *be)
{
    if (!be->impl) return;
    k3_pool_free(k3_cpu_pool(be));
    free(be->impl);
    be->impl = NULL;
}
