/* cuda_check.h - K3_CHECK_CUDA and K3_CHECK_LAUNCH: a failed CUDA call or
 * kernel launch is fatal for the whole job (rank, host, device, statement,
 * file:line through k3_fatal). Usable from .c and .cu files. */
#ifndef K3_KERNELS_CUDA_CHECK_H
#define K3_KERNELS_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "core/log.h"

#define K3_CHECK_CUDA(call)                                                    \
    do {                                                                       \
        cudaError_t k3_cuda_rc_ = (call);                                      \
        if (k3_cuda_rc_ != cudaSuccess)                                        \
            k3_fatal(__FILE__, __LINE__, #call, "CUDA error %d (%s): %s",      \
                     (int)k3_cuda_rc_, cudaGetErrorName(k3_cuda_rc_),          \
                     cudaGetErrorString(k3_cuda_rc_));                         \
    } while (0)

/* After every kernel launch: catches bad launch configurations at once. */
#define K3_CHECK_LAUNCH() K3_CHECK_CUDA(cudaGetLastError())

#endif
