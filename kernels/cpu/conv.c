/* conv.c - see ops.h (struct k3_conv_params). The pool splits channels; each
 * channel is independent, so the tail update happens in the same pass after
 * the channel's outputs are written. Tap w[ch, W-1] multiplies the current
 * token (research/model-architecture.md §1.2 step 2). */
#include "kernels/cpu/conv.h"

#include <math.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"

static void conv_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_conv_params *p = ctx;
    int W = p->width;
    for (int64_t ch = begin; ch < end; ch++) {
        const float *w = p->w + ch * W;
        for (int64_t t = 0; t < p->n; t++) {
            float c = 0;
            for (int j = 0; j < W; j++) {
                int64_t src = t - (W - 1) + j;   /* token index; < 0 lives in the tail */
                float xv;
                if (src >= 0) xv = p->x[src * p->ldx + ch];
                else xv = p->tail ? p->tail[(W - 1 + src) * p->d + ch] : 0.0f;
                c += w[j] * xv;
            }
            p->y[t * p->d + ch] = c / (1.0f + expf(-c));
        }
        if (!p->tail) continue;
        /* New tail: the last W-1 inputs of (old tail ++ x), oldest first. */
        float last[16];
        for (int j = 0; j < W - 1; j++) {
            int64_t src = p->n - (W - 1) + j;
            last[j] = src >= 0 ? p->x[src * p->ldx + ch] : p->tail[(W - 1 + src) * p->d + ch];
        }
        for (int j = 0; j < W - 1; j++) p->tail[j * p->d + ch] = last[j];
    }
}

void k3_cpu_conv(struct k3_backend *be, const struct k3_conv_params *p)
{
    K3_CHECK(p->width >= 1 && p->width <= 17, "conv width %d outside [1, 17]", p->width);
    k3_pool_for(k3_cpu_pool(be), p->d, conv_range, (void *)p);
}
