/* conv.cu - short causal depthwise conv + SiLU (ops.h; model-architecture.md
 * §1.2 step 2). Two launches on one stream: conv_kernel computes every
 * (token, channel) output in parallel (tokens on blockIdx.y, channels on x), reading inputs before x[0] from the
 * tail; tail_kernel then rewrites the tail (one thread per channel, oldest
 * slot first, so the in-place shift reads each old value before it is
 * overwritten). Splitting them avoids a race between tail readers and the
 * tail writer. Taps summed in the CPU twin's order, in fp32. */
#include "kernels/cuda/conv.h"

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

static __global__ void conv_kernel(struct k3_conv_params p)
{
    int W = p.width;
    for (int64_t t = blockIdx.y; t < p.n; t += gridDim.y) {
        for (int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ch < p.d;
             ch += (int64_t)gridDim.x * blockDim.x) {
            const float *w = p.w + ch * W;
            float c = 0.0f;
            for (int j = 0; j < W; j++) {
                int64_t src = t - (W - 1) + j;  /* < 0: the token lives in the tail */
                float xv;
                if (src >= 0) xv = p.x[src * p.ldx + ch];
                else xv = p.tail ? p.tail[(W - 1 + src) * p.d + ch] : 0.0f;
                c += w[j] * xv;
            }
            p.y[t * p.d + ch] = c / (1.0f + expf(-c));
        }
    }
}

/* Width 4 (the model's short_conv_kernel_size): one thread per channel and
 * run of CONV_TOK tokens, the taps and a sliding window of inputs in
 * registers, so each input is read once (the general kernel above rereads it
 * W times). Same tap order as the CPU twin. */
#define CONV_TOK 16

static __global__ void conv4_kernel(struct k3_conv_params p)
{
    int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= p.d) return;
    float w0 = p.w[ch * 4], w1 = p.w[ch * 4 + 1], w2 = p.w[ch * 4 + 2], w3 = p.w[ch * 4 + 3];
    for (int64_t t0 = (int64_t)blockIdx.y * CONV_TOK; t0 < p.n; t0 += (int64_t)gridDim.y * CONV_TOK) {
        float win[3];
        for (int j = 0; j < 3; j++) {
            int64_t src = t0 - 3 + j;
            win[j] = src >= 0 ? p.x[src * p.ldx + ch] : (p.tail ? p.tail[(3 + src) * p.d + ch] : 0.0f);
        }
        int64_t t1 = t0 + CONV_TOK < p.n ? t0 + CONV_TOK : p.n;
        for (int64_t t = t0; t < t1; t++) {
            float cur = p.x[t * p.ldx + ch];
            float c = 0.0f;
            c += w0 * win[0];
            c += w1 * win[1];
            c += w2 * win[2];
            c += w3 * cur;
            p.y[t * p.d + ch] = c / (1.0f + expf(-c));
            win[0] = win[1];
            win[1] = win[2];
            win[2] = cur;
        }
    }
}

static __global__ void tail_kernel(struct k3_conv_params p)
{
    int W = p.width;
    for (int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; ch < p.d;
         ch += (int64_t)gridDim.x * blockDim.x) {
        for (int j = 0; j < W - 1; j++) {
            int64_t src = p.n - (W - 1) + j;  /* index into (old tail ++ x) minus W-1 */
            p.tail[j * p.d + ch] = src >= 0 ? p.x[src * p.ldx + ch]
                                            : p.tail[(W - 1 + src) * p.d + ch];
        }
    }
}

extern "C" void k3_cuda_conv_launch(const struct k3_conv_params *p, cudaStream_t s)
{
    K3_CHECK(p->width >= 1 && p->width <= 17, "conv width %d outside [1, 17]", p->width);
    if (p->d <= 0) return;
    if (p->n > 0) {
        if (p->width == 4) {
            int64_t chunks = (p->n + CONV_TOK - 1) / CONV_TOK;
            dim3 grid((unsigned)((p->d + 127) / 128), (unsigned)(chunks < 65535 ? chunks : 65535));
            conv4_kernel<<<grid, 128, 0, s>>>(*p);
        } else {
            conv_kernel<<<k3_grid_2d(p->n, p->d, 1, 256), 256, 0, s>>>(*p);
        }
        K3_CHECK_LAUNCH();
    }
    if (p->tail && p->width > 1 && p->n > 0) {
        tail_kernel<<<k3_grid_1d(p->d, 256), 256, 0, s>>>(*p);
        K3_CHECK_LAUNCH();
    }
}

extern "C" void k3_cuda_conv(struct k3_backend *be, const struct k3_conv_params *p)
{
    k3_cuda_conv_launch(p, k3_cuda_impl(be)->stream);
}
