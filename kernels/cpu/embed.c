/* embed.c - see embed.h. Ids out of range are a caller bug: fatal. */
#include "kernels/cpu/embed.h"

#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/mat.h"

static void embed_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_embed_params *p = ctx;
    for (int64_t i = begin; i < end; i++) {
        int32_t id = p->ids[i];
        K3_CHECK(id >= 0 && id < p->w->rows, "token id %d outside the vocabulary [0, %lld)", id,
                 (long long)p->w->rows);
        k3_mat_row_f32(p->w, id, 0, p->w->cols, p->out + i * p->w->cols);
    }
}

void k3_cpu_embed(struct k3_backend *be, const struct k3_embed_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n, embed_range, (void *)p);
}
