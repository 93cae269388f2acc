/* unicode.h - what the Kimi pre-tokenizer needs to know about a code point, and UTF-8.
 *
 * One flags byte per code point, in a two-stage table generated from Unicode 16.0 by
 * validation/tokenizer/gen_unicode_tables.py (unicode_tables.c). The flags are the
 * character classes of the Kimi pattern (research/frontend.md §1.2):
 *   HAN  \p{Han} (Script=Han, not Script_Extensions)
 *   UP   [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]   the "upper" letter set
 *   LO   [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]         the "lower" letter set
 *   L    \p{L};  N  \p{N};  WS  \s (White_Space)
 *   PYSPACE  Python str.isspace() (White_Space plus U+001C..U+001F), for the wrapper's cut.
 * Derived sets: the optional prefix [^\r\n\p{L}\p{N}] and punctuation [^\s\p{L}\p{N}]. */
#ifndef K3_FRONTEND_UNICODE_H
#define K3_FRONTEND_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    K3_UC_HAN = 0x01,
    K3_UC_UP = 0x02,
    K3_UC_LO = 0x04,
    K3_UC_L = 0x08,
    K3_UC_N = 0x10,
    K3_UC_WS = 0x20,
    K3_UC_PYSPACE = 0x40,
};

extern const uint8_t k3_uc_stage1[0x1100];
extern const uint8_t k3_uc_stage2[];

static inline unsigned k3_uc_flags(uint32_t cp)
{
    return k3_uc_stage2[(size_t)k3_uc_stage1[cp >> 8] * 256 + (cp & 255)];
}

/* Decodes one code point of VALID UTF-8 (the encoder sanitizes its input first) at s;
 * stores its byte length in *len. */
static inline uint32_t k3_utf8_decode(const uint8_t *s, int *len)
{
    uint32_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return ((c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (c < 0xF0) {
        *len = 3;
        return ((c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
           (s[3] & 0x3F);
}

/* Length of the valid UTF-8 sequence at s[0..n), or, when it is not valid, minus the
 * length of its "maximal subpart" (Unicode §3.9, what Python's errors="replace" turns into
 * one U+FFFD); 0 when s holds a valid but incomplete prefix that more bytes could finish. */
int k3_utf8_check(const uint8_t *s, size_t n);

/* Byte offset of the first invalid UTF-8 sequence in s[0..n), or n if it is all valid. */
size_t k3_utf8_valid_prefix(const uint8_t *s, size_t n);

#endif
