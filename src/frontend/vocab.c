/* vocab.c - loading the Kimi vocabulary: tiktoken.model (one "<base64 bytes> <rank>" line
 * per BPE token, the format of tiktoken.load.load_tiktoken_bpe) and the special tokens of
 * tokenizer_config.json.
 *
 * Specials follow tokenization_kimi.py: ids n_ranks .. n_ranks+255; an id listed in
 * added_tokens_decoder gets its `content`, every other id `<|reserved_token_{id}|>`.
 * Malformed files are rejected with the file, the line and what to fix. The JSON reader
 * here reads only what this needs (the frontend may not depend on jansson, DESIGN.md §8). */
#include "frontend/tok_internal.h"
#include "frontend/unicode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/log.h"

static char *read_file(const char *path, size_t *len, struct k3_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return k3_err_set(err, "cannot open %s: %s", path, strerror(errno)), NULL;
    size_t cap = 1 << 20, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return k3_err_set(err, "cannot read %s", path), NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int b64_val(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict standard base64 with padding; returns the decoded length or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4) return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad) return -1;
                v[k] = b64_val((unsigned char)s[i + k]);
                if (v[k] < 0) return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return o;
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t p = 1024;
    while (p < n) p <<= 1;
    return p;
}

/* Inserts key s[0..n) -> value into an open-addressing (hash32 << 32 | value+1) table;
 * returns the value already there if the key is present, else K3_TOK_NONE. */
static uint32_t slot_insert(uint64_t *slots, uint32_t mask, const uint32_t *off, const uint8_t *bytes,
                            uint32_t id_base, const uint8_t *s, size_t n, uint32_t value)
{
    uint64_t h = k3_tok_hash(s, n);
    uint32_t tag = (uint32_t)h, i = (uint32_t)(h >> 32) & mask;
    for (;; i = (i + 1) & mask) {
        uint64_t e = slots[i];
        if (!e) {
            slots[i] = ((uint64_t)tag << 32) | (value + 1);
            return K3_TOK_NONE;
        }
        uint32_t v = (uint32_t)e - 1, id = v + id_base;
        if ((uint32_t)(e >> 32) == tag && off[id + 1] - off[id] == n && !memcmp(bytes + off[id], s, n))
            return v;
    }
}

/* ---- tiktoken.model ---------------------------------------------------------------- */

static int load_ranks(struct k3_tok *t, const char *path, struct k3_err *err)
{
    size_t len;
    char *text = read_file(path, &len, err);
    if (!text) return -1;
    int rc = -1;
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    if (len && text[len - 1] != '\n') n_lines++;
    uint8_t *tmp_bytes = malloc(len + 1);
    uint32_t *tmp_off = malloc(sizeof(uint32_t) * (n_lines + 1));
    int64_t *rank_of_line = malloc(sizeof(int64_t) * (n_lines + 1));
    if (!tmp_bytes || !tmp_off || !rank_of_line) {
        k3_err_set(err, "out of memory reading %s", path);
        goto out;
    }
    size_t n_tok = 0, o = 0, lineno = 0;
    for (char *p = text; p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        char *end = nl ? nl : text + len;
        lineno++;
        if (end > p && end[-1] == '\r') end--;
        if (end == p) { /* tiktoken's loader skips empty lines */
            p = nl ? nl + 1 : text + len;
            continue;
        }
        char *sp = memchr(p, ' ', (size_t)(end - p));
        if (!sp) {
            k3_err_set(err, "%s:%zu: expected '<base64 token> <rank>'; is this a tiktoken .model "
                       "file?", path, lineno);
            goto out;
        }
        long nb = b64_decode(p, (size_t)(sp - p), tmp_bytes + o);
        if (nb < 0) {
            k3_err_set(err, "%s:%zu: bad base64 '%.*s'; the file is damaged, fetch it again",
                       path, lineno, (int)(sp - p > 40 ? 40 : sp - p), p);
            goto out;
        }
        char *rend;
        errno = 0;
        long long r = strtoll(sp + 1, &rend, 10);
        if (errno || rend != end || sp + 1 == end || r < 0 || r >= (long long)n_lines) {
            k3_err_set(err, "%s:%zu: bad rank '%.*s' (ranks must be 0..%zu)", path, lineno,
                       (int)(end - sp - 1 > 20 ? 20 : end - sp - 1), sp + 1,
                       n_lines ? n_lines - 1 : 0);
            goto out;
        }
        tmp_off[n_tok] = (uint32_t)o;
        rank_of_line[n_tok] = r;
        o += (size_t)nb;
        n_tok++;
        p = nl ? nl + 1 : text + len;
    }
    if (n_tok < 256) {
        k3_err_set(err, "%s: %zu tokens; a byte-level BPE vocabulary has at least the 256 "
                   "single bytes", path, n_tok);
        goto out;
    }
    tmp_off[n_tok] = (uint32_t)o;
    /* Ranks must be a permutation of 0..n_tok-1 (the rank is the id). */
    t->n_ranks = (int)n_tok;
    t->n_vocab = t->n_ranks + K3_TOK_N_SPECIAL;
    uint32_t *line_of_rank = malloc(sizeof(uint32_t) * n_tok);
    if (!line_of_rank) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_tok; i++) line_of_rank[i] = UINT32_MAX;
    for (size_t i = 0; i < n_tok; i++) {
        int64_t r = rank_of_line[i];
        if (r >= (int64_t)n_tok) {
            k3_err_set(err, "%s: rank %lld out of range: %zu tokens must have ranks 0..%zu", path,
                       (long long)r, n_tok, n_tok - 1);
            free(line_of_rank);
            goto out;
        }
        if (line_of_rank[r] != UINT32_MAX) {
            k3_err_set(err, "%s: duplicate rank %lld (tokens %u and %zu); the file is damaged",
                       path, (long long)r, line_of_rank[r] + 1, i + 1);
            free(line_of_rank);
            goto out;
        }
        line_of_rank[r] = (uint32_t)i;
    }
    /* Final arena: ranks in order, then room for the specials' names. */
    t->off = malloc(sizeof(uint32_t) * ((size_t)t->n_vocab + 1));
    t->bytes = malloc(o + (size_t)K3_TOK_N_SPECIAL * 64 + 1);
    if (!t->off || !t->bytes) {
        free(line_of_rank);
        k3_err_set(err, "out of memory");
        goto out;
    }
    size_t w = 0;
    for (size_t r = 0; r < n_tok; r++) {
        uint32_t l = line_of_rank[r];
        uint32_t n = tmp_off[l + 1] - tmp_off[l];
        t->off[r] = (uint32_t)w;
        memcpy(t->bytes + w, tmp_bytes + tmp_off[l], n);
        w += n;
        if ((int)n > t->max_token_bytes) t->max_token_bytes = (int)n;
    }
    t->off[n_tok] = (uint32_t)w;
    free(line_of_rank);
    rc = 0;
out:
    free(text);
    free(tmp_bytes);
    free(tmp_off);
    free(rank_of_line);
    return rc;
}

/* The lookup tables are probed at random, megabytes of them: every byte set to fill, and on
 * 2 MiB pages where the kernel has transparent huge pages (madvise mode included), since a
 * probe that misses the TLB costs a page walk on top of the cache miss (the GPU machine's
 * host: long_1m -5%, every input -1..7%). Sizes from 1 MiB; smaller ones start a 128-byte
 * line pair, so that a table's sets of 64 and 128 bytes (the memos) each fill whole lines.
 * fill < 0 leaves them as they come. free() releases them. */
void *k3_tok_table_alloc(size_t bytes, int fill)
{
    size_t huge = (size_t)2 << 20, r = (bytes + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (bytes >= huge / 2 && !posix_memalign(&p, huge, r)) {
#ifdef MADV_HUGEPAGE
        madvise(p, r, MADV_HUGEPAGE);
#endif
    } else if (posix_memalign(&p, 128, bytes ? bytes : 1)) {
        return NULL;
    }
    if (fill >= 0) memset(p, fill, bytes);
    return p;
}

/* Adds the pair (a, b) of token r to the pair table and its filter. */
static void pair_insert(struct k3_tok *t, uint32_t a, uint32_t b, uint32_t r)
{
    uint64_t key = (uint64_t)a << 20 | b, hm = k3_tok_pair_hash(a, b);
    t->pair_filter[k3_tok_pair_word(hm)] |= k3_tok_pair_filter_bits(hm);
    uint32_t i = k3_tok_pair_slot(t, hm);
    while (t->pairs[i] != UINT64_MAX) i = (i + 1) & t->pair_mask;
    t->pairs[i] = key << 20 | r;
}

/* Pairs: for each token, the one pair of tokens that BPE merges into it. tiktoken looks up the
 * rank of any two adjacent parts' bytes together, and every split of a token into two tokens
 * can be such a pair (296,461 for the Kimi vocabulary); but a merge that BPE makes always
 * joins the token's own pair, so the table keeps only those (163,328: half the size):
 *   - In a merge of any text, a part r that the merges made, over bytes [i, j), grew by merges
 *     inside [i, j) alone (parts never split, so none crossed i or j). Each was the lowest
 *     (rank, position) of all pairs, so the lowest of the pairs inside [i, j), which are the
 *     pairs that the merge of r's bytes alone has at the same point. So r's bytes alone merge
 *     the same way, into r, by the same last merge: the token's pair, which does not depend
 *     on the text.
 *   - A pair whose bytes together are a token but which is not its pair is therefore never the
 *     merge's choice; a lookup that answers "no token" for it leaves every choice, and the end
 *     (no pair left), as they were. The same holds for the merges that start from whole
 *     characters or byte pairs (bpe_chars.c, k3_bpe_ascii): they make the byte merge's own
 *     merges.
 * Found shortest tokens first: a token's bytes alone merge (k3_bpe_bytes) with the pairs of
 * the shorter tokens (the only ones it looks up before its last merge, which finds no entry
 * yet) down to the two parts of its own pair; a token whose bytes stop at three parts or more
 * has none (only the whole-piece lookup finds it). Two bytes are their own pair (k3_bpe_bytes
 * would take the two-byte token from byte_pairs). */
static int build_pairs(struct k3_tok *t, struct k3_err *err)
{
    uint32_t n = (uint32_t)t->n_ranks, lmax = (uint32_t)t->max_token_bytes;
    t->pair_mask = pow2_at_least((uint64_t)n * 3 / 2) - 1; /* at most one pair a token */
    t->pairs = k3_tok_table_alloc(sizeof(uint64_t) * ((size_t)t->pair_mask + 1), 0xFF); /* empty */
    /* the ranks by length: by_len[start[L] .. start[L + 1]) */
    uint32_t *start = calloc(lmax + 2, sizeof(uint32_t)), *by_len = malloc(sizeof(uint32_t) * n);
    int32_t *parts = malloc(sizeof(int32_t) * lmax);
    int rc = t->pairs && start && by_len && parts ? 0 : k3_err_set(err, "out of memory");
    for (uint32_t r = 0; r < n && !rc; r++) start[t->off[r + 1] - t->off[r] + 1]++;
    for (uint32_t l = 1; l <= lmax && !rc; l++) start[l + 1] += start[l];
    for (uint32_t r = 0; r < n && !rc; r++) by_len[start[t->off[r + 1] - t->off[r]]++] = r;
    /* start[L] is now the end of length L: its first is start[L - 1] */
    for (uint32_t k = rc ? n : start[1]; k < n; k++) {
        uint32_t r = by_len[k];
        const uint8_t *s = t->bytes + t->off[r];
        size_t len = t->off[r + 1] - t->off[r];
        if (len == 2) pair_insert(t, t->byte_rank[s[0]], t->byte_rank[s[1]], r);
        else if (k3_bpe_bytes(t, s, len, parts) == 2) pair_insert(t, (uint32_t)parts[0], (uint32_t)parts[1], r);
    }
    free(start);
    free(by_len);
    free(parts);
    return rc;
}

static int build_tables(struct k3_tok *t, const char *path, struct k3_err *err)
{
    uint32_t n = (uint32_t)t->n_ranks;
    if (n >= (1u << 20) - K3_TOK_N_SPECIAL)
        return k3_err_set(err, "%s: %u ranks; at most %u fit the pair table", path, n,
                          (1u << 20) - K3_TOK_N_SPECIAL - 1);
    t->piece_mask = pow2_at_least((uint64_t)n * 3) - 1;
    t->pieces = k3_tok_table_alloc(((size_t)t->piece_mask + 1) * sizeof *t->pieces, 0);
    /* the small tables (1.5 MiB, the ones most probed) share one allocation: one huge page */
    t->bigram_rank_mask = (1u << 10) - 1; /* 8 KiB: about 300 pairs for the Kimi vocabulary */
    size_t sizes[] = {(1u << 20) / 8, K3_PAIR_FILTER_WORDS * 8, 65536 * 4, 128 * 128 * 4,
                      65536 * 8, 65536 * 4, K3_BIGRAM_WORDS * 8, ((size_t)t->bigram_rank_mask + 1) * 8,
                      65536 / 8};
    size_t total = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) total += sizes[k];
    uint8_t *arena = t->tables = k3_tok_table_alloc(total, 0);
    if (!t->pieces || !arena) return k3_err_set(err, "out of memory");
    t->piece_filter = (uint64_t *)arena, arena += sizes[0];
    t->pair_filter = (uint64_t *)arena, arena += sizes[1];
    t->byte_pairs = (uint32_t *)arena, arena += sizes[2];
    t->ascii_span = (uint32_t *)arena, arena += sizes[3];
    t->char_info = (uint64_t *)arena, arena += sizes[4];
    t->split_rank = (uint32_t *)arena, arena += sizes[5];
    t->bigram_filter = (uint64_t *)arena, arena += sizes[6];
    t->bigram_rank = (uint64_t *)arena, arena += sizes[7];
    t->bigram_chars = (uint64_t *)arena;
    for (int b = 0; b < 256; b++) t->byte_rank[b] = K3_TOK_NONE;
    for (uint32_t r = 0; r < n; r++) {
        const uint8_t *s = t->bytes + t->off[r];
        size_t len = t->off[r + 1] - t->off[r];
        if (len == 0) return k3_err_set(err, "%s: rank %u is an empty token", path, r);
        uint32_t dup = k3_tok_piece_rank(t, s, len);
        if (dup != K3_TOK_NONE)
            return k3_err_set(err, "%s: ranks %u and %u have the same bytes; the file is damaged",
                              path, dup, r);
        uint64_t w0 = k3_tok_word(s, len, len), h = k3_piece_hash(w0, s, len, len);
        uint32_t i = (uint32_t)(h >> 32) & t->piece_mask;
        while (t->pieces[i].rank1) i = (i + 1) & t->piece_mask;
        t->pieces[i] = (struct k3_tok_slot){{w0, len > 8 ? k3_tok_word(s + 8, len - 8, len - 8) : 0,
                                              len > 16 ? k3_tok_word(s + 16, len - 16, len - 16) : 0},
                                             r + 1, (uint16_t)len, (uint16_t)h};
        uint32_t bit = k3_tok_piece_filter_bit(h);
        t->piece_filter[bit >> 6] |= 1ull << (bit & 63);
        if (len == 1) t->byte_rank[s[0]] = r;
    }
    for (int b = 0; b < 256; b++)
        if (t->byte_rank[b] == K3_TOK_NONE)
            return k3_err_set(err, "%s: byte 0x%02x has no token; a byte-level BPE vocabulary "
                              "needs all 256 single bytes", path, b);
    for (int x = 0; x < 256; x++)
        for (int y = 0; y < 256; y++) {
            uint8_t two[2] = {(uint8_t)x, (uint8_t)y};
            t->byte_pairs[x << 8 | y] = k3_tok_piece_rank(t, two, 2);
        }
    if (build_pairs(t, err)) return -1;
    /* ASCII pairs first (bpe.c): the lowest rank of a token holding each two ASCII bytes. */
    for (uint32_t i = 0; i < 128 * 128; i++) t->ascii_span[i] = K3_TOK_NONE;
    for (uint32_t r = 0; r < n; r++) {
        const uint8_t *s = t->bytes + t->off[r];
        size_t len = t->off[r + 1] - t->off[r];
        for (size_t j = 1; j < len; j++)
            if ((s[j - 1] | s[j]) < 0x80 && r < t->ascii_span[s[j - 1] << 7 | s[j]])
                t->ascii_span[s[j - 1] << 7 | s[j]] = r;
    }
    /* Characters first (bpe.c): whole-character tokens of the BMP, and the byte pairs at
     * which a token spans a character boundary without being whole characters. */
    for (uint32_t i = 0; i < 65536; i++) t->split_rank[i] = K3_TOK_NONE;
    for (uint32_t cp = 0; cp < 65536; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        uint8_t u[3];
        size_t k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
        if (k == 1) u[0] = (uint8_t)cp;
        else if (k == 2) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 63));
        else u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 63)),
             u[2] = (uint8_t)(0x80 | (cp & 63));
        t->char_info[cp] = k3_bpe_char_info(t, u, k);
    }
    for (uint32_t r = 0; r < n; r++) {
        const uint8_t *s = t->bytes + t->off[r];
        size_t len = t->off[r + 1] - t->off[r];
        int spans = 0;
        for (size_t j = 1; j < len; j++) spans |= (s[j] & 0xC0) != 0x80;
        if (!spans || ((s[0] & 0xC0) != 0x80 && k3_utf8_valid_prefix(s, len) == len)) continue;
        for (size_t j = 1; j < len; j++)
            if ((s[j] & 0xC0) != 0x80) {
                uint32_t pair = (uint32_t)s[j - 1] << 8 | s[j];
                if (r < t->split_rank[pair]) t->split_rank[pair] = r;
            }
    }
    /* The pairs of adjacent whole characters in the tokens that are whole characters (the
     * tokens that split_rank skipped). */
    memset(t->bigram_rank, 0xFF, ((size_t)t->bigram_rank_mask + 1) * sizeof(uint64_t));
    size_t n_block = 0;
    for (uint32_t r = 0; r < n; r++) {
        const uint8_t *s = t->bytes + t->off[r];
        size_t len = t->off[r + 1] - t->off[r];
        if (len < 2 || (s[0] & 0xC0) == 0x80 || k3_utf8_valid_prefix(s, len) != len) continue;
        int l, pl;
        uint32_t prev = k3_utf8_decode(s, &l);
        pl = l;
        for (size_t j = (size_t)l; j < len; j += (size_t)l) {
            uint32_t cp = k3_utf8_decode(s + j, &l);
            uint64_t h = k3_tok_bigram_hash(prev, cp);
            t->bigram_filter[k3_tok_bigram_word(h)] |= k3_tok_bigram_bits(h);
            /* bigram_rank keeps the pair only when its rank can stop one of the two characters
             * from starting whole: rank <= the larger C(X) (about 300 pairs) */
            uint32_t cmax = 0;
            for (int side = 0; side < 2; side++) {
                size_t at = side ? j : j - (size_t)pl;
                uint32_t x = side ? cp : prev;
                uint64_t inf = x < 65536 ? t->char_info[x]
                                         : k3_bpe_char_info(t, s + at, (size_t)(side ? l : pl));
                if (inf >> 32 && (uint32_t)inf > cmax) cmax = (uint32_t)inf;
            }
            if (r <= cmax) {
                uint64_t key = (uint64_t)prev << 21 | cp;
                uint32_t i =
                    (uint32_t)k3_tok_mix(key * 0x9E3779B97F4A7C15ull) & t->bigram_rank_mask;
                while (t->bigram_rank[i] != UINT64_MAX && t->bigram_rank[i] >> 20 != key)
                    i = (i + 1) & t->bigram_rank_mask;
                if (t->bigram_rank[i] == UINT64_MAX) { /* ranks rise: the first is the lowest */
                    if (++n_block * 2 > (size_t)t->bigram_rank_mask + 1)
                        return k3_err_set(err, "%s: too many low-rank character pairs", path);
                    t->bigram_rank[i] = key << 20 | r;
                    for (int side = 0; side < 2; side++) {
                        uint32_t x = side ? cp : prev;
                        if (x < 65536) t->bigram_chars[x >> 6] |= 1ull << (x & 63);
                    }
                }
            }
            prev = cp;
            pl = l;
        }
    }
    return 0;
}

/* ---- tokenizer_config.json --------------------------------------------------------- */

struct json {
    const char *s, *end, *base;
    const char *path;
    struct k3_err *err;
};

static void json_ws(struct json *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) j->s++;
}

static int json_fail(struct json *j, const char *what)
{
    return k3_err_set(j->err, "%s: bad JSON at byte %ld: %s", j->path,
                      (long)(j->s - j->base), what);
}

static int hex4(const char *s, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Parses a string into out (UTF-8, up to cap-1 bytes, NUL-terminated); out may be NULL. */
static int json_string(struct json *j, char *out, size_t cap, size_t *out_len)
{
    json_ws(j);
    if (j->s >= j->end || *j->s != '"') return json_fail(j, "expected a string");
    j->s++;
    size_t n = 0;
    for (;;) {
        if (j->s >= j->end) return json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->s++;
        uint32_t cp = c;
        if (c == '"') break;
        if (c == '\\') {
            if (j->s >= j->end) return json_fail(j, "bad escape");
            c = (unsigned char)*j->s++;
            switch (c) {
            case 'n': cp = '\n'; break;
            case 't': cp = '\t'; break;
            case 'r': cp = '\r'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case '/': case '\\': case '"': cp = c; break;
            case 'u':
                if (j->end - j->s < 4 || hex4(j->s, &cp)) return json_fail(j, "bad \\u escape");
                j->s += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->s >= 6 && j->s[0] == '\\' &&
                    j->s[1] == 'u') {
                    uint32_t lo;
                    if (!hex4(j->s + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        j->s += 6;
                    }
                }
                if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
                break;
            default: return json_fail(j, "bad escape");
            }
            uint8_t u[4];
            int k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (k == 1) u[0] = (uint8_t)cp;
            else if (k == 2) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 63));
            else if (k == 3)
                u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 63)),
                u[2] = (uint8_t)(0x80 | (cp & 63));
            else
                u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
                u[2] = (uint8_t)(0x80 | (cp >> 6 & 63)), u[3] = (uint8_t)(0x80 | (cp & 63));
            for (int i = 0; i < k; i++) {
                if (out && n + 1 < cap) out[n] = (char)u[i];
                n++;
            }
            continue;
        }
        if (out && n + 1 < cap) out[n] = (char)c;
        n++;
    }
    if (out) out[n + 1 > cap ? cap - 1 : n] = 0; /* truncated; callers check *out_len */
    if (out_len) *out_len = n;
    return 0;
}

static int json_skip(struct json *j, int depth)
{
    json_ws(j);
    if (j->s >= j->end) return json_fail(j, "unexpected end");
    if (depth > 64) return json_fail(j, "nested too deeply");
    char c = *j->s;
    if (c == '"') return json_string(j, NULL, 0, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->s++;
        json_ws(j);
        if (j->s < j->end && *j->s == close) {
            j->s++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                if (json_string(j, NULL, 0, NULL)) return -1;
                json_ws(j);
                if (j->s >= j->end || *j->s != ':') return json_fail(j, "expected ':'");
                j->s++;
            }
            if (json_skip(j, depth + 1)) return -1;
            json_ws(j);
            if (j->s < j->end && *j->s == ',') {
                j->s++;
                continue;
            }
            if (j->s < j->end && *j->s == close) {
                j->s++;
                return 0;
            }
            return json_fail(j, "expected ',' or a closing bracket");
        }
    }
    const char *start = j->s;
    while (j->s < j->end && (strchr("-+.eE", *j->s) || (*j->s >= '0' && *j->s <= '9') ||
                             (*j->s >= 'a' && *j->s <= 'z')))
        j->s++;
    if (j->s == start) return json_fail(j, "unexpected character");
    return 0;
}

static int json_expect(struct json *j, char c)
{
    json_ws(j);
    if (j->s >= j->end || *j->s != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return json_fail(j, what);
    }
    j->s++;
    return 0;
}

/* One entry of added_tokens_decoder: {"content": "...", "special": true, ...}. */
static int parse_added_token(struct json *j, char *content, size_t cap, int *special, int *has_content)
{
    if (json_expect(j, '{')) return -1;
    json_ws(j);
    if (j->s < j->end && *j->s == '}') {
        j->s++;
        return 0;
    }
    for (;;) {
        char key[32];
        if (json_string(j, key, sizeof key, NULL)) return -1;
        if (json_expect(j, ':')) return -1;
        json_ws(j);
        if (!strcmp(key, "content")) {
            size_t n;
            if (json_string(j, content, cap, &n)) return -1;
            if (n + 1 > cap) return json_fail(j, "special token content longer than 63 bytes");
            *has_content = 1;
        } else if (!strcmp(key, "special")) {
            if (j->end - j->s >= 4 && !strncmp(j->s, "true", 4)) *special = 1, j->s += 4;
            else if (j->end - j->s >= 5 && !strncmp(j->s, "false", 5)) *special = 0, j->s += 5;
            else return json_fail(j, "\"special\" must be true or false");
        } else if (json_skip(j, 1)) {
            return -1;
        }
        json_ws(j);
        if (j->s < j->end && *j->s == ',') {
            j->s++;
            continue;
        }
        return json_expect(j, '}');
    }
}

static int set_special_name(struct k3_tok *t, uint32_t *w, int id, const char *name, size_t len)
{
    t->off[id] = *w;
    memcpy(t->bytes + *w, name, len);
    *w += (uint32_t)len;
    t->off[id + 1] = *w;
    return 0;
}

static int load_specials(struct k3_tok *t, const char *path, struct k3_err *err)
{
    char names[K3_TOK_N_SPECIAL][64];
    int named[K3_TOK_N_SPECIAL] = {0};
    memset(t->special_flag, 0, sizeof t->special_flag);
    size_t len = 0;
    char *text = read_file(path, &len, err);
    if (!text) return -1;
    struct json j = {text, text + len, text, path, err};
    int rc = -1, found = 0;
    if (json_expect(&j, '{')) goto out;
    for (;;) {
        char key[64];
        if (json_string(&j, key, sizeof key, NULL)) goto out;
        if (json_expect(&j, ':')) goto out;
        if (strcmp(key, "added_tokens_decoder") != 0) {
            if (json_skip(&j, 1)) goto out;
        } else {
            found = 1;
            if (json_expect(&j, '{')) goto out;
            json_ws(&j);
            if (j.s < j.end && *j.s == '}') j.s++;
            else
                for (;;) {
                    char idtext[24], content[64] = "";
                    int special = 0, has_content = 0;
                    if (json_string(&j, idtext, sizeof idtext, NULL)) goto out;
                    if (json_expect(&j, ':')) goto out;
                    if (parse_added_token(&j, content, sizeof content, &special, &has_content))
                        goto out;
                    char *e;
                    long id = strtol(idtext, &e, 10);
                    if (*e || e == idtext || id < t->n_ranks || id >= t->n_vocab) {
                        k3_err_set(err, "%s: added token id '%s' is not a special id (%d..%d); is "
                                   "this tokenizer_config.json for this tiktoken.model?", path,
                                   idtext, t->n_ranks, t->n_vocab - 1);
                        goto out;
                    }
                    if (!has_content || !content[0]) {
                        k3_err_set(err, "%s: added token %ld has no \"content\"", path, id);
                        goto out;
                    }
                    int k = (int)(id - t->n_ranks);
                    memcpy(names[k], content, sizeof names[k]); /* both 64 bytes, content NUL-terminated */
                    named[k] = 1;
                    t->special_flag[k] = (uint8_t)special;
                    json_ws(&j);
                    if (j.s < j.end && *j.s == ',') {
                        j.s++;
                        continue;
                    }
                    if (json_expect(&j, '}')) goto out;
                    break;
                }
        }
        json_ws(&j);
        if (j.s < j.end && *j.s == ',') {
            j.s++;
            continue;
        }
        if (json_expect(&j, '}')) goto out;
        break;
    }
    if (!found) {
        k3_err_set(err, "%s: no \"added_tokens_decoder\"; the special tokens' names come from "
                   "there", path);
        goto out;
    }
    uint32_t w = t->off[t->n_ranks];
    t->spec_mask = 1023;
    t->spec_slots = calloc(1024, sizeof(uint64_t));
    if (!t->spec_slots) {
        k3_err_set(err, "out of memory");
        goto out;
    }
    for (int k = 0; k < K3_TOK_N_SPECIAL; k++) {
        int id = t->n_ranks + k;
        char buf[64];
        if (named[k]) memcpy(buf, names[k], sizeof buf); /* both 64 bytes, NUL-terminated */
        else snprintf(buf, sizeof buf, "<|reserved_token_%d|>", id);
        size_t n = strlen(buf);
        /* Encode finds a special by its first byte and its first closing byte. */
        char close = buf[0] == '<' ? '>' : buf[0] == '[' ? ']' : 0;
        if (!close || strchr(buf, close) != buf + n - 1) {
            k3_err_set(err, "%s: special token '%s' (id %d) must start with '<' or '[' and end at "
                       "its first '>' or ']'; the encoder relies on that", path, buf, id);
            goto out;
        }
        set_special_name(t, &w, id, buf, n);
        if ((int)n > t->max_special_bytes) t->max_special_bytes = (int)n;
        uint32_t dup = slot_insert(t->spec_slots, t->spec_mask, t->off, t->bytes, (uint32_t)t->n_ranks,
                                   (const uint8_t *)buf, n, (uint32_t)k);
        if (dup != K3_TOK_NONE) {
            k3_err_set(err, "%s: special token '%s' is listed twice (ids %u and %d)", path, buf,
                       dup + t->n_ranks, id);
            goto out;
        }
    }
    rc = 0;
out:
    free(text);
    return rc;
}

enum k3_tok_simd k3_tok_simd(void)
{
#if K3_TOK_HAVE_X86_SIMD
    /* libgcc's CPU model: set from CPUID, each only when the OS saves its registers' state */
    __builtin_cpu_init();
    /* both builds are compiled for popcnt, bmi and bmi2 too (tok_avx2.c, tok_avx512.c) */
    int bits = __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi") &&
               __builtin_cpu_supports("bmi2");
    enum k3_tok_simd best = K3_TOK_SIMD_BASE;
    if (bits && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        best = K3_TOK_SIMD_AVX512;
    else if (bits && __builtin_cpu_supports("avx2"))
        best = K3_TOK_SIMD_AVX2;
    const char *e = getenv("K3_TOK_SIMD");
    if (e && !strcmp(e, "base")) return K3_TOK_SIMD_BASE;
    if (e && !strcmp(e, "avx2") && best > K3_TOK_SIMD_AVX2) return K3_TOK_SIMD_AVX2;
    return best;
#elif K3_TOK_HAVE_NEON64
    const char *e = getenv("K3_TOK_SIMD"); /* every aarch64 CPU has NEON */
    return e && !strcmp(e, "base") ? K3_TOK_SIMD_BASE : K3_TOK_SIMD_NEON;
#else
    return K3_TOK_SIMD_BASE;
#endif
}

int k3_tok_load_files(struct k3_tok **out, const char *model_path, const char *config_path,
                      struct k3_err *err)
{
    *out = NULL;
    struct k3_tok *t = calloc(1, sizeof *t);
    if (!t) return k3_err_set(err, "out of memory");
    if (load_ranks(t, model_path, err) || build_tables(t, model_path, err) ||
        load_specials(t, config_path, err)) {
        k3_tok_free(t);
        return -1;
    }
    t->simd = k3_tok_simd();
    if (k3_memo_seeds_build(t) || !(t->memos = k3_tok_memos_new()) ||
        !(t->chunks = k3_tok_chunks_new(K3_TOK_CHUNK_BUDGET))) {
        k3_tok_free(t);
        return k3_err_set(err, "out of memory");
    }
    *out = t;
    return 0;
}

int k3_tok_load(struct k3_tok **out, const char *dir, struct k3_err *err)
{
    char model[4096], config[4096];
    snprintf(model, sizeof model, "%s/tiktoken.model", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    if (k3_tok_load_files(out, model, config, err))
        return k3_err_prefix(err, "loading the tokenizer from %s (it needs tiktoken.model and "
                             "tokenizer_config.json)", dir);
    return 0;
}

void k3_tok_free(struct k3_tok *t)
{
    if (!t) return;
    free(t->off);
    free(t->bytes);
    free(t->pieces);
    free(t->tables);
    free(t->pairs);
    free(t->spec_slots);
    free(t->seeds8);
    free(t->seeds16);
    k3_tok_memos_free(t->memos);
    k3_tok_chunks_free(t->chunks);
    free(t);
}

int k3_tok_n_ranks(const struct k3_tok *t) { return t->n_ranks; }
int k3_tok_n_vocab(const struct k3_tok *t) { return t->n_vocab; }

const uint8_t *k3_tok_bytes(const struct k3_tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

int32_t k3_tok_special_id(const struct k3_tok *t, const char *name)
{
    size_t n = strlen(name);
    uint64_t h = k3_tok_hash((const uint8_t *)name, n);
    uint32_t tag = (uint32_t)h, i = (uint32_t)(h >> 32) & t->spec_mask;
    for (;; i = (i + 1) & t->spec_mask) {
        uint64_t e = t->spec_slots[i];
        if (!e) return -1;
        uint32_t id = (uint32_t)e - 1 + (uint32_t)t->n_ranks;
        if ((uint32_t)(e >> 32) == tag && t->off[id + 1] - t->off[id] == n &&
            !memcmp(t->bytes + t->off[id], name, n))
            return (int32_t)id;
    }
}

int k3_tok_is_special(const struct k3_tok *t, int32_t id)
{
    return id >= t->n_ranks && id < t->n_vocab && t->special_flag[id - t->n_ranks];
}
