/* device.cu - see device.h. The device index is the node-local rank: the
 * usual one-rank-per-GPU layout of mpirun/srun, with CUDA_VISIBLE_DEVICES
 * deciding which physical GPUs those indices mean. */
#include "kernels/cuda/device.h"

#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_check.h"

extern "C" int k3_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" void k3_cuda_device_init(struct k3_cuda_device *dev, int local_rank)
{
    memset(dev, 0, sizeof *dev);
    int n = k3_cuda_device_count();
    K3_CHECK(n > 0, "no CUDA device visible to this rank (backend.kind = \"cuda\"); check "
                    "CUDA_VISIBLE_DEVICES and the driver, or use --backend cpu");
    dev->index = local_rank % n;
    if (local_rank >= n)
        K3_WARN("local rank %d shares GPU %d with other ranks (%d GPUs visible)", local_rank,
                dev->index, n);
    K3_CHECK_CUDA(cudaSetDevice(dev->index));
    k3_log_set_device(dev->index);
    cudaDeviceProp prop;
    K3_CHECK_CUDA(cudaGetDeviceProperties(&prop, dev->index));
    snprintf(dev->name, sizeof dev->name, "%s", prop.name);
    dev->sm_major = prop.major;
    dev->sm_minor = prop.minor;
    dev->n_sms = prop.multiProcessorCount;
    K3_CHECK_CUDA(cudaMemGetInfo(&dev->mem_free_bytes, &dev->mem_total_bytes));
}
