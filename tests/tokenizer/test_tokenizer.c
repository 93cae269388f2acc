/* test_tokenizer.c - the Kimi tokenizer in C alone: loading, pinned ids (computed with
 * tiktoken 0.14 + the Kimi wrapper, see validation/tokenizer/kimi_ref.py), both encode
 * modes, the wrapper's cuts, the BPE fast paths against the O(n^2) reference, threads, the
 * memos kept between calls, decoding, the streaming detokenizer, and malformed files. The bulk comparison with
 * tiktoken is validation/tokenizer/check_ids.py (CTest tok_ids_vs_tiktoken). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/tok_internal.h"
#include "frontend/bpe_memo.h"
#include "frontend/unicode.h"
#include "frontend/unicode_simd.h"
#include "k3_test.h"
#include "kernels/cpu/pool.h"

static struct k3_tok *tok;

static int encode_eq(const char *text, enum k3_tok_mode mode, const int32_t *want, size_t n)
{
    struct k3_tok_ids ids = {0};
    k3_tok_encode(tok, text, strlen(text), mode, NULL, &ids);
    int ok = ids.n == n && !memcmp(ids.ids, want, n * sizeof(int32_t));
    if (!ok) {
        fprintf(stderr, "encode('%s') =", text);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.ids[i]);
        fputc('\n', stderr);
    }
    k3_tok_ids_free(&ids);
    return ok;
}

#define ENC(text, mode, ...)                                                   \
    do {                                                                       \
        static const int32_t want_[] = {__VA_ARGS__};                          \
        CHECK_MSG(encode_eq(text, mode, want_, sizeof want_ / sizeof want_[0]), "%s", text); \
    } while (0)

static void test_load(void)
{
    CHECK(k3_tok_n_ranks(tok) == 163584);
    CHECK(k3_tok_n_vocab(tok) == 163840);
    CHECK(k3_tok_special_id(tok, "[BOS]") == 163584);
    CHECK(k3_tok_special_id(tok, "<|end_of_msg|>") == 163586);
    CHECK(k3_tok_special_id(tok, "<|open|>") == 163587);
    CHECK(k3_tok_special_id(tok, "<|close|>") == 163588);
    CHECK(k3_tok_special_id(tok, "<|sep|>") == 163589);
    CHECK(k3_tok_special_id(tok, "<|media_pad|>") == 163605);
    CHECK(k3_tok_special_id(tok, "[PAD]") == 163839);
    CHECK(k3_tok_special_id(tok, "<|reserved_token_163592|>") == 163592);
    CHECK(k3_tok_special_id(tok, "<|reserved_token_163839|>") == -1); /* named [PAD] */
    CHECK(k3_tok_special_id(tok, "<|im_end|>") == -1);                /* K2 name, not K3 */
    CHECK(k3_tok_is_special(tok, 163586) && !k3_tok_is_special(tok, 163587));
    size_t len;
    const uint8_t *b = k3_tok_bytes(tok, 220, &len); /* GPT-2 byte order: space is 220 */
    CHECK(b && len == 1 && b[0] == ' ');
    CHECK(k3_tok_bytes(tok, 163840, &len) == NULL && k3_tok_bytes(tok, -1, &len) == NULL);
    CHECK(tok->max_token_bytes == 256);
}

static void test_pinned(void)
{
    ENC("Hello World", K3_TOK_PLAIN, 19180, 6949);
    ENC("HelloWorld XMLHttpRequest", K3_TOK_PLAIN, 19180, 14350, 160457, 3188);
    ENC("LET'S GO don't Let\xC5\xBF", K3_TOK_PLAIN, 30588, 34480, 19418, 4536, 9444, 129, 123);
    ENC("中文abc漢字 中、文", K3_TOK_PLAIN, 16717, 8497, 1435, 95, 1855, 220, 435, 343, 908);
    ENC("1234567", K3_TOK_PLAIN, 6694, 12972, 22);
    ENC("foo!\n/bar", K3_TOK_PLAIN, 10570, 1698, 72768);
    ENC("  a\n\n  b   ", K3_TOK_PLAIN, 220, 261, 382, 220, 291, 274);
    ENC("x\xCC\x81y \xCC\x81!", K3_TOK_PLAIN, 87, 37484, 88, 220, 37484, 0);
    /* Unicode 16.0: U+1C8A and U+A7CD are letters (new Ll in 16.0), U+A7CF is not (17.0). */
    ENC("\xE1\xB2\x8A\xC3\xA9t\xC3\xA9 \xEA\x9F\x8D\xEA\x9F\x8F", K3_TOK_PLAIN, 157, 110, 232, 87066,
        7707, 253, 235, 166, 253, 237);
    ENC("", K3_TOK_PLAIN, );
}

static void test_modes(void)
{
    ENC("<|open|>hi<|close|>", K3_TOK_SPECIAL, 163587, 9663, 163588);
    ENC("<|open|>hi<|close|>", K3_TOK_PLAIN, 27, 91, 4454, 91, 29, 9663, 27, 91, 10794, 91, 29);
    /* Almost-specials stay text; a special at the very end is found. */
    struct k3_tok_ids a = {0}, b = {0};
    const char *s = "<|open|<|open|>[EOS] [EOS[<|reserved_token_163600|>";
    k3_tok_encode(tok, s, strlen(s), K3_TOK_SPECIAL, NULL, &a);
    int n_special = 0;
    for (size_t i = 0; i < a.n; i++) n_special += a.ids[i] >= 163584;
    CHECK(n_special == 3);
    CHECK(a.n > 0 && a.ids[a.n - 1] == 163600);
    k3_tok_encode(tok, s, strlen(s), K3_TOK_PLAIN, NULL, &b);
    for (size_t i = 0; i < b.n; i++) CHECK(b.ids[i] < 163584);
    k3_tok_ids_free(&a);
    k3_tok_ids_free(&b);
}

static char *repeat(const char *unit, size_t n_units)
{
    size_t u = strlen(unit);
    char *s = malloc(u * n_units + 1);
    for (size_t i = 0; i < n_units; i++) memcpy(s + i * u, unit, u);
    s[u * n_units] = 0;
    return s;
}

/* The builds of the encoder's byte scans this machine runs (tok_internal.h, enum
 * k3_tok_simd): the base one, and the AVX2 and AVX-512BW ones where the CPU has them, or
 * NEON's on aarch64. Tests that loop over them set tok->simd. */
static int n_builds(void) { return 1 + (int)k3_tok_simd(); }

static void encode_str(const char *s, size_t n, struct k3_pool *pool, struct k3_tok_ids *out)
{
    memset(out, 0, sizeof *out);
    k3_tok_encode(tok, s, n, K3_TOK_PLAIN, pool, out);
}

/* 60,000 'a': the wrapper cuts runs every 25,000 characters, so the ids are those of
 * 25,000 + 25,000 + 10,000 'a' (checked against tiktoken: 7,500 tokens). */
static void test_cuts(void)
{
    char *s = repeat("a", 60000);
    struct k3_tok_ids all, p25, p10;
    encode_str(s, 60000, NULL, &all);
    encode_str(s, 25000, NULL, &p25);
    encode_str(s, 10000, NULL, &p10);
    CHECK(all.n == 7500);
    CHECK(all.n == 2 * p25.n + p10.n && !memcmp(all.ids, p25.ids, p25.n * 4) &&
          !memcmp(all.ids + p25.n, p25.ids, p25.n * 4) &&
          !memcmp(all.ids + 2 * p25.n, p10.ids, p10.n * 4));
    k3_tok_ids_free(&all);
    k3_tok_ids_free(&p25);
    k3_tok_ids_free(&p10);
    free(s);
    /* U+001C is isspace() for the cut but not \s for the pattern: 30,000 of them are cut. */
    s = repeat("\x1c", 30000);
    encode_str(s, 30000, NULL, &all);
    encode_str(s, 25000, NULL, &p25);
    encode_str(s, 5000, NULL, &p10);
    CHECK(all.n == p25.n + p10.n);
    k3_tok_ids_free(&all);
    k3_tok_ids_free(&p25);
    k3_tok_ids_free(&p10);
    free(s);
}

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}

/* unicode_simd.h: the SIMD block classifier equals the byte loop, on random bytes and on
 * blocks dense in the space characters' lead bytes; and the byte loop's list of non-ASCII
 * spaces is exactly the Unicode table's PYSPACE code points. */
static void test_simd_blocks(void)
{
    static const uint8_t hot[] = {0x09, 0x0D, 0x1C, 0x20, 0x21, 0x80, 0x81, 0x85, 0x8A, 0x8B, 0x9A,
                                  0x9F, 0xA0, 0xA8, 0xA9, 0xAF, 0xBF, 0xC0, 0xC2, 0xE1, 0xE2, 0xE3};
    uint8_t buf[18];
    int bad = 0;
    for (int k = 0; k < 200000; k++) {
        for (int i = 0; i < 18; i++)
            buf[i] = k & 1 ? (uint8_t)rnd() : hot[rnd() % sizeof hot];
        struct k3_blk a = k3_blk16(buf), b = k3_blk16_scalar(buf);
        bad += a.hi != b.hi || a.cont != b.cont || a.space != b.space;
    }
    CHECK_MSG(bad == 0, "%d blocks classified differently by %s and the byte loop", bad, K3_BLK_SIMD);
    /* the CJK run masks (pretok.c), on blocks dense in the bytes their ranges end at */
    static const uint8_t cjk_hot[] = {0xC3, 0xD0, 0xD1, 0x9F, 0xAF, 0xB0, 0xB6, 0xBE, 0x80, 0x81, 0x82, 0x83, 0x84, 0x87, 0x88, 0x8F, 0x90, 0x91, 0x92,
                                      0x93, 0x95, 0x96, 0x97, 0x99, 0x9A, 0x9D, 0x9E, 0xA0, 0xA1, 0xA7,
                                      0xA8, 0xAF, 0xB0, 0xB7, 0xB8, 0xBA, 0xBB, 0xBC, 0xBF, 0xE2, 0xE3,
                                      0xE4, 0xE5, 0xE9, 0xEA, 0xEB, 0xEC, 0xED, 0xEE, 0xEF, 0x41};
    bad = 0;
    for (int k = 0; k < 200000; k++) {
        for (int i = 0; i < 18; i++)
            buf[i] = k & 1 ? (uint8_t)rnd() : cjk_hot[rnd() % sizeof cjk_hot];
        struct k3_cjk_blk a = k3_cjk16(buf), b = k3_cjk16_scalar(buf);
        struct k3_lat_blk l = k3_lat16(buf), ls = k3_lat16_scalar(buf);
        bad += a.han != b.han || a.both != b.both || k3_punct16(buf) != k3_punct16_scalar(buf) || l.up != ls.up ||
               l.lo != ls.lo;
    }
    CHECK_MSG(bad == 0, "%d blocks with CJK masks differing between %s and the byte loop", bad, K3_BLK_SIMD);
    int wrong = 0, n_han = 0, n_both = 0, n_punct = 0, n_lat = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        uint8_t u[4] = {0};
        if (cp < 0x80) u[0] = (uint8_t)cp;
        else if (cp < 0x800) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 63));
        else if (cp < 0x10000)
            u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 63)),
            u[2] = (uint8_t)(0x80 | (cp & 63));
        else
            u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
            u[2] = (uint8_t)(0x80 | (cp >> 6 & 63));
        wrong += k3_blk_space_at(u[0], u[1], u[2]) != !!(k3_uc_flags(cp) & K3_UC_PYSPACE);
        if (cp >= 0x80 && cp < 0x800) { /* the 2-byte letter masks too */
            unsigned f = k3_uc_flags(cp);
            int lu = k3_lat_up_at(u[0], u[1]), ll = k3_lat_lo_at(u[0], u[1]);
            wrong += (lu && f != (K3_UC_UP | K3_UC_L)) || (ll && f != (K3_UC_LO | K3_UC_L));
            n_lat += lu + ll;
        }
        if (cp >= 0x800 && cp < 0x10000) { /* a CJK run mask set only where the table agrees */
            unsigned f = k3_uc_flags(cp);
            int han = k3_cjk_han_at(u[0], u[1]), both = k3_cjk_both_at(u[0], u[1], u[2]);
            int punct = k3_cjk_punct_at(u[0], u[1], u[2]);
            wrong += (han && !(f & K3_UC_HAN)) || (both && (f & (K3_UC_UP | K3_UC_LO | K3_UC_HAN)) != (K3_UC_UP | K3_UC_LO)) ||
                     (punct && (f & (K3_UC_L | K3_UC_N | K3_UC_WS)));
            n_han += han;
            n_both += both;
            n_punct += punct;
        }
    }
    CHECK_MSG(wrong == 0, "%d code points with the wrong isspace(), CJK or letter class in unicode_simd.h", wrong);
    CHECK_MSG(n_han == 0x9FFF - 0x4E00 + 1 && n_both == 11136 + 86 + 94 && n_punct == 21 + 3 + 10 + 15 + 7 &&
              n_lat == 64 - 2 + 96,
              "masks cover %d Han, %d Hangul/kana, %d punctuation, %d 2-byte letters", n_han, n_both, n_punct, n_lat);
}

/* The UTF-8 bytes of code point c at o; their count. */
static size_t utf8_put(uint8_t *o, uint32_t c)
{
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return o[0] = (uint8_t)(0xE0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 63)),
               o[2] = (uint8_t)(0x80 | (c & 63)), 3;
    return o[0] = (uint8_t)(0xF0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 63)),
           o[2] = (uint8_t)(0x80 | (c >> 6 & 63)), o[3] = (uint8_t)(0x80 | (c & 63)), 4;
}

/* The pre-tokenizer's batches (64-byte windows, pretok_fast.h) in every build this machine
 * runs, against the piece-at-a-time scanner (k3_pretok_next), on texts of characters at the
 * edges of the window masks' ranges (unicode_simd.h) mixed with ASCII words, digits, blanks,
 * CR/LF, contractions and other code points; each text ends where its allocation ends
 * (AddressSanitizer: the windows' loads stay inside). Batch sizes vary, so batches end
 * inside windows too. */
static void test_scan_builds(void)
{
    static const uint32_t edges[] = {0xBF, 0xC0, 0xD6, 0xD7, 0xD8, 0xDE, 0xDF, 0xF6, 0xF7, 0xF8, 0xFF,
                                     0x100, 0x17F, 0x3FF, 0x400, 0x42F, 0x430, 0x45F, 0x460, 0x301,
                                     0x2012, 0x2013, 0x2027, 0x2028, 0x3000, 0x3001, 0x3003, 0x3004,
                                     0x3007, 0x3008, 0x3011, 0x3012, 0x3040, 0x3041, 0x3096, 0x3097,
                                     0x30A0, 0x30A1, 0x30FB, 0x30FC, 0x30FF, 0x3100, 0x4DFF, 0x4E00,
                                     0x9FFF, 0xA000, 0xABFF, 0xAC00, 0xD77F, 0xD780, 0xFF00, 0xFF01,
                                     0xFF0F, 0xFF10, 0xFF19, 0xFF1A, 0xFF20, 0xFF21, 0x1F600, 0x85, 0xA0};
    static const char *ascii[] = {" the", "Word", "'s", "'LL", "'re", " 123", "4567", "\r\n", "\n\n",
                                  "   ", "\t", " .", "!!", "x", "ABC", "a'", "\x1c", "\v", " 'd", "- "};
    int bad = 0, n_cases = 0;
    size_t ref[4096], got[4096];
    for (int k = 0; k < 3000; k++) {
        uint8_t tmp[4200];
        size_t n = 0, len = 1 + rnd() % (k % 3 ? 300 : 4000);
        int mix = (int)(rnd() % 4); /* 0: mostly ASCII ... 3: mostly the masks' edges */
        while (n < len) {
            uint32_t r = rnd() % 8;
            if ((int)r >= 2 + 2 * mix) {
                const char *a = ascii[rnd() % (sizeof ascii / sizeof ascii[0])];
                memcpy(tmp + n, a, strlen(a));
                n += strlen(a);
            } else if (r & 1) {
                n += utf8_put(tmp + n, edges[rnd() % (sizeof edges / sizeof edges[0])]);
            } else {
                uint32_t cp = rnd() % 0x10000;
                if (cp >= 0xD800 && cp < 0xE000) cp = 'q';
                n += utf8_put(tmp + n, cp);
            }
        }
        uint8_t *text = malloc(n);
        memcpy(text, tmp, n);
        size_t nr = 0;
        for (size_t p = 0; p < n; p = ref[nr++]) ref[nr] = k3_pretok_next(text, p, n);
        for (int b = 0; b < n_builds(); b++) {
            size_t ng = 0, p = 0, max = 1 + rnd() % 300;
            while (p < n) {
                size_t m =
#if K3_TOK_HAVE_X86_SIMD
                    b == K3_TOK_SIMD_AVX512 ? k3_pretok_batch_avx512(text, p, n, got + ng, max) :
                    b == K3_TOK_SIMD_AVX2 ? k3_pretok_batch_avx2(text, p, n, got + ng, max) :
#elif K3_TOK_HAVE_NEON64
                    b == K3_TOK_SIMD_NEON ? k3_pretok_batch_neon(text, p, n, got + ng, max) :
#endif
                    k3_pretok_batch_base(text, p, n, got + ng, max);
                ng += m;
                p = got[ng - 1];
            }
            bad += ng != nr || memcmp(got, ref, nr * sizeof ref[0]);
            n_cases++;
        }
        free(text);
    }
    CHECK_MSG(bad == 0, "%d of %d texts: the batched pre-tokenizer's pieces differ from the scanner's",
              bad, n_cases);
}

/* The wrapper's cuts on multi-byte runs, which the 16-byte blocks count by lead bytes:
 * 30,000 Han characters (non-space), U+3000 (space) and emoji (non-space) after 0-2
 * characters of the other class (shifting the runs against the blocks) are cut after
 * their 25,000th character: the ids are those of the two parts encoded apart. */
static void test_cuts_multibyte(void)
{
    const char *units[] = {"\xE4\xB8\xAD", "\xE3\x80\x80", "\xF0\x9F\x98\x80"};
    const char other[] = {'\n', 'x', '\n'};
    for (int u = 0; u < 3; u++) {
        size_t w = strlen(units[u]);
        for (size_t lead = 0; lead < 3; lead++) {
            char *s = repeat(units[u], 30000);
            size_t n = lead + 30000 * w, cut = lead + 25000 * w;
            char *t = malloc(n + 1);
            memset(t, other[u], lead);
            memcpy(t + lead, s, 30000 * w + 1);
            struct k3_tok_ids all, a, b;
            encode_str(t, n, NULL, &all);
            encode_str(t, cut, NULL, &a);
            encode_str(t + cut, n - cut, NULL, &b);
            CHECK_MSG(all.n == a.n + b.n && !memcmp(all.ids, a.ids, a.n * 4) &&
                          !memcmp(all.ids + a.n, b.ids, b.n * 4),
                      "unit %d lead %zu", u, lead);
            k3_tok_ids_free(&all);
            k3_tok_ids_free(&a);
            k3_tok_ids_free(&b);
            free(s);
            free(t);
        }
    }
}

/* The wrapper's cuts, written as tokenization_kimi.py does them, one code point at a time:
 * slices of 400,000, and inside each _split_whitespaces_or_nonwhitespaces. Appends the
 * substrings' end offsets to ends. */
static size_t ref_cuts(const uint8_t *s, size_t n, size_t *ends)
{
    size_t n_ends = 0, i = 0;
    while (i < n) {
        size_t start = i, chars = 0, run = 0;
        int run_space = -1;
        while (i < n && chars < K3_TOK_MAX_SLICE_CHARS) {
            int len;
            int sp = !!(k3_uc_flags(k3_utf8_decode(s + i, &len)) & K3_UC_PYSPACE);
            if (run_space < 0) run_space = sp;
            if (sp != run_space) {
                run = 1;
                run_space = sp;
            } else if (++run > K3_TOK_MAX_RUN_CHARS) {
                ends[n_ends++] = i;
                start = i;
                run = 1;
            }
            i += (size_t)len;
            chars++;
        }
        (void)start;
        ends[n_ends++] = i;
    }
    return n_ends;
}

/* Whether text[0..n) encodes differently from the concatenation of its reference substrings'
 * encodings (ref_cuts, which writes their ends to ends and their count to *n_ends). */
static int differs_from_ref_cuts(const uint8_t *text, size_t n, size_t *ends, size_t *n_ends)
{
    size_t a = 0;
    struct k3_tok_ids all, want = {0}, part;
    *n_ends = ref_cuts(text, n, ends);
    encode_str((const char *)text, n, NULL, &all);
    for (size_t e = 0; e < *n_ends; e++) {
        encode_str((const char *)text + a, ends[e] - a, NULL, &part);
        want.ids = realloc(want.ids, (want.n + part.n) * sizeof(int32_t));
        memcpy(want.ids + want.n, part.ids, part.n * sizeof(int32_t));
        want.n += part.n;
        k3_tok_ids_free(&part);
        a = ends[e];
    }
    int differs = all.n != want.n || memcmp(all.ids, want.ids, all.n * sizeof(int32_t));
    k3_tok_ids_free(&all);
    free(want.ids);
    return differs;
}

/* Texts of runs near the 25,000 limit (and short ones), of 1- to 4-byte characters of both
 * classes, some over 400,000 characters: encode(text) equals the concatenation of its
 * reference substrings' encodings (the 16-byte-block run check must never miss a cut). */
static void test_cuts_random(void)
{
    static const char *space[] = {" ", "\n", "\t", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", "\x1c"};
    static const char *word[] = {"a", "Z", "7", ".", "\xC3\xA9", "\xE4\xB8\xAD", "\xE3\x81\x82",
                                 "\xF0\x9F\x98\x80", "\xE1\x9A\x81", "\xC2\xA1"};
    size_t cap = 1600000;
    uint8_t *text = malloc(cap + 8);
    size_t *ends = malloc(sizeof(size_t) * 4096);
    int bad = 0;
    for (int k = 0; k < 12; k++) {
        size_t n = 0, target = k < 9 ? 60000 + rnd() % 100000 : 1200000 + rnd() % 300000;
        int cls = (int)(rnd() & 1);
        while (n + 4 * 25100 < cap && n < target) {
            /* short runs; runs of about 25,000 characters; runs whose bytes are near the
             * limit (3- and 2-byte characters), which the block check must pass or refuse */
            uint32_t kind = rnd() % 8;
            size_t run = kind < 5 ? 1 + rnd() % 40 : kind == 5 ? 24980 + rnd() % 40
                                  : kind == 6 ? 8300 + rnd() % 40 : 12460 + rnd() % 80;
            const char **units = cls ? space : word;
            size_t n_units = cls ? 7 : 10, one = rnd() % 4 ? rnd() % n_units : n_units;
            for (size_t r = 0; r < run; r++) {
                const char *u = units[one < n_units ? one : rnd() % n_units];
                size_t l = strlen(u);
                memcpy(text + n, u, l);
                n += l;
            }
            cls ^= 1;
        }
        size_t n_ends;
        for (int b = 0; b < n_builds(); b++) {
            tok->simd = (enum k3_tok_simd)b;
            bad += differs_from_ref_cuts(text, n, ends, &n_ends);
        }
        tok->simd = k3_tok_simd();
    }
    CHECK_MSG(bad == 0, "%d of 12 texts (x %d builds) encode differently from their reference substrings",
              bad, n_builds());
    free(text);
    free(ends);
}

/* Short texts and short last segments (after a special token) that end exactly where their
 * allocation ends: loads that read a word at a time must stay inside (run under
 * AddressSanitizer: the sanitizer stage of scripts/test.sh). Ids equal those of the same text
 * in a roomy buffer. */
static void test_exact_end(void)
{
    static const char *texts[] = {"a", "ab", " x", "abc", "hello", "1234567", "\xE4\xB8\xAD",
                                  "<|open|>ab", "<|open|>user<|sep|>hi", "x<|close|>abc", "  \n"};
    int bad = 0, n_cases = 0;
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
        for (int special = 0; special < 2; special++) {
            size_t n = strlen(texts[k]);
            char *exact = malloc(n), roomy[64] = {0};
            memcpy(exact, texts[k], n);
            memcpy(roomy, texts[k], n);
            enum k3_tok_mode mode = special ? K3_TOK_SPECIAL : K3_TOK_PLAIN;
            struct k3_tok_ids a = {0}, b = {0};
            k3_tok_encode(tok, exact, n, mode, NULL, &a);
            k3_tok_encode(tok, roomy, n, mode, NULL, &b);
            bad += a.n != b.n || memcmp(a.ids, b.ids, a.n * sizeof(int32_t));
            n_cases++;
            k3_tok_ids_free(&a);
            k3_tok_ids_free(&b);
            free(exact);
        }
    CHECK_MSG(bad == 0, "%d of %d texts at the end of their allocation encode differently", bad, n_cases);
}

/* One run just over the 25,000 limit (all others short), letters or blanks, at every
 * alignment to the run check's 64-byte blocks: the check alone decides that the run is cut,
 * so a block check that passed it would leave the text uncut. */
static void test_cuts_one_long_run(void)
{
    static const size_t lens[] = {25001, 25002, 25017, 25063, 25064, 25065, 25100, 25127, 25128,
                                  25129, 25150, 25190};
    uint8_t *text = malloc(26000 + 200);
    size_t ends[16];
    int bad = 0, n_cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t off = 0; off < 64; off += 9)
            for (int blank = 0; blank < 2; blank++) {
                size_t n = 0;
                for (size_t i = 0; i < off; i++) text[n++] = i % 3 == 2 ? ' ' : 'q';
                text[n++] = blank ? 'x' : ' ';
                for (size_t i = 0; i < lens[li]; i++)
                    text[n++] = blank ? (rnd() % 4 ? ' ' : '\t') : (uint8_t)('a' + rnd() % 26);
                for (size_t i = 0; i < 40; i++) text[n++] = i % 5 == 4 ? ' ' : 'z';
                for (int b = 0; b < n_builds(); b++) {
                    tok->simd = (enum k3_tok_simd)b;
                    size_t n_ends;
                    int differs = differs_from_ref_cuts(text, n, ends, &n_ends);
                    bad += n_ends < 2 || differs;
                    n_cases++;
                }
                tok->simd = k3_tok_simd();
            }
    CHECK_MSG(bad == 0, "%d of %d texts with one run over the limit encode differently from their "
                        "reference substrings", bad, n_cases);
    free(text);
}

/* k3_utf8_valid_prefix (16-byte blocks) against k3_utf8_check byte by byte, on valid text
 * with one defect (a random byte, a cut sequence, a surrogate, an overlong form) at every
 * offset of a block; and the SIMD UTF-8 and cut masks against their byte loops. */
static size_t ref_valid_prefix(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = k3_utf8_check(s + i, n - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

static void test_utf8_blocks(void)
{
    static const char *units[] = {"a", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xED\x9F\xBF",
                                  "\xE0\xA0\x80", "\xF4\x8F\xBF\xBF", "\xF0\x90\x80\x80"};
    static const char *defects[] = {"\xC0\x80", "\xED\xA0\x80", "\xE0\x9F\xBF", "\xF0\x8F\xBF\xBF",
                                    "\xF4\x90\x80\x80", "\xE4\xB8", "\x80", "\xF5", "\xFF", "\xC2"};
    uint8_t buf[720];
    int bad = 0, n_cases = 0;
    for (int k = 0; k < 20000; k++) {
        size_t n = 0, len = 20 + rnd() % (k & 1 ? 200 : 690);
        while (n < len) {
            const char *u = units[rnd() % 8];
            memcpy(buf + n, u, strlen(u));
            n += strlen(u);
        }
        if (k % 4) { /* one defect at a random character boundary or anywhere */
            size_t at = rnd() % n;
            const char *d = defects[rnd() % 10];
            size_t dl = strlen(d);
            if (at + dl <= sizeof buf) memcpy(buf + at, d, dl);
            if (at + dl > n && at + dl <= sizeof buf) n = at + dl;
        }
        size_t want = ref_valid_prefix(buf, n);
        bad += k3_utf8_valid_prefix(buf, n) != want;
#if K3_TOK_HAVE_X86_SIMD
        if (n_builds() > K3_TOK_SIMD_AVX2) bad += k3_utf8_valid_prefix_avx2(buf, n) != want;
        if (n_builds() > K3_TOK_SIMD_AVX512) bad += k3_utf8_valid_prefix_avx512(buf, n) != want;
#elif K3_TOK_HAVE_NEON64
        if (n_builds() > K3_TOK_SIMD_NEON) bad += k3_utf8_valid_prefix_neon(buf, n) != want;
#endif
        n_cases++;
    }
    CHECK_MSG(bad == 0, "%d of %d texts (x %d builds): SIMD UTF-8 check differs", bad, n_cases, n_builds());
    bad = 0;
    for (int k = 0; k < 200000; k++) {
        uint8_t b[32];
        for (int i = 0; i < 32; i++)
            b[i] = k % 3 == 0 ? (uint8_t)rnd() : k % 3 == 1 ? (uint8_t)(0x7F + rnd() % 0x81)
                                                            : (uint8_t)(0x3F + rnd() % 0x3D); /* letters' edges */
        struct k3_utf8_blk u = k3_utf8_blk16(b), us = k3_utf8_blk16_scalar(b);
        struct k3_cut_blk c = k3_cut_blk16(b), cs = k3_cut_blk16_scalar(b);
        uint32_t up, lo, ups, los;
        k3_letters16(b, &up, &lo);
        k3_letters16_scalar(b, &ups, &los);
        struct k3_ascii_cls a = k3_ascii_cls16(b), as = k3_ascii_cls16_scalar(b);
        bad += u.hi != us.hi || u.cont != us.cont || u.l2 != us.l2 || u.l3 != us.l3 || u.l4 != us.l4 ||
               u.bad != us.bad || c.sp != cs.sp || c.ns != cs.ns || c.cont != cs.cont || up != ups ||
               lo != los || a.hi != as.hi || a.up != as.up || a.lo != as.lo || a.digit != as.digit ||
               a.ws != as.ws || a.crlf != as.crlf || a.sp != as.sp || a.apos != as.apos;
    }
    CHECK_MSG(bad == 0, "%d blocks: %s UTF-8/cut/letter/ASCII class masks differ from the byte loops", bad,
              K3_BLK_SIMD);
    bad = 0;
    for (int k = 0; k < 256; k++) { /* every byte value at every position of a block */
        uint8_t b[32];
        for (int i = 0; i < 32; i++) b[i] = (uint8_t)(k + i * 37);
        struct k3_ascii_cls a = k3_ascii_cls16(b), as = k3_ascii_cls16_scalar(b);
        struct k3_cut_blk c = k3_cut_blk16(b), cs = k3_cut_blk16_scalar(b);
        uint32_t up, lo, ups, los;
        k3_letters16(b, &up, &lo);
        k3_letters16_scalar(b, &ups, &los);
        bad += a.hi != as.hi || a.up != as.up || a.lo != as.lo || a.digit != as.digit || a.ws != as.ws ||
               a.crlf != as.crlf || a.sp != as.sp || a.apos != as.apos || c.sp != cs.sp || c.ns != cs.ns ||
               c.cont != cs.cont || up != ups || lo != los;
    }
    CHECK_MSG(bad == 0, "%d blocks: %s ASCII class, cut and letter masks differ from the byte loops on "
                        "all byte values", bad, K3_BLK_SIMD);
}

/* The linear-scan and heap merges against the O(n^2) reference, on pieces long enough for
 * both paths (the heap starts above 128 bytes), from repetitive and random bytes. */
/* The whole-token lookup (k3_tok_piece_rank_h) on every token's own bytes, read with nothing
 * past them (under ASan, a load past the end fails); and the compare of a slot with a piece
 * of its first word, length and tag (k3_tok_slot_rest: 24 bytes inline, the arena after), which
 * only hash collisions reach in a lookup, on every slot: true for its token's bytes, false with
 * one byte changed at 8..23 or past 24. */
static void test_whole_lookup(void)
{
    int missed = 0, wrong = 0, changed = 0, n_slots = 0;
    uint8_t *buf = malloc((size_t)tok->max_token_bytes);
    for (int r = 0; r < tok->n_ranks; r++) {
        size_t n = tok->off[r + 1] - tok->off[r];
        uint8_t *own = malloc(n); /* exactly n bytes readable */
        memcpy(own, tok->bytes + tok->off[r], n);
        missed += k3_tok_piece_rank(tok, own, n) != (uint32_t)r;
        free(own);
    }
    for (uint32_t i = 0; i <= tok->piece_mask; i++) {
        const struct k3_tok_slot *e = &tok->pieces[i];
        if (!e->rank1) continue;
        n_slots++;
        size_t n = e->len;
        memcpy(buf, tok->bytes + tok->off[e->rank1 - 1], n);
        missed += !k3_tok_slot_rest(tok, e, buf, n, n);
        for (size_t at = 8; at < n; at = at < 23 ? at + 5 : at + 17) {
            buf[at] ^= 0x20;
            wrong += k3_tok_slot_rest(tok, e, buf, n, n);
            buf[at] ^= 0x20;
            changed++;
        }
    }
    free(buf);
    CHECK_MSG(n_slots == tok->n_ranks, "%d slots for %d ranks", n_slots, tok->n_ranks);
    CHECK_MSG(missed == 0, "%d tokens not found by their own bytes", missed);
    CHECK_MSG(wrong == 0, "%d of %d changed tokens matched the slot", wrong, changed);
    CHECK_MSG(changed > 40000, "only %d changed tokens: the test lost its long tokens", changed);
}

/* The pair table holds each token's own pair (vocab.c, build_pairs): every token's bytes alone
 * merge into it (k3_bpe_bytes, no whole-piece lookup; all 163,328 multi-byte Kimi tokens do),
 * each entry's two tokens make its token's bytes, and of the 296,461 splits of a token into
 * two tokens only those pairs answer; the others answer "no token". */
static void test_own_pairs(void)
{
    int32_t out[1024];
    CHECK(tok->max_token_bytes <= 1024);
    int unmerged = 0, n_multi = 0, n_entries = 0, bad_entry = 0, n_splits = 0, n_answer = 0;
    for (int r = 0; r < tok->n_ranks; r++) {
        const uint8_t *s = tok->bytes + tok->off[r];
        size_t n = tok->off[r + 1] - tok->off[r];
        if (n < 2) continue;
        n_multi++;
        unmerged += k3_bpe_bytes(tok, s, n, out) != 1 || out[0] != r;
        for (size_t k = 1; k < n; k++) {
            uint32_t a = k3_tok_piece_rank(tok, s, k), b = k3_tok_piece_rank(tok, s + k, n - k);
            if (a == K3_TOK_NONE || b == K3_TOK_NONE) continue;
            n_splits++;
            uint32_t got = k3_tok_pair_rank(tok, a, b);
            CHECK(got == K3_TOK_NONE || got == (uint32_t)r);
            n_answer += got == (uint32_t)r;
        }
    }
    for (uint32_t i = 0; i <= tok->pair_mask; i++) {
        uint64_t e = tok->pairs[i];
        if (e == UINT64_MAX) continue;
        uint32_t a = (uint32_t)(e >> 40), b = (uint32_t)(e >> 20) & 0xFFFFF, r = (uint32_t)e & 0xFFFFF;
        size_t na = tok->off[a + 1] - tok->off[a], nb = tok->off[b + 1] - tok->off[b];
        n_entries++;
        bad_entry += na + nb != tok->off[r + 1] - tok->off[r] ||
                     memcmp(tok->bytes + tok->off[a], tok->bytes + tok->off[r], na) ||
                     memcmp(tok->bytes + tok->off[b], tok->bytes + tok->off[r] + na, nb);
    }
    CHECK_MSG(unmerged == 0, "%d of %d tokens' bytes do not merge into them", unmerged, n_multi);
    CHECK_MSG(n_entries == n_multi && n_entries == 163328, "%d pairs for %d multi-byte tokens", n_entries, n_multi);
    CHECK_MSG(bad_entry == 0, "%d pairs do not make their token's bytes", bad_entry);
    CHECK_MSG(n_splits == 296461 && n_answer == n_entries, "%d of %d splits answer", n_answer, n_splits);
}

static void test_bpe_paths(void)
{
    static const char *alphabets[] = {"a", "ab", "abcdefghijklmnopqrstuvwxyz", "0123456789",
                                      "\xE4\xB8\xAD\xE6\x96\x87", " \n", "=+/AZaz09"};
    int32_t *fast = malloc(sizeof(int32_t) * 4096), *ref = malloc(sizeof(int32_t) * 4096);
    uint8_t buf[4096];
    int bad = 0, n_cases = 0;
    for (int a = 0; a < 7; a++) {
        size_t na = strlen(alphabets[a]);
        for (size_t n = 2; n <= 4096; n = n * 3 / 2 + 1) {
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)alphabets[a][rnd() % na];
            size_t nf = k3_bpe_piece(tok, buf, n, n, NULL, fast), nr = k3_bpe_piece_ref(tok, buf, n, ref);
            bad += nf != nr || memcmp(fast, ref, nf * 4);
            n_cases++;
        }
    }
    for (int k = 0; k < 200; k++) { /* random bytes, any length */
        size_t n = 2 + rnd() % 600;
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rnd();
        size_t nf = k3_bpe_piece(tok, buf, n, n, NULL, fast), nr = k3_bpe_piece_ref(tok, buf, n, ref);
        bad += nf != nr || memcmp(fast, ref, nf * 4);
        n_cases++;
    }
    CHECK_MSG(bad == 0, "%d of %d pieces differ from the reference merge", bad, n_cases);
    free(fast);
    free(ref);
}

/* ASCII pieces (k3_bpe_ascii: byte pairs that provably merge first start whole) against the
 * reference merge: words, identifiers and punctuation runs of 3..64 bytes from alphabets
 * where many pairs are tokens, with and without a leading space. */
static void test_bpe_ascii(void)
{
    static const char *alphabets[] = {"etaoinshrdlu", "abcdefghijklmnopqrstuvwxyz", "ETAOINSHRDLU_",
                                      "aeiou", "_().,;:=+-*/<>[]{}\"'", "0123456789abcdef", "th er in"};
    int32_t fast[128], ref[128];
    uint8_t buf[128];
    int bad = 0, n_cases = 0;
    for (int k = 0; k < 40000; k++) {
        const char *al = alphabets[k % 7];
        size_t na = strlen(al), n = 0, len = 3 + rnd() % (k % 3 ? 14 : 62);
        if (k % 2) buf[n++] = ' ';
        while (n < len) buf[n++] = (uint8_t)al[rnd() % na];
        size_t nr = k3_bpe_piece_ref(tok, buf, n, ref);
        size_t nf = k3_bpe_piece(tok, buf, n, n, NULL, fast);
        bad += nf != nr || memcmp(fast, ref, nf * 4);
        n_cases++;
    }
    CHECK_MSG(bad == 0, "%d of %d ASCII pieces differ from the reference merge", bad, n_cases);
}

/* Multi-byte pieces (bpe_chars.c: characters first, segment cuts, the segment memo) against
 * the reference merge: short words of Cyrillic, Greek, Latin-1, Hangul, kana and Han letters,
 * with and without a leading space (a low-rank token spans the space and a lead byte), one
 * script or mixed, without a cache and through one per-call cache that sees them all. */
static void test_bpe_multibyte(void)
{
    static const char *units[] = {
        "\xD0\xBF", "\xD1\x80", "\xD0\xBE", "\xD0\xB3", "\xD0\xB0", "\xD0\x9C",       /* п р о г а М */
        "\xCE\xB1", "\xCE\xBB", "\xCF\x89", "\xC3\xA9", "\xC3\xBC", "\xC3\x9F",       /* α λ ω é ü ß */
        "\xED\x95\x9C", "\xEA\xB5\xAD", "\xEC\x96\xB4", "\xEB\x8A\x94",             /* 한 국 어 는 */
        "\xE3\x81\x82", "\xE3\x81\x97", "\xE3\x82\xAB", "\xE3\x83\xBC",             /* あ し カ ー */
        "\xE4\xB8\xAD", "\xE6\x96\x87", "\xE7\x9A\x84", "\xE5\xAD\xA6", "\xE4\xBA\xBA"}; /* 中 文 的 学 人 */
    enum { N_UNITS = sizeof units / sizeof units[0] };
    int32_t fast[512], ref[512], cached[512];
    uint8_t buf[256];
    struct k3_bpe_cache cache;
    k3_bpe_cache_init(tok, &cache, 1 << 20);
    int bad = 0, n_cases = 0;
    for (int k = 0; k < 30000; k++) {
        size_t n = 0, chars = 1 + rnd() % 16;
        if (k % 2) buf[n++] = ' ';
        size_t lo = k % 5 == 4 ? 0 : (size_t)(k % 5) * 5, span = k % 5 == 4 ? N_UNITS : 6;
        for (size_t c = 0; c < chars; c++) {
            const char *u = units[(lo + rnd() % span) % N_UNITS];
            memcpy(buf + n, u, strlen(u));
            n += strlen(u);
        }
        size_t nr = k3_bpe_piece_ref(tok, buf, n, ref);
        size_t nf = k3_bpe_piece(tok, buf, n, n, NULL, fast);
        size_t nc = k3_bpe_piece(tok, buf, n, n, &cache, cached);
        bad += nf != nr || memcmp(fast, ref, nf * 4) || nc != nr || memcmp(cached, ref, nc * 4);
        n_cases++;
    }
    /* Every character pair of bigram_rank (a low-rank token holds it whole and adjacent: it
     * can stop a character from starting whole), alone, after a space and between neighbours
     * of its own characters. */
    int n_pairs = 0, lost = 0;
    for (uint32_t e = 0; e <= tok->bigram_rank_mask; e++) {
        uint64_t v = tok->bigram_rank[e];
        if (v == UINT64_MAX) continue;
        uint32_t cp[2] = {(uint32_t)(v >> 41), (uint32_t)(v >> 20) & 0x1FFFFF};
        n_pairs++;
        lost += k3_tok_bigram_rank(tok, cp[0], cp[1]) != (uint32_t)(v & 0xFFFFF); /* bigram_chars */
        for (int form = 0; form < 8; form++) {
            size_t n = 0;
            if (form & 1) buf[n++] = ' ';
            uint32_t seq[4], ns = 0;
            if (form & 2) seq[ns++] = cp[1];
            seq[ns++] = cp[0];
            seq[ns++] = cp[1];
            if (form & 4) seq[ns++] = cp[0];
            for (uint32_t q = 0; q < ns; q++) n += utf8_put(buf + n, seq[q]);
            size_t nr = k3_bpe_piece_ref(tok, buf, n, ref);
            size_t nf = k3_bpe_piece(tok, buf, n, n, NULL, fast);
            size_t nc = k3_bpe_piece(tok, buf, n, n, &cache, cached);
            bad += nf != nr || memcmp(fast, ref, nf * 4) || nc != nr || memcmp(cached, ref, nc * 4);
            n_cases++;
        }
    }
    k3_bpe_cache_free(&cache);
    CHECK_MSG(n_pairs > 100, "bigram_rank holds %d pairs", n_pairs);
    CHECK_MSG(lost == 0, "%d of the %d bigram_rank pairs not found by their characters", lost, n_pairs);
    CHECK_MSG(bad == 0, "%d of %d multi-byte pieces differ from the reference merge", bad, n_cases);
}

/* The memos of a whole encode (k3_bpe_pieces): words of one or two Hangul syllables after a
 * space, repeated in random order, so that pieces come back from every way of a set, and
 * from both tables: a piece of up to 7 bytes with more than two ids (rare syllables fall to
 * bytes) keeps its ids in m16. The ids are each piece's reference merge, concatenated. */
static void test_memo_pieces(void)
{
    enum { N_WORDS = 600, N_PIECES = 20000 };
    static uint8_t words[N_WORDS][8];
    static size_t word_len[N_WORDS];
    int32_t ref[N_WORDS][8];
    size_t ref_n[N_WORDS];
    int many_short = 0;
    for (int w = 0; w < N_WORDS; w++) {
        size_t n = 0;
        words[w][n++] = ' ';
        for (int c = 0; c < 1 + w % 2; c++) n += utf8_put(words[w] + n, 0xAC00 + rnd() % 11172);
        word_len[w] = n;
        ref_n[w] = k3_bpe_piece_ref(tok, words[w], n, ref[w]);
        many_short += n <= 7 && ref_n[w] > 2;
    }
    uint8_t *text = malloc((size_t)N_PIECES * 8 + 1);
    int32_t *want = malloc(sizeof(int32_t) * N_PIECES * 8);
    size_t len = 0, n_want = 0;
    for (int i = 0; i < N_PIECES; i++) {
        int w = (int)(rnd() % N_WORDS);
        memcpy(text + len, words[w], word_len[w]);
        len += word_len[w];
        memcpy(want + n_want, ref[w], ref_n[w] * sizeof(int32_t));
        n_want += ref_n[w];
    }
    struct k3_tok_ids ids = {0};
    k3_tok_encode(tok, (const char *)text, len, K3_TOK_PLAIN, NULL, &ids);
    CHECK_MSG(many_short > 10, "%d words of up to 7 bytes have more than two ids", many_short);
    CHECK_MSG(ids.n == n_want && !memcmp(ids.ids, want, n_want * sizeof(int32_t)),
              "encode of %zu repeated words: %zu ids, the pieces' merges give %zu", (size_t)N_PIECES,
              ids.n, n_want);
    k3_tok_ids_free(&ids);
    free(text);
    free(want);
}

/* The entries a kept memo holds of the texts it saw: its m8 and m16 ways of pieces and of
 * segments, and its long-piece tags, seeds left out; *seeds: its seeds. */
static size_t memo_entries(const struct k3_bpe_cache *c, size_t *seeds)
{
    size_t k = 0;
    const struct k3_memo *ms[2] = {&c->pieces, &c->segs};
    for (int j = 0; j < 2; j++) {
        for (size_t e = 0; e < ((size_t)1 << (64 - ms[j]->shift8)) * K3_MEMO_WAYS; e++) {
            const uint64_t *en = ms[j]->m8 + e * 2;
            k += en[0] != 0 && !(en[1] & M8_SEED);
            *seeds += (en[1] & M8_SEED) != 0;
        }
        for (size_t e = 0; e < ((size_t)1 << (64 - ms[j]->shift16)) * K3_MEMO_WAYS; e++) {
            uint64_t v0 = ms[j]->m16[e * 4 + 2];
            k += v0 != 0 && !(v0 & M16_SEED);
            *seeds += (v0 & M16_SEED) != 0;
        }
    }
    for (size_t e = 0; c->long_tags && e < ((size_t)c->long_mask + 1) * 2; e++) k += c->long_tags[e] != 0;
    return k;
}

/* The seeds a cache holds. */
static size_t seeds_in(const struct k3_bpe_cache *c)
{
    size_t seeds = 0;
    memo_entries(c, &seeds);
    return seeds;
}

/* The seeds as the plain definition puts them: every token of up to 16 bytes below the rank
 * bound, from the highest rank down, each into way 0 of its set, the set's others shifted. */
static void seeds_ref(const struct k3_memo *m, uint64_t *m8, uint64_t *m16)
{
    size_t ways8 = ((size_t)1 << (64 - m->shift8)) * K3_MEMO_WAYS;
    size_t r = ways8 * K3_MEMO_SEED_FACTOR;
    if (r > (size_t)tok->n_ranks) r = (size_t)tok->n_ranks;
    while (r-- > 0) {
        size_t n = tok->off[r + 1] - tok->off[r];
        if (n == 0 || n > K3_MEMO_BYTES) continue;
        uint64_t w[2] = {0, 0};
        for (size_t i = 0; i < n; i++) w[i / 8] |= (uint64_t)tok->bytes[tok->off[r] + i] << (8 * (i % 8));
        uint64_t h = memo_hash(w[0], w[1], n);
        if (n <= 7) {
            uint64_t *set = m8 + (h >> m->shift8) * 2 * K3_MEMO_WAYS;
            memmove(set + 2, set, sizeof(uint64_t) * 2 * (K3_MEMO_WAYS - 1));
            set[0] = memo_key8(w[0], n) | 1ull << 62;
            set[1] = r | M8_SEED;
        } else {
            uint64_t *set = m16 + (h >> m->shift16) * 4 * K3_MEMO_WAYS;
            memmove(set + 4, set, sizeof(uint64_t) * 4 * (K3_MEMO_WAYS - 1));
            set[0] = w[0];
            set[1] = w[1];
            set[2] = n | 1u << 5 | (uint64_t)r << 8 | M16_SEED;
            set[3] = 0;
        }
    }
}

/* The seeds a pieces memo is made with (bpe.c, memo_seed): memos of every size hold what the
 * definition puts there (seeds_ref), as made and after k3_bpe_cache_clear; every token of the
 * first 1,000 ranks (of up to 16 bytes) is in a memo made for 1 MiB of text, as the piece of its
 * own bytes with that one id; a hit makes a seed the text's; a piece put in a set of seeds
 * pushes a seed out without counting it as an eviction (no growth); and an ASCII text of the
 * seeded tokens' strings in random order (every piece a token, a seed when the memo is fresh)
 * gives the reference ids through a fresh cache and a cache whose seeds it then holds as hits. */
static void test_memo_seeds(void)
{
    /* memos of every size as made and as emptied, against the definition */
    int differ = 0, sizes = 0;
    for (size_t text = 100; text <= ((size_t)16 << 20); text *= 7) {
        struct k3_bpe_cache c;
        k3_bpe_cache_init(tok, &c, text);
        size_t b8 = ((size_t)1 << (64 - c.pieces.shift8)) * K3_MEMO_WAYS * 2 * sizeof(uint64_t);
        size_t b16 = ((size_t)1 << (64 - c.pieces.shift16)) * K3_MEMO_WAYS * 4 * sizeof(uint64_t);
        uint64_t *m8 = calloc(1, b8), *m16 = calloc(1, b16);
        seeds_ref(&c.pieces, m8, m16);
        differ += memcmp(m8, c.pieces.m8, b8) != 0 || memcmp(m16, c.pieces.m16, b16) != 0;
        int32_t ids[2] = {7, 8};
        memo_put(&c.pieces, 0xF8F8F8, 0, 3, memo_hash(0xF8F8F8, 0, 3), ids, 2);
        k3_bpe_cache_clear(tok, &c);
        differ += memcmp(m8, c.pieces.m8, b8) != 0 || memcmp(m16, c.pieces.m16, b16) != 0;
        sizes++;
        free(m8);
        free(m16);
        k3_bpe_cache_free(&c);
    }
    CHECK_MSG(differ == 0, "%d of %d seeded tables (made, emptied) differ from the definition's", differ, 2 * sizes);

    struct k3_bpe_cache c;
    k3_bpe_cache_init(tok, &c, 1 << 20);
    size_t seeds = seeds_in(&c), want = 0, found = 0, wrong = 0, promoted = 0;
    for (uint32_t r = 0; r < 1000; r++) {
        size_t n = tok->off[r + 1] - tok->off[r];
        if (!n || n > K3_MEMO_BYTES) continue;
        uint8_t b[16] = {0};
        memcpy(b, tok->bytes + tok->off[r], n);
        uint64_t w0, w1;
        memcpy(&w0, b, 8);
        memcpy(&w1, b + 8, 8);
        int32_t out[8];
        size_t before = seeds_in(&c);
        size_t k = memo_get(&c.pieces, w0, w1, n, memo_hash(w0, w1, n), out);
        want++;
        found += k == 1;
        wrong += k && (k != 1 || out[0] != (int32_t)r);
        promoted += k == 1 && seeds_in(&c) == before - 1;
    }
    size_t ways8 = ((size_t)1 << (64 - c.pieces.shift8)) * K3_MEMO_WAYS;
    CHECK_MSG(seeds > ways8 * 3 / 4, "a memo for 1 MiB holds %zu seeds, its m8 %zu ways", seeds, ways8);
    CHECK_MSG(found == want && wrong == 0 && promoted == found,
              "of %zu tokens of the first 1,000 ranks %zu found, %zu with other ids, %zu seeds made the text's",
              want, found, wrong, promoted);
    /* 64 new pieces of 3 bytes (no token: bytes >= 0xF8) into full sets of seeds */
    uint32_t ev8 = c.pieces.evicted8;
    for (int i = 0; i < 64; i++) {
        uint64_t w0 = 0xF8F8F8u + ((uint64_t)i << 16);
        int32_t ids[3] = {1, 2, 3};
        memo_put(&c.pieces, w0, 0, 3, memo_hash(w0, 0, 3), ids, 2);
    }
    CHECK_MSG(ev8 == 0 && c.pieces.evicted8 == 0, "seeds pushed out counted as evictions: %u, then %u", ev8,
              c.pieces.evicted8);
    k3_bpe_cache_free(&c);

    /* the seeded tokens that are ASCII words after a space, as a text */
    enum { N_PIECES = 30000 };
    uint32_t words[2000];
    int n_words = 0;
    for (uint32_t r = 0; r < 20000 && n_words < 2000; r++) {
        const uint8_t *b = tok->bytes + tok->off[r];
        size_t n = tok->off[r + 1] - tok->off[r], a = 1;
        while (a < n && ((b[a] | 0x20) >= 'a' && (b[a] | 0x20) <= 'z')) a++;
        if (n >= 3 && n <= 16 && b[0] == ' ' && a == n) words[n_words++] = r;
    }
    char *text = malloc((size_t)N_PIECES * 16 + 1);
    int32_t *ref = malloc(sizeof(int32_t) * N_PIECES);
    size_t len = 0;
    for (int i = 0; i < N_PIECES; i++) {
        uint32_t r = words[rnd() % (uint32_t)n_words];
        size_t n = tok->off[r + 1] - tok->off[r];
        memcpy(text + len, tok->bytes + tok->off[r], n);
        len += n;
        ref[i] = (int32_t)r;
    }
    int bad = 0;
    for (int call = 0; call < 2; call++) { /* after the forget: seeds; again: hits */
        if (call == 0) k3_tok_forget(tok);
        struct k3_tok_ids ids;
        encode_str(text, len, NULL, &ids);
        bad += ids.n != N_PIECES || memcmp(ids.ids, ref, sizeof(int32_t) * N_PIECES);
        k3_tok_ids_free(&ids);
    }
    CHECK_MSG(n_words > 1000 && bad == 0, "%d of 2 calls on %d seeded words in random order differ", bad, n_words);
    free(text);
    free(ref);
}

/* The memos the tokenizer keeps between calls (tokenizer.c): calls on texts whose pieces
 * crowd each other out of them, in any order, on one thread or several at once (and a pool's
 * workers), or when every kept memo is taken (the call makes its own), give the ids of calls
 * on emptied memos. */
enum { KEPT_TEXTS = 6 };
static char *kept_text[KEPT_TEXTS];
static size_t kept_len[KEPT_TEXTS];
static struct k3_tok_ids kept_want[KEPT_TEXTS];

static size_t random_word(uint8_t *o, int kind)
{
    size_t n = 0, len = 1 + rnd() % 10;
    if (rnd() % 2) o[n++] = ' ';
    static const uint32_t base[] = {'a', 0xAC00, 0x4E00, 0x0430, 0x30A0, '0'};
    static const uint32_t span[] = {26, 11172, 2000, 32, 90, 10};
    for (size_t i = 0; i < len; i++) n += utf8_put(o + n, base[kind] + rnd() % span[kind]);
    return n;
}

static int kept_check(int i, struct k3_pool *pool)
{
    struct k3_tok_ids ids;
    encode_str(kept_text[i], kept_len[i], pool, &ids);
    int ok = ids.n == kept_want[i].n && !memcmp(ids.ids, kept_want[i].ids, ids.n * sizeof(int32_t));
    k3_tok_ids_free(&ids);
    return ok;
}

static void *kept_thread(void *arg)
{
    int id = (int)(intptr_t)arg, bad = 0;
    struct k3_pool pool;
    int pooled = id == 0 && k3_pool_init(&pool, 3) == 0;
    for (int round = 0; round < 4; round++)
        for (int k = 0; k < KEPT_TEXTS; k++) bad += !kept_check((k + id) % KEPT_TEXTS, pooled ? &pool : NULL);
    if (pooled) k3_pool_free(&pool);
    return (void *)(intptr_t)bad;
}

/* Kept memos grow (k3_bpe_cache_grow) when two calls in a row push entries of the texts out
 * of m8, m16 and the long-piece table (seeds pushed out do not count): a 300 KB text of
 * random words (nearly all distinct), three in five of two Hangul syllables (7 bytes, their
 * ids in m16 and a mark in m8: the seeded m8 holds four times a text's own sets), the rest
 * Cyrillic of 9..17 bytes and Hangul of 19..37, sent again, grows all three. The calls after
 * give the same ids; every entry of a grown table sits in the set its hash names;
 * k3_tok_forget makes the tables their first size again, and one call alone grows none. */
static void test_memo_growth(void)
{
    size_t want = 300000, n = 0;
    char *s = malloc(want + 64);
    while (n < want) { /* " " + 2 or 6..12 Hangul syllables, or 4..8 Cyrillic letters */
        int r = (int)(rnd() % 5), kind = r < 3 ? 0 : r - 2;
        int len = kind == 0 ? 2 : kind == 1 ? 4 + rnd() % 5 : 6 + rnd() % 7;
        s[n++] = ' ';
        for (int i = 0; i < len; i++)
            n += utf8_put((uint8_t *)s + n, kind == 1 ? 0x0430 + rnd() % 32 : 0xAC00 + rnd() % 11172);
    }
    k3_tok_forget(tok);
    struct k3_tok_ids first, again;
    encode_str(s, n, NULL, &first);
    int bad = 0, grown8 = 0, grown16 = 0, grown_long = 0, misplaced = 0, unshrunk = 0;
    for (int round = 0; round < 3; round++) {
        encode_str(s, n, NULL, &again);
        bad += again.n != first.n || memcmp(again.ids, first.ids, first.n * sizeof(int32_t));
        k3_tok_ids_free(&again);
    }
    for (int i = 0; i < K3_TOK_MEMOS; i++) {
        if (!tok->memos->made[i]) continue;
        struct k3_bpe_cache *c = &tok->memos->cache[i];
        struct k3_memo *m = &c->pieces;
        grown8 += m->shift8 < m->shift8_made;
        grown16 += m->shift16 < m->shift16_made;
        for (size_t e = 0; e < ((size_t)1 << (64 - m->shift8)) * K3_MEMO_WAYS; e++) {
            const uint64_t *x = m->m8 + e * 2;
            if (x[0]) misplaced += memo_set8(m, memo_hash8(x[0] & (M8_IN_M16 - 1))) != m->m8 + e / K3_MEMO_WAYS * K3_MEMO_WAYS * 2;
        }
        grown_long += c->long_mask > c->long_mask_made;
        for (size_t e = 0; e < ((size_t)1 << (64 - m->shift16)) * K3_MEMO_WAYS; e++) {
            const uint64_t *x = m->m16 + e * 4;
            if (x[2]) misplaced += memo_set16(m, memo_hash(x[0], x[1], x[2] & 31)) != m->m16 + e / K3_MEMO_WAYS * K3_MEMO_WAYS * 4;
        }
        for (size_t e = 0; c->long_tags && e < ((size_t)c->long_mask + 1) * 2; e++) {
            if (!c->long_tags[e]) continue;
            size_t len = c->long_tags[e] & 0xFF;
            uint64_t w0 = k3_tok_word(c->longs[e].key, len, len);
            misplaced += k3_long_set(k3_tok_piece_hash(tok, w0, c->longs[e].key, len, len), c->long_mask) != e / 2 * 2;
        }
    }
    size_t counted = 0; /* the budget's count is the sum of what each memo grew by */
    for (int i = 0; i < K3_TOK_MEMOS; i++)
        if (tok->memos->made[i]) counted += k3_bpe_cache_grown_bytes(&tok->memos->cache[i]);
    size_t grown_bytes = atomic_load(&tok->memos->grown);
    k3_tok_forget(tok);
    size_t after_forget = atomic_load(&tok->memos->grown);
    for (int i = 0; i < K3_TOK_MEMOS; i++) {
        struct k3_bpe_cache *c = &tok->memos->cache[i];
        if (tok->memos->made[i])
            unshrunk += c->pieces.shift8 != c->pieces.shift8_made || c->pieces.shift16 != c->pieces.shift16_made ||
                        c->long_mask != c->long_mask_made;
    }
    /* no room in the budget: the same calls grow nothing */
    tok->memos->grow_budget = 0;
    for (int round = 0; round < 4; round++) {
        encode_str(s, n, NULL, &again);
        bad += again.n != first.n || memcmp(again.ids, first.ids, first.n * sizeof(int32_t));
        k3_tok_ids_free(&again);
    }
    int over_budget = 0;
    for (int i = 0; i < K3_TOK_MEMOS; i++)
        if (tok->memos->made[i]) over_budget += k3_bpe_cache_grown_bytes(&tok->memos->cache[i]) != 0;
    tok->memos->grow_budget = K3_TOK_MEMO_GROW_BUDGET;
    k3_tok_forget(tok);
    encode_str(s, n, NULL, &again); /* one call alone: no table grows */
    bad += again.n != first.n || memcmp(again.ids, first.ids, first.n * sizeof(int32_t));
    k3_tok_ids_free(&again);
    k3_tok_ids_free(&first);
    free(s);
    int grown_once = 0;
    for (int i = 0; i < K3_TOK_MEMOS; i++) {
        struct k3_bpe_cache *c = &tok->memos->cache[i];
        if (tok->memos->made[i])
            grown_once += c->pieces.shift8 != c->pieces.shift8_made || c->pieces.shift16 != c->pieces.shift16_made ||
                          c->long_mask != c->long_mask_made;
    }
    CHECK_MSG(grown_once == 0, "%d kept memos grew after one call", grown_once);
    CHECK_MSG(grown_bytes > 0 && grown_bytes == counted, "grown %zu bytes, the memos say %zu", grown_bytes, counted);
    CHECK_MSG(after_forget == 0, "%zu bytes still counted as grown after k3_tok_forget", after_forget);
    CHECK_MSG(over_budget == 0, "%d kept memos grew with no room in the budget", over_budget);
    CHECK_MSG(grown8 > 0 && grown16 > 0 && grown_long > 0, "tables grown: m8 %d, m16 %d, long %d", grown8, grown16, grown_long);
    CHECK_MSG(misplaced == 0, "%d entries of grown tables not in their hash's set", misplaced);
    CHECK_MSG(unshrunk == 0, "%d kept memos not back to their first size after k3_tok_forget", unshrunk);
    CHECK_MSG(bad == 0, "%d calls on grown memos differ from the first call", bad);
}

static void test_kept_memos(void)
{
    uint8_t w[64];
    for (int i = 0; i < KEPT_TEXTS; i++) {
        size_t want = i < 4 ? 40000 : 300000; /* the last two take the memos of large texts */
        char *s = malloc(want + 64);
        size_t n = 0;
        while (n < want) {
            size_t l = random_word(w, (int)(rnd() % 6));
            memcpy(s + n, w, l);
            n += l;
        }
        kept_text[i] = s;
        kept_len[i] = n;
        k3_tok_forget(tok);
        encode_str(s, n, NULL, &kept_want[i]);
    }
    int bad = 0;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < KEPT_TEXTS; k++) bad += !kept_check(round == 1 ? KEPT_TEXTS - 1 - k : k, NULL);
    CHECK_MSG(bad == 0, "%d calls after other texts differ from calls on emptied memos", bad);
    for (int i = 0; i < K3_TOK_MEMOS; i++) atomic_store(&tok->memos->busy[i], 1);
    for (int k = 0; k < KEPT_TEXTS; k++) bad += !kept_check(k, NULL);
    for (int i = 0; i < K3_TOK_MEMOS; i++) atomic_store(&tok->memos->busy[i], 0);
    CHECK_MSG(bad == 0, "%d calls with every kept memo taken differ", bad);
    pthread_t th[6];
    for (int t = 0; t < 6; t++) CHECK(pthread_create(&th[t], NULL, kept_thread, (void *)(intptr_t)t) == 0);
    bad = 0;
    for (int t = 0; t < 6; t++) {
        void *r;
        pthread_join(th[t], &r);
        bad += (int)(intptr_t)r;
    }
    CHECK_MSG(bad == 0, "%d calls from 6 threads at once differ from calls on emptied memos", bad);
    for (int i = 0; i < KEPT_TEXTS; i++) {
        free(kept_text[i]);
        k3_tok_ids_free(&kept_want[i]);
    }
}

/* The chunks kept from call to call (tok_chunks.c): a text of about 200 KB (words of six
 * scripts, lines) sent again gives the ids it gives with nothing kept, the third call from
 * the kept chunks alone; a longer text that starts with it finds most of them; so do the
 * pool's chunks; a text that differs from a kept chunk only where its hash does not look
 * gets its own ids; ten chunks of one hash and length keep four; a small budget keeps within it; k3_tok_forget empties them; six threads at
 * once get the same ids. */
static char *chunk_text(size_t want, size_t *n_out)
{
    char *s = malloc(want + 64);
    size_t n = 0;
    uint8_t w[64];
    while (n < want) {
        size_t l = random_word(w, (int)(rnd() % 6));
        memcpy(s + n, w, l);
        n += l;
        if (rnd() % 12 == 0) s[n++] = '\n';
    }
    *n_out = n;
    return s;
}

static int ids_equal(const struct k3_tok_ids *a, const struct k3_tok_ids *b)
{
    return a->n == b->n && !memcmp(a->ids, b->ids, a->n * sizeof(int32_t));
}

struct chunk_job {
    const char *s;
    size_t n;
    const struct k3_tok_ids *want;
    int bad;
};

static void *chunk_thread(void *arg)
{
    struct chunk_job *j = arg;
    for (int round = 0; round < 4; round++) {
        struct k3_tok_ids ids;
        encode_str(j->s, j->n, NULL, &ids);
        j->bad += !ids_equal(&ids, j->want);
        k3_tok_ids_free(&ids);
    }
    return NULL;
}

static void test_chunks(void)
{
    size_t n, n_more, hits, misses, kept;
    char *s = chunk_text(200000, &n), *more = chunk_text(20000, &n_more);
    char *longer = malloc(n + n_more);
    memcpy(longer, s, n);
    memcpy(longer + n, more, n_more);
    /* s with one letter changed where the hash does not look (it samples lines 4 KiB apart):
     * the same chunks and hashes, other bytes */
    char *other = malloc(n);
    memcpy(other, s, n);
    size_t at = 100;
    while (!(other[at] >= 'a' && other[at] < 'z')) at++;
    other[at]++;
    struct k3_tok_ids want, want_longer, want_pool, want_other, ids;
    struct k3_pool pool;
    CHECK(k3_pool_init(&pool, 3) == 0);
    size_t hits0;
    k3_tok_chunks_stats(tok->chunks, &hits0, &misses, &kept);
    k3_tok_chunk_budget(tok, 0); /* the ids with nothing kept */
    encode_str(s, n, NULL, &want);
    encode_str(other, n, NULL, &want_other);
    CHECK(!ids_equal(&want, &want_other));
    encode_str(longer, n + n_more, NULL, &want_longer);
    encode_str(s, n, &pool, &want_pool);
    CHECK(ids_equal(&want, &want_pool));
    k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
    CHECK_MSG(hits == hits0 && kept == 0, "budget 0: %zu found, %zu bytes kept", hits - hits0, kept);
    k3_tok_chunk_budget(tok, K3_TOK_CHUNK_BUDGET);
    k3_tok_forget(tok);
    int bad = 0;
    size_t hits_by_call[3], misses_by_call[3], hits_base, misses_base; /* counts since load */
    k3_tok_chunks_stats(tok->chunks, &hits_base, &misses_base, &kept);
    for (int call = 0; call < 3; call++) {
        encode_str(s, n, NULL, &ids);
        bad += !ids_equal(&ids, &want);
        k3_tok_ids_free(&ids);
        k3_tok_chunks_stats(tok->chunks, &hits_by_call[call], &misses_by_call[call], &kept);
        hits_by_call[call] -= hits_base;
        misses_by_call[call] -= misses_base;
    }
    size_t chunks = misses_by_call[0];
    CHECK_MSG(chunks >= 8 && hits_by_call[1] == 0 && misses_by_call[1] == 2 * chunks &&
              hits_by_call[2] == chunks && misses_by_call[2] == 2 * chunks,
              "%zu chunks; hits %zu %zu %zu, misses %zu %zu %zu", chunks, hits_by_call[0], hits_by_call[1],
              hits_by_call[2], misses_by_call[0], misses_by_call[1], misses_by_call[2]);
    encode_str(other, n, NULL, &ids); /* a kept chunk's hash, not its bytes */
    bad += !ids_equal(&ids, &want_other);
    k3_tok_ids_free(&ids);
    encode_str(longer, n + n_more, NULL, &ids); /* the same chunks up to near the end of s */
    bad += !ids_equal(&ids, &want_longer);
    k3_tok_ids_free(&ids);
    size_t h0 = hits_by_call[2];
    k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
    CHECK_MSG(hits - h0 >= chunks - 2, "a longer text found %zu of %zu chunks", hits - h0, chunks);
    for (int call = 0; call < 3; call++) { /* the pool's chunks */
        encode_str(s, n, &pool, &ids);
        bad += !ids_equal(&ids, &want);
        k3_tok_ids_free(&ids);
    }
    k3_tok_chunks_stats(tok->chunks, &h0, &misses, &kept);
    encode_str(s, n, &pool, &ids);
    bad += !ids_equal(&ids, &want);
    k3_tok_ids_free(&ids);
    k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
    CHECK_MSG(hits > h0, "the pool's chunks were not found (%zu hits)", hits - h0);
    encode_str(longer, n + n_more, &pool, &ids); /* kept chunks first, the pool for the rest */
    bad += !ids_equal(&ids, &want_longer);
    k3_tok_ids_free(&ids);
    struct chunk_job jobs[6];
    pthread_t th[6];
    for (int t = 0; t < 6; t++) {
        jobs[t] = (struct chunk_job){t % 2 ? longer : s, t % 2 ? n + n_more : n, t % 2 ? &want_longer : &want, 0};
        CHECK(pthread_create(&th[t], NULL, chunk_thread, &jobs[t]) == 0);
    }
    for (int t = 0; t < 6; t++) {
        pthread_join(th[t], NULL);
        bad += jobs[t].bad;
    }
    /* ten texts of one chunk that differ only in a byte the hash does not sample: the same
     * hash and length, which crafted text can make; four are kept, the others encoded each
     * time, and all get their own ids */
    size_t nv = 8000, at_v = 100, found0;
    while ((s[nv] & 0xC0) == 0x80) nv--;
    while (!(s[at_v] >= 'a' && s[at_v] <= 'z')) at_v++;
    CHECK(at_v < 4000);
    char *v = malloc(nv);
    memcpy(v, s, nv);
    k3_tok_chunks_stats(tok->chunks, &found0, &misses, &kept);
    for (int k = 0; k < 10; k++) {
        v[at_v] = (char)('a' + k);
        struct k3_tok_ids first;
        encode_str(v, nv, NULL, &first);
        for (int call = 0; call < 2; call++) {
            encode_str(v, nv, NULL, &ids);
            bad += !ids_equal(&ids, &first);
            k3_tok_ids_free(&ids);
        }
        k3_tok_ids_free(&first);
    }
    free(v);
    k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
    CHECK_MSG(hits - found0 == 4, "%zu of ten chunks of one hash found on their third call", hits - found0);
    k3_tok_chunk_budget(tok, 64 * 1024); /* least recently used out first */
    k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
    CHECK_MSG(kept <= 64 * 1024, "%zu bytes kept over a 64 KiB budget", kept);
    for (int call = 0; call < 3; call++) {
        encode_str(s, n, NULL, &ids);
        bad += !ids_equal(&ids, &want);
        k3_tok_ids_free(&ids);
        k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
        CHECK_MSG(kept <= 64 * 1024, "%zu bytes kept over a 64 KiB budget", kept);
    }
    k3_tok_chunk_budget(tok, K3_TOK_CHUNK_BUDGET);
    encode_str(s, n, NULL, &ids);
    k3_tok_ids_free(&ids);
    size_t hits_before;
    k3_tok_chunks_stats(tok->chunks, &hits_before, &misses, &kept);
    k3_tok_forget(tok);
    k3_tok_chunks_stats(tok->chunks, &hits, &misses, &kept);
    CHECK_MSG(kept == 0, "after k3_tok_forget: %zu bytes kept", kept);
    CHECK_MSG(hits == hits_before && hits > 0, "after k3_tok_forget the count of chunks found went "
              "from %zu to %zu (a counter: it only grows)", hits_before, hits);
    CHECK_MSG(bad == 0, "%d calls through kept chunks differ from calls with none", bad);
    k3_pool_free(&pool);
    k3_tok_ids_free(&want);
    k3_tok_ids_free(&want_longer);
    k3_tok_ids_free(&want_pool);
    k3_tok_ids_free(&want_other);
    free(s);
    free(other);
    free(more);
    free(longer);
}

/* k3_tok_forget empties every kept memo a call took since the last one (and only needs to:
 * the others are as made, and emptying megabytes of them pushed the tables out of the caches
 * before a benchmark's next call). Texts of two sizes (words, CJK and long pieces), then
 * the forget: no kept memo holds an entry of them, every one holds its seeds again, as many
 * as when it was made; one of the texts again, and the forget: the same. */
static void test_forget_empties(void)
{
    uint8_t w[64];
    char *s[2];
    size_t n[2] = {0, 0};
    for (int t = 0; t < 2; t++) {
        size_t want = t ? 300000 : 40000;
        s[t] = malloc(want + 64);
        while (n[t] < want) {
            size_t l = random_word(w, (int)(rnd() % 6));
            memcpy(s[t] + n[t], w, l);
            n[t] += l;
        }
    }
    size_t left[2] = {0, 0}, seeds[2] = {0, 0}, fresh_seeds[2] = {0, 0};
    int taken = 0, still_used = 0;
    for (int round = 0; round < 2; round++) {
        for (int t = round; t < 2; t++) { /* both texts, then the large one alone */
            struct k3_tok_ids ids;
            encode_str(s[t], n[t], NULL, &ids);
            k3_tok_ids_free(&ids);
        }
        for (int i = 0; i < K3_TOK_MEMOS; i++) taken += tok->memos->used[i];
        k3_tok_forget(tok);
        for (int i = 0; i < K3_TOK_MEMOS; i++) {
            if (!tok->memos->made[i]) continue;
            left[round] += memo_entries(&tok->memos->cache[i], &seeds[round]);
            struct k3_bpe_cache fresh; /* one made now for a text of the kept one's size */
            k3_bpe_cache_init(tok, &fresh,
                              k3_memo_text_bytes(64 - tok->memos->cache[i].pieces.shift8_made - K3_MEMO_SEEDED_MORE8));
            memo_entries(&fresh, &fresh_seeds[round]);
            k3_bpe_cache_free(&fresh);
            still_used += tok->memos->used[i];
        }
    }
    CHECK_MSG(taken >= 3, "%d kept memos marked taken by 3 calls", taken);
    CHECK_MSG(left[0] == 0 && left[1] == 0, "entries left after k3_tok_forget: %zu, then %zu", left[0], left[1]);
    CHECK_MSG(seeds[0] > 0 && seeds[0] == fresh_seeds[0] && seeds[1] == fresh_seeds[1],
              "seeds after k3_tok_forget: %zu (memos made now for those sizes: %zu), then %zu (%zu)", seeds[0],
              fresh_seeds[0], seeds[1], fresh_seeds[1]);
    CHECK_MSG(still_used == 0, "%d kept memos still marked taken after k3_tok_forget", still_used);
    free(s[0]);
    free(s[1]);
}

/* Threads give the ids of one thread, on text with and without safe cut points. */
static void test_threads(void)
{
    struct k3_pool pool;
    CHECK(k3_pool_init(&pool, 3) == 0);
    const char *units[] = {"The quick brown fox, 12345 jumps!\n", "中文テキスト한국어 ",
                           "a=b+c;d/e*f", "x\xCC\x81 \xF0\x9F\x98\x80\r\n\t "};
    for (int u = 0; u < 4; u++) {
        char *s = repeat(units[u], 300000 / strlen(units[u]));
        size_t n = strlen(s);
        struct k3_tok_ids one, many;
        encode_str(s, n, NULL, &one);
        encode_str(s, n, &pool, &many);
        CHECK_MSG(one.n == many.n && !memcmp(one.ids, many.ids, one.n * 4), "unit %d", u);
        k3_tok_ids_free(&one);
        k3_tok_ids_free(&many);
        free(s);
    }
    /* over MT_VALID_MIN_BYTES the UTF-8 check runs on the pool too: a valid text, and one
     * with a stray byte in its middle */
    for (int bad = 0; bad < 2; bad++) {
        char *s = repeat(units[1], (1300 * 1000) / strlen(units[1]));
        size_t n = strlen(s);
        if (bad) s[n / 2 + 1] = (char)0xFF;
        struct k3_tok_ids one, many;
        encode_str(s, n, NULL, &one);
        encode_str(s, n, &pool, &many);
        CHECK_MSG(n > (1u << 20) && one.n == many.n && !memcmp(one.ids, many.ids, one.n * 4),
                  "a %zu-byte text (%s)", n, bad ? "a stray byte" : "valid");
        k3_tok_ids_free(&one);
        k3_tok_ids_free(&many);
        free(s);
    }
    /* short texts (a few times the smallest chunk), the units interleaved in a random
     * order, so that chunk boundaries fall in every kind of text */
    uint64_t rng = 12345;
    for (int trial = 0; trial < 40; trial++) {
        size_t want = 16 * 1024 + (size_t)trial * 1500, n = 0;
        char *s = malloc(want + 64);
        CHECK(s != NULL);
        while (n < want) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *u = units[rng >> 62];
            size_t l = strlen(u);
            memcpy(s + n, u, l);
            n += l;
        }
        struct k3_tok_ids one, many;
        encode_str(s, n, NULL, &one);
        encode_str(s, n, &pool, &many);
        CHECK_MSG(one.n == many.n && !memcmp(one.ids, many.ids, one.n * 4), "short text %d (%zu bytes)", trial, n);
        k3_tok_ids_free(&one);
        k3_tok_ids_free(&many);
        free(s);
    }
    k3_pool_free(&pool);
}

static void test_decode(void)
{
    const char *s = "Kimi K3 говорит 中文 😀\n\tdone";
    struct k3_tok_ids ids;
    encode_str(s, strlen(s), NULL, &ids);
    char *out;
    size_t len;
    struct k3_err err;
    CHECK(k3_tok_decode(tok, ids.ids, ids.n, &out, &len, &err) == 0);
    CHECK(len == strlen(s) && !strcmp(out, s));
    free(out);
    int32_t bad[] = {1, 163840};
    CHECK(k3_tok_decode(tok, bad, 2, &out, &len, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "out of range");
    /* Streaming: every piece is valid UTF-8, the concatenation is the text. */
    struct k3_detok d;
    k3_detok_init(&d, tok);
    char acc[256] = "", piece[K3_DETOK_MAX_OUT];
    int partial_held = 0;
    for (size_t i = 0; i < ids.n; i++) {
        int w = k3_detok_push(&d, ids.ids[i], piece);
        CHECK(w >= 0 && k3_utf8_valid_prefix((const uint8_t *)piece, (size_t)w) == (size_t)w);
        partial_held += d.n_pend > 0;
        strcat(acc, piece);
    }
    k3_detok_flush(&d, piece);
    strcat(acc, piece);
    CHECK(!strcmp(acc, s));
    CHECK(partial_held > 0); /* the emoji and CJK split across byte tokens in this text */
    k3_tok_ids_free(&ids);
    /* Invalid bytes: as bytes.decode("utf-8", "replace"). Byte tokens by their bytes. */
    uint8_t e4 = 0xE4, b8 = 0xB8, ff = 0xFF;
    int32_t t_e4 = (int32_t)tok->byte_rank[e4], t_b8 = (int32_t)tok->byte_rank[b8],
            t_ff = (int32_t)tok->byte_rank[ff], t_a = (int32_t)tok->byte_rank['a'];
    k3_detok_init(&d, tok);
    CHECK(k3_detok_push(&d, t_e4, piece) == 0);          /* held: could become 中 */
    CHECK(k3_detok_push(&d, t_b8, piece) == 0);          /* still held */
    CHECK(k3_detok_push(&d, t_a, piece) == 4 && !strcmp(piece, "\xEF\xBF\xBD" "a"));
    CHECK(k3_detok_push(&d, t_ff, piece) == 3 && !strcmp(piece, "\xEF\xBF\xBD"));
    CHECK(k3_detok_push(&d, t_e4, piece) == 0);
    CHECK(k3_detok_flush(&d, piece) == 3 && !strcmp(piece, "\xEF\xBF\xBD"));
    CHECK(k3_detok_push(&d, 163840, piece) == -1);
    CHECK(k3_detok_push(&d, 163587, piece) == 8 && !strcmp(piece, "<|open|>"));
}

/* Invalid UTF-8 input encodes as its U+FFFD replacement. */
static void test_invalid_input(void)
{
    const char *bad = "a\xFF\xE4\xB8 b\xED\xA0\x80z\xF0\x9F";
    const char *rep = "a\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz\xEF\xBF\xBD";
    struct k3_tok_ids x, y;
    encode_str(bad, strlen(bad), NULL, &x);
    encode_str(rep, strlen(rep), NULL, &y);
    CHECK(x.n == y.n && !memcmp(x.ids, y.ids, x.n * 4));
    k3_tok_ids_free(&x);
    k3_tok_ids_free(&y);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

/* A small valid vocabulary: the 256 bytes (rank = byte) plus "ab". */
static char *small_vocab(const char *extra)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc(256 * 16 + 256);
    size_t w = 0;
    for (int b = 0; b < 256; b++)
        w += (size_t)sprintf(s + w, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    w += (size_t)sprintf(s + w, "YWI= 256\n%s", extra);
    return s;
}

static void expect_load_error(const char *model_text, const char *config_text, const char *needle)
{
    char dir[] = "/tmp/k3_tok_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char model[64], config[64];
    snprintf(model, sizeof model, "%s/tiktoken.model", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    if (model_text) write_file(model, model_text);
    if (config_text) write_file(config, config_text);
    struct k3_tok *t = NULL;
    struct k3_err err = {""};
    int rc = k3_tok_load(&t, dir, &err);
    CHECK_MSG(rc == -1 && t == NULL, "loading should fail with '%s'", needle);
    CHECK_STR_CONTAINS(err.msg, needle);
    if (!rc) k3_tok_free(t);
    unlink(model);
    unlink(config);
    rmdir(dir);
}

static void test_malformed(void)
{
    const char *cfg = "{\"added_tokens_decoder\": {\"257\": {\"content\": \"[BOS]\", \"special\": true}}}";
    char *ok = small_vocab("");
    /* The small vocabulary itself loads (so the failures below are the defects). */
    char dir[] = "/tmp/k3_tok_okXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char m[64], c[64];
    snprintf(m, sizeof m, "%s/tiktoken.model", dir);
    snprintf(c, sizeof c, "%s/tokenizer_config.json", dir);
    write_file(m, ok);
    write_file(c, cfg);
    struct k3_tok *t;
    struct k3_err err;
    CHECK(k3_tok_load(&t, dir, &err) == 0);
    if (t) {
        CHECK(k3_tok_n_vocab(t) == 257 + 256 && k3_tok_special_id(t, "[BOS]") == 257);
        CHECK(k3_tok_special_id(t, "<|reserved_token_258|>") == 258);
        k3_tok_free(t);
    }
    unlink(m);
    unlink(c);
    rmdir(dir);

    expect_load_error(NULL, cfg, "cannot open");                      /* missing file */
    char *bad = small_vocab("Y*I= 257\n");
    expect_load_error(bad, cfg, "bad base64");
    free(bad);
    bad = small_vocab("YWM= 256\n");
    expect_load_error(bad, cfg, "duplicate rank");
    free(bad);
    bad = small_vocab("YWI= 257\n");
    expect_load_error(bad, cfg, "same bytes");
    free(bad);
    bad = small_vocab("YWM= x\n");
    expect_load_error(bad, cfg, "bad rank");
    free(bad);
    bad = small_vocab("YWM\n");
    expect_load_error(bad, cfg, "expected '<base64 token> <rank>'");
    free(bad);
    expect_load_error("YQ== 0\n", cfg, "at least the 256");
    expect_load_error(ok, NULL, "tokenizer_config.json");             /* missing config */
    expect_load_error(ok, "{\"added_tokens_decoder\": {\"257\": {\"content\": ", "bad JSON");
    expect_load_error(ok, "{\"x\": 1}", "no \"added_tokens_decoder\"");
    expect_load_error(ok, "{\"added_tokens_decoder\": {\"5\": {\"content\": \"x\"}}}",
                      "not a special id");
    expect_load_error(ok, "{\"added_tokens_decoder\": {\"257\": {\"content\": \"bos\"}}}",
                      "must start with");
    free(ok);
}

int main(void)
{
    struct k3_err err;
    if (k3_tok_load_files(&tok, K3_TOK_MODEL, K3_TOK_CONFIG, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_load();
    test_pinned();
    test_modes();
    test_cuts();
    test_simd_blocks();
    test_scan_builds();
    test_cuts_multibyte();
    test_cuts_random();
    test_cuts_one_long_run();
    test_exact_end();
    test_utf8_blocks();
    test_whole_lookup();
    test_bpe_paths();
    test_own_pairs();
    test_bpe_ascii();
    test_bpe_multibyte();
    test_memo_pieces();
    test_memo_seeds();
    test_threads();
    k3_tok_chunk_budget(tok, 0); /* the memos' tests: every call encodes */
    test_memo_growth();
    test_kept_memos();
    test_forget_empties();
    k3_tok_chunk_budget(tok, K3_TOK_CHUNK_BUDGET);
    test_chunks();
    test_decode();
    test_invalid_input();
    test_malformed();
    k3_tok_free(tok);
    return k3_test_summary();
}
