/* device.h - which GPU a rank drives, and what it is. */
#ifndef K3_KERNELS_CUDA_DEVICE_H
#define K3_KERNELS_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct k3_cuda_device {
    int index;              /* CUDA device index (after CUDA_VISIBLE_DEVICES) */
    char name[256];
    int sm_major, sm_minor;
    int n_sms;
    size_t mem_total_bytes, mem_free_bytes;
};

/* Number of visible devices; 0 if none (or no driver), never fatal. */
int k3_cuda_device_count(void);

/* Binds the calling thread to device (local_rank % count) and fills dev.
 * Fatal if there is no device: a CUDA job without a GPU cannot continue. */
void k3_cuda_device_init(struct k3_cuda_device *dev, int local_rank);

#ifdef __cplusplus
}
#endif

#endif
