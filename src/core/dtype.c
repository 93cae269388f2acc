/* dtype.c - see dtype.h. */
#include "core/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t bytes;
} dtype_info[K3_DTYPE_COUNT] = {
    [K3_DTYPE_F32] = {"F32", 4},     [K3_DTYPE_BF16] = {"BF16", 2},
    [K3_DTYPE_F16] = {"F16", 2},     [K3_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [K3_DTYPE_U8] = {"U8", 1},       [K3_DTYPE_I32] = {"I32", 4},
    [K3_DTYPE_I64] = {"I64", 8},
};

size_t k3_dtype_bytes(enum k3_dtype t)
{
    return (unsigned)t < K3_DTYPE_COUNT ? dtype_info[t].bytes : 0;
}

const char *k3_dtype_name(enum k3_dtype t)
{
    return (unsigned)t < K3_DTYPE_COUNT ? dtype_info[t].name : "?";
}

int k3_dtype_parse(const char *name, enum k3_dtype *out)
{
    for (int i = 0; i < K3_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            *out = (enum k3_dtype)i;
            return 0;
        }
    }
    return -1;
}

float k3_f16_to_f32(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) v = ldexpf((float)man, -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}

float k3_e2m1_to_f32(uint8_t nibble)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[nibble & 7];
    return (nibble & 8) ? -v : v;
}

float k3_e8m0_to_f32(uint8_t e)
{
    if (e == 0xff) return NAN;
    return ldexpf(1.0f, (int)e - 127);
}

float k3_f8e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 15 && man == 7) v = NAN;
    else if (exp == 0) v = ldexpf((float)man, -9);
    else v = ldexpf((float)(man | 8), exp - 10);
    return sign ? -v : v;
}
