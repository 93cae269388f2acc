/* test_safetensors_dtypes.c - the reader on hand-written safetensors files:
 * every dtype a linear may be stored in (BF16, F16, F32, F8_E4M3, MXFP4) decodes
 * to the exact values, a lone model.safetensors (no index) opens, and
 * k3_checkpoint_linear() picks the MXFP4 form only when both tensors exist.
 *
 * usage: test_safetensors_dtypes OUT_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k3_test.h"
#include "model/checkpoint.h"

/* Known encodings of the same 8 values, row-major [2, 4]. */
static const float want[8] = {1.0f, -2.0f, 0.5f, 448.0f, 0.0f, -0.001953125f, 3.0f, -6.0f};
static const uint16_t bf16[8] = {0x3f80, 0xc000, 0x3f00, 0x43e0, 0x0000, 0xbb00, 0x4040, 0xc0c0};
static const uint16_t f16[8] = {0x3c00, 0xc000, 0x3800, 0x5f00, 0x0000, 0x9800, 0x4200, 0xc600};
/* E4M3 (fn): 1.0 = 0x38, -2 = 0xc0, 0.5 = 0x30, 448 = 0x7e, 0, -2^-9 = 0x81 (subnormal), 3 = 0x44, -6 = 0xcc. */
static const uint8_t f8[8] = {0x38, 0xc0, 0x30, 0x7e, 0x00, 0x81, 0x44, 0xcc};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    char cmd[8192], path[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", argv[1], argv[1]);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", argv[1]);

    /* MXFP4 [2, 32]: row 0 = element j nibble (j % 16), scale 2^0; row 1 all 0x21
     * (element 2j = 0.5, 2j+1 = 1.0), scale 2^-3. */
    uint8_t packed[2][16], scale[2] = {127, 124};
    for (int j = 0; j < 16; j++) {
        packed[0][j] = (uint8_t)(((2 * j + 1) % 16) << 4 | ((2 * j) % 16));
        packed[1][j] = 0x21;
    }
    float f32[8];
    memcpy(f32, want, sizeof f32);
    const char *header =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
        "\"h.weight\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[16,32]},"
        "\"f.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[32,64]},"
        "\"e.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,4],\"data_offsets\":[64,72]},"
        "\"m.weight_packed\":{\"dtype\":\"U8\",\"shape\":[2,16],\"data_offsets\":[72,104]},"
        "\"m.weight_scale\":{\"dtype\":\"U8\",\"shape\":[2,1],\"data_offsets\":[104,106]},"
        "\"half.weight_packed\":{\"dtype\":\"U8\",\"shape\":[2,16],\"data_offsets\":[106,138]}}";
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return k3_test_summary();
    uint64_t hl = strlen(header);
    fwrite(&hl, 8, 1, f); /* little-endian host; an unpadded header is legal too */
    fwrite(header, 1, hl, f);
    fwrite(bf16, 2, 8, f);
    fwrite(f16, 2, 8, f);
    fwrite(f32, 4, 8, f);
    fwrite(f8, 1, 8, f);
    fwrite(packed, 1, 32, f);
    fwrite(scale, 1, 2, f);
    fwrite(packed, 1, 32, f);
    fclose(f);

    struct k3_checkpoint *ck = NULL;
    struct k3_err err;
    CHECK_MSG(k3_checkpoint_open(argv[1], &ck, &err) == 0, "%s", err.msg);
    if (!ck) return k3_test_summary();
    CHECK(k3_checkpoint_n_shards(ck) == 1 && k3_checkpoint_n_tensors(ck) == 7);

    static const char *plain[4] = {"b", "h", "f", "e"};
    static const enum k3_dtype dts[4] = {K3_DTYPE_BF16, K3_DTYPE_F16, K3_DTYPE_F32, K3_DTYPE_F8_E4M3};
    for (int i = 0; i < 4; i++) {
        struct k3_linear lin;
        float got[8];
        CHECK_MSG(k3_checkpoint_linear(ck, plain[i], &lin, &err) == 0, "%s", err.msg);
        CHECK(!lin.mxfp4 && lin.out == 2 && lin.in == 4 && lin.weight->dtype == dts[i]);
        CHECK(k3_linear_read_f32(&lin, 0, 2, 0, 4, got, &err) == 0);
        int same = 1;
        for (int k = 0; k < 8; k++) same &= got[k] == want[k];
        CHECK_MSG(same, "%s: decoded values differ", k3_dtype_name(dts[i]));
        /* Column slice [1, 3) of both rows. */
        CHECK(k3_linear_read_f32(&lin, 0, 2, 1, 3, got, &err) == 0);
        CHECK(got[0] == want[1] && got[1] == want[2] && got[2] == want[5] && got[3] == want[6]);
    }

    struct k3_linear m;
    float row[64];
    CHECK_MSG(k3_checkpoint_linear(ck, "m", &m, &err) == 0, "%s", err.msg);
    CHECK(m.mxfp4 && m.out == 2 && m.in == 32);
    CHECK(k3_linear_read_f32(&m, 0, 2, 0, 32, row, &err) == 0);
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    int ok = 1;
    for (int j = 0; j < 32; j++) ok &= row[j] == e2m1[j % 16];
    for (int j = 0; j < 32; j++) ok &= row[32 + j] == (j % 2 ? 1.0f : 0.5f) / 8.0f;
    CHECK(ok);

    /* weight_packed without weight_scale is an error, not a silent plain linear. */
    CHECK(k3_checkpoint_linear(ck, "half", &m, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "half.weight_scale is missing");
    CHECK(k3_checkpoint_linear(ck, "absent", &m, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "absent.weight is missing");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors"); /* no index: the dir is named */

    /* Raw row and column reads of the F8 tensor. */
    const struct k3_tensor *t = k3_checkpoint_find(ck, "e.weight");
    uint8_t raw[8];
    CHECK(t && k3_tensor_read_rows(t, 1, 2, raw, sizeof raw, &err) == 0 && !memcmp(raw, f8 + 4, 4));
    CHECK(t && k3_tensor_read_cols(t, 3, 4, raw, sizeof raw, &err) == 0 && raw[0] == f8[3] &&
          raw[1] == f8[7]);
    k3_checkpoint_free(ck);
    return k3_test_summary();
}
