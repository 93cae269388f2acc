/* checkpoint.h - reading a Hugging Face safetensors checkpoint, memory-mapped.
 *
 * A checkpoint directory holds config.json, model.safetensors.index.json and the
 * shards it names (or a single model.safetensors). k3_checkpoint_open() reads the
 * index and every shard's header, maps each shard read-only (MADV_RANDOM, so the
 * kernel reads only the pages a rank touches), and checks each tensor's extent
 * against its file. Tensor data is never copied by open: a struct k3_tensor
 * points into the mapping.
 *
 * Guarantees (the API is settled; functions may be added, none changed):
 *   - After open returns 0, every tensor's data lies inside its shard (a truncated
 *     shard, an extent that overlaps another, a bad header or an index entry
 *     that names a missing tensor or file is an error at open, naming the file
 *     and the tensor).
 *   - k3_checkpoint_validate() checks every tensor the model config implies
 *     (model/tensors.h) for presence, dtype and shape, and names the first one
 *     that is wrong. A linear is MXFP4 if `<base>.weight_packed` and
 *     `<base>.weight_scale` are present, plain if `<base>.weight` is.
 *   - Reads (rows, columns, a linear's rows as f32) touch only the bytes of the
 *     requested slice; an expert subset is just the lookups of those experts.
 *   - The tensors and the mapping live until k3_checkpoint_free(); the struct is
 *     immutable after open and may be read from several threads.
 *   - Nothing here calls exit(); errors come back as -1 with a struct k3_err. */
#ifndef K3_MODEL_CHECKPOINT_H
#define K3_MODEL_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/err.h"
#include "model/config.h"

#define K3_TENSOR_MAX_DIMS 4

struct k3_tensor {
    const char *name;                /* full name, e.g. "language_model.model.norm.weight" */
    enum k3_dtype dtype;
    int n_dims;
    int64_t shape[K3_TENSOR_MAX_DIMS];
    uint64_t n_bytes;                /* numel * dtype bytes */
    const void *data;                /* into the mapping (read-only) */
    int shard;                       /* index into the checkpoint's shard list */
    uint64_t offset;                 /* byte offset of data in the shard file */
};

/* One linear layer's weight [out, in], whichever form it is stored in. */
struct k3_linear {
    int mxfp4;                       /* 1: packed + scale; 0: weight */
    int64_t out, in;                 /* logical shape */
    const struct k3_tensor *weight;  /* plain: BF16, F32, F16 or F8_E4M3 [out, in] */
    const struct k3_tensor *packed;  /* MXFP4: U8 [out, in/2], element 2j in the low nibble */
    const struct k3_tensor *scale;   /* MXFP4: U8 E8M0 [out, in/32] */
};

struct k3_checkpoint;

/* Opens dir (config.json is not read here; see k3_model_config_load). */
int k3_checkpoint_open(const char *dir, struct k3_checkpoint **out, struct k3_err *err);
void k3_checkpoint_free(struct k3_checkpoint *ck);

int k3_checkpoint_n_tensors(const struct k3_checkpoint *ck);
const struct k3_tensor *k3_checkpoint_tensor(const struct k3_checkpoint *ck, int i);
int k3_checkpoint_n_shards(const struct k3_checkpoint *ck);
const char *k3_checkpoint_shard_path(const struct k3_checkpoint *ck, int shard);
uint64_t k3_checkpoint_shard_bytes(const struct k3_checkpoint *ck, int shard);

/* Lookup by full name; NULL if absent. */
const struct k3_tensor *k3_checkpoint_find(const struct k3_checkpoint *ck, const char *name);
/* Lookup that is an error if absent ("tensor X not found in DIR (index ...)"). */
int k3_checkpoint_get(const struct k3_checkpoint *ck, const char *name,
                      const struct k3_tensor **out, struct k3_err *err);
/* Linear by base name (without ".weight"): MXFP4 if packed+scale exist, else plain.
 * Checks the pair's shapes agree ([out, in/2] and [out, in/32]). */
int k3_checkpoint_linear(const struct k3_checkpoint *ck, const char *base,
                         struct k3_linear *out, struct k3_err *err);
/* The same linear of a subset of experts: fmt has one %d for the global expert
 * id, e.g. "language_model.model.layers.5.block_sparse_moe.experts.%d.w1".
 * out[i] is expert experts[i]. */
int k3_checkpoint_experts(const struct k3_checkpoint *ck, const char *fmt, const int *experts,
                          int n_experts, struct k3_linear *out, struct k3_err *err);

/* Checks every tensor cfg implies for layers [layer_lo, layer_hi] (and the global
 * ones) for presence, dtype and shape. Tensors the config does not imply are
 * counted in *n_extra (may be NULL) but are not an error. */
int k3_checkpoint_validate(const struct k3_checkpoint *ck, const struct k3_model_config *cfg,
                           int layer_lo, int layer_hi, int *n_extra, struct k3_err *err);

/* Copies rows [r0, r1) of t (first dimension; the rest contiguous) to dst,
 * raw bytes in t's dtype. dst_bytes must be at least the slice size. */
int k3_tensor_read_rows(const struct k3_tensor *t, int64_t r0, int64_t r1, void *dst,
                        size_t dst_bytes, struct k3_err *err);
/* Copies columns [c0, c1) of the last dimension of every row to dst
 * ([rows, c1-c0] contiguous), raw bytes in t's dtype. */
int k3_tensor_read_cols(const struct k3_tensor *t, int64_t c0, int64_t c1, void *dst,
                        size_t dst_bytes, struct k3_err *err);
/* Dequantizes rows [r0, r1) and input columns [c0, c1) of a linear into f32
 * dst [r1-r0, c1-c0] (exact: bf16/f16/f8 widening, MXFP4 = E2M1 * 2^(s-127)).
 * Any column range works, also for MXFP4 (a TP column split should still
 * cut at multiples of 32 so that no scale block is shared by two ranks). */
int k3_linear_read_f32(const struct k3_linear *lin, int64_t r0, int64_t r1, int64_t c0,
                       int64_t c1, float *dst, struct k3_err *err);

#endif
