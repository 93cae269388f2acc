/* cmd_gen_weights.c - `k3 gen-weights`: a synthetic checkpoint in the published
 * format for any model config (model/gen_weights.h does the work).
 *
 * --layers A-B keeps decoder layers A..B (0-based, inclusive) plus the global
 * tensors, for full-width slices of the real models; config.json is written
 * unchanged, so a reader sees the full model's config and a partial layer set. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "model/gen_weights.h"

static int parse_range(const char *s, int *lo, int *hi)
{
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || *end != '-') return -1;
    const char *b_start = end + 1;
    long b = strtol(b_start, &end, 10);
    if (end == b_start || *end || a < 0 || b < a || b > 100000) return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

int k3_cmd_gen_weights(struct k3_cli *cli)
{
    struct k3_gen_opts o = {0};
    o.config_path = k3_arg(&cli->args, "model-config");
    o.out_dir = k3_arg(&cli->args, "out");
    o.tokenizer_dirs = k3_arg(&cli->args, "tokenizer");
    o.layer_lo = o.layer_hi = -1;
    if (!o.config_path || !o.out_dir) {
        fprintf(stderr, "k3 gen-weights: --model-config CONFIG.json and --out DIR are required\n");
        return K3_EXIT_USAGE;
    }
    long long seed, shard_bytes;
    if (k3_arg_int(&cli->args, "seed", 0, 0, (1ll << 62), &seed) ||
        k3_arg_int(&cli->args, "shard-bytes", (long long)K3_GEN_DEFAULT_SHARD_BYTES, 1024,
                   (1ll << 50), &shard_bytes))
        return K3_EXIT_USAGE;
    o.seed = (uint64_t)seed;
    o.shard_bytes = (uint64_t)shard_bytes;
    const char *layers = k3_arg(&cli->args, "layers");
    if (layers && parse_range(layers, &o.layer_lo, &o.layer_hi)) {
        fprintf(stderr, "k3 gen-weights: --layers must be a range A-B of 0-based layers with "
                        "A <= B (e.g. 0-0), not '%s'\n", layers);
        return K3_EXIT_USAGE;
    }
    struct k3_err err;
    struct k3_gen_stats st;
    if (k3_gen_weights_check(&o, &err)) {
        fprintf(stderr, "k3 gen-weights: %s\n", err.msg);
        return K3_EXIT_USAGE;
    }
    if (k3_gen_weights(&o, &st, &err)) {
        fprintf(stderr, "k3 gen-weights: %s\n", err.msg);
        return K3_EXIT_FAIL;
    }
    printf("wrote %s: %d shard%s, %lld tensors, %lld parameters, %llu bytes of tensor data "
           "(%llu in files)\n", o.out_dir, st.n_shards, st.n_shards == 1 ? "" : "s",
           (long long)st.n_tensors, (long long)st.n_params, (unsigned long long)st.tensor_bytes,
           (unsigned long long)st.file_bytes);
    return K3_EXIT_OK;
}
