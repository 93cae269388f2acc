/* tok_runs.h - the wrapper's run bound over 64-byte blocks, compiled once per SIMD width:
 * tokenizer.c (16-byte SSE2 / NEON blocks, or the portable loops), and through tok_scans64.h
 * tok_avx2.c, tok_avx512.c and tok_neon.c. The includer defines cut_classify, the one part that
 * differs. */
#ifndef K3_FRONTEND_TOK_RUNS_H
#define K3_FRONTEND_TOK_RUNS_H

#include "frontend/tok_internal.h"
#include "frontend/unicode_simd.h"

/* A 64-byte block for the run cuts (unicode_simd.h, struct k3_cut_blk): whether it holds an
 * ASCII isspace byte (sp) and a byte that surely starts a non-space character (ns), and
 * its continuation bytes (cont, bit i for byte i). */
struct k3_cut64 {
    int sp, ns;
    uint64_t cont;
};

/* The includer's: the classes of s[0..64). */
K3_SIMD_INLINE struct k3_cut64 cut_classify(const uint8_t *s);

/* Can no run of isspace / non-isspace characters in s[0..n) be longer than the wrapper's
 * limit? Yes when no stretch of more than K3_TOK_MAX_RUN_CHARS bytes lacks an ASCII space
 * byte, and none lacks a byte that surely starts a non-space character (struct k3_cut64):
 * a run of more characters spans more bytes than that, all without the other class. Counted
 * in whole 64-byte blocks: a stretch spans at most RUN_BLOCKS blocks lacking its byte, plus
 * under 64 bytes on either side (the tail after the last block can only end stretches).
 * No means "maybe": the exact scan decides. */
#define RUN_BLOCKS ((K3_TOK_MAX_RUN_CHARS - 126) / 64)
/* The same pass finds the slices' starts (code point 400,000 k) when cuts is not NULL
 * (room for n / K3_TOK_MAX_SLICE_CHARS of them); *n_cuts gets their count. */
K3_SIMD_INLINE int runs_bounded(const uint8_t *s, size_t n, size_t *cuts, size_t *n_cuts)
{
    uint32_t sp_run = 0, ns_run = 0, worst = 0;
    size_t chars = 0, next = K3_TOK_MAX_SLICE_CHARS, nc = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        struct k3_cut64 b = cut_classify(s + i);
        sp_run = b.sp ? 0 : sp_run + 1;
        ns_run = b.ns ? 0 : ns_run + 1;
        uint32_t m = sp_run > ns_run ? sp_run : ns_run;
        worst = m > worst ? m : worst;
        if (cuts) {
            uint64_t starts = ~b.cont;
            size_t c = (size_t)k3_popcount64(starts);
            if (chars + c > next) { /* code point `next` starts in this block */
                for (size_t k = next - chars; k; k--) starts &= starts - 1;
                cuts[nc++] = i + (size_t)__builtin_ctzll(starts);
                next += K3_TOK_MAX_SLICE_CHARS;
            }
            chars += c;
        }
    }
    for (; cuts && i < n; i++) {
        if ((s[i] & 0xC0) == 0x80) continue;
        if (chars++ == next) {
            cuts[nc++] = i;
            next += K3_TOK_MAX_SLICE_CHARS;
        }
    }
    *n_cuts = nc;
    return worst <= RUN_BLOCKS;
}

#endif
