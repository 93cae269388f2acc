/* gen_weights.h - synthetic checkpoints in the published format.
 *
 * Writes config.json (the given file, byte for byte), model.safetensors.index.json
 * and shards model-0000i-of-0000n.safetensors holding exactly the tensors of
 * model/tensors.h: names, shapes, dtypes, and for routed experts of configs with
 * an mxfp4-pack-quantized quantization_config the compressed-tensors MXFP4 pair
 * (weight_packed U8 [out, in/2], low nibble first; weight_scale U8 E8M0
 * [out, in/32]). Values are deterministic in (seed, tensor name): the same
 * tensor has the same bytes whatever the sharding or layer range. */
#ifndef K3_MODEL_GEN_WEIGHTS_H
#define K3_MODEL_GEN_WEIGHTS_H

#include <stdint.h>

#include "core/err.h"

#define K3_GEN_DEFAULT_SHARD_BYTES 5000000000ull /* Hugging Face's usual 5 GB */

struct k3_gen_opts {
    const char *config_path;     /* model config.json */
    const char *out_dir;         /* created if absent */
    uint64_t seed;
    uint64_t shard_bytes;        /* largest shard; 0: K3_GEN_DEFAULT_SHARD_BYTES */
    int layer_lo, layer_hi;      /* decoder layers to keep (inclusive); -1, -1: all */
    const char *tokenizer_dirs;  /* NULL, or DIR[,DIR...]: tiktoken.model and
                                    tokenizer_config.json are copied from the first
                                    directory that has each */
};

struct k3_gen_stats {
    int n_shards;
    int64_t n_tensors;           /* safetensors entries */
    int64_t n_params;
    uint64_t tensor_bytes;       /* sum of tensor data (the index's total_size) */
    uint64_t file_bytes;         /* shard files including headers */
};

/* Checks the inputs without writing anything: the config parses, the layer
 * range fits it, the tokenizer files exist. Failing here is bad input. */
int k3_gen_weights_check(const struct k3_gen_opts *opts, struct k3_err *err);

/* k3_gen_weights_check, then the writing; a failure after the check is I/O. */
int k3_gen_weights(const struct k3_gen_opts *opts, struct k3_gen_stats *stats,
                   struct k3_err *err);

#endif
