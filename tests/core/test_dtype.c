/* test_dtype.c - scalar dtype conversions against values worked out by hand
 * from the format definitions (OCP MX spec for E2M1/E8M0, IEEE for bf16/f16). */
#include <math.h>
#include <stdint.h>

#include "core/dtype.h"
#include "k3_test.h"

static void test_e2m1(void)
{
    /* sign | exp(2) | man(1): 0b0011 = 2^(1-1) * 1.5 = 1.5; 0b0111 = 2^2 * 1.5 = 6 */
    static const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
                                   -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 16; i++) CHECK_MSG(k3_e2m1_to_f32((uint8_t)i) == want[i], "nibble %d", i);
    CHECK(signbit(k3_e2m1_to_f32(8)));
}

static void test_e8m0(void)
{
    CHECK(k3_e8m0_to_f32(127) == 1.0f);
    CHECK(k3_e8m0_to_f32(128) == 2.0f);
    CHECK(k3_e8m0_to_f32(120) == 1.0f / 128);
    CHECK(k3_e8m0_to_f32(0) == ldexpf(1.0f, -127));
    CHECK(isnan(k3_e8m0_to_f32(255)));
}

static void test_bf16(void)
{
    CHECK(k3_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(k3_bf16_to_f32(0xc000) == -2.0f);
    CHECK(k3_f32_to_bf16(1.0f) == 0x3f80);
    /* 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0 */
    CHECK(k3_f32_to_bf16(1.00390625f) == 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625: -> even 0x3f82 */
    CHECK(k3_f32_to_bf16(1.01171875f) == 0x3f82);
    CHECK(isnan(k3_bf16_to_f32(k3_f32_to_bf16(NAN))));
    CHECK(k3_f32_to_bf16(INFINITY) == 0x7f80);
    for (uint32_t h = 0; h < 0x10000; h += 7) {
        float f = k3_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) CHECK_MSG(k3_f32_to_bf16(f) == h, "bf16 0x%04x does not round trip", h);
    }
}

static void test_f16_f8(void)
{
    CHECK(k3_f16_to_f32(0x3c00) == 1.0f);
    CHECK(k3_f16_to_f32(0xc000) == -2.0f);
    CHECK(k3_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(isinf(k3_f16_to_f32(0x7c00)));
    CHECK(k3_f8e4m3_to_f32(0x38) == 1.0f);      /* exp 7 = bias, man 0 */
    CHECK(k3_f8e4m3_to_f32(0x7e) == 448.0f);    /* the largest finite value */
    CHECK(k3_f8e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
    CHECK(isnan(k3_f8e4m3_to_f32(0x7f)));
    CHECK(k3_f8e4m3_to_f32(0xb8) == -1.0f);
}

static void test_names(void)
{
    enum k3_dtype t;
    CHECK(k3_dtype_parse("BF16", &t) == 0 && t == K3_DTYPE_BF16 && k3_dtype_bytes(t) == 2);
    CHECK(k3_dtype_parse("F8_E4M3", &t) == 0 && t == K3_DTYPE_F8_E4M3);
    CHECK(k3_dtype_parse("bf16", &t) == -1);
    for (int i = 0; i < K3_DTYPE_COUNT; i++) {
        CHECK(k3_dtype_parse(k3_dtype_name((enum k3_dtype)i), &t) == 0 && (int)t == i);
        CHECK(k3_dtype_bytes((enum k3_dtype)i) > 0);
    }
}

int main(void)
{
    test_e2m1();
    test_e8m0();
    test_bf16();
    test_f16_f8();
    test_names();
    return k3_test_summary();
}
