/* tokenizer.h - the Kimi tokenizer (K2.5 / K3 / Kimi Linear): tiktoken's byte-level BPE over
 * the Kimi vocabulary and pre-tokenization pattern, with tokenization_kimi.py's two cuts.
 *
 * The ids are exactly what Moonshot's tokenizer produces (research/frontend.md §1,
 * research/tokenizer.md §1, §3): tests/tokenizer and validation/tokenizer compare them with
 * tiktoken from PyPI on several MB of text and with a differential fuzz test.
 *
 *   struct k3_tok *tok;
 *   if (k3_tok_load(&tok, "ckpt/", &err)) { ...err.msg says what is wrong... }
 *   struct k3_tok_ids ids = {0};
 *   k3_tok_encode(tok, text, len, K3_TOK_PLAIN, NULL, &ids);   (user and tool text)
 *   k3_tok_encode(tok, text, len, K3_TOK_SPECIAL, pool, &ids); (structural segments)
 *   k3_tok_ids_free(&ids); k3_tok_free(tok);
 *
 * Input text is UTF-8. Invalid UTF-8 is encoded as if each maximal invalid subpart were
 * U+FFFD, which is what Python's bytes.decode("utf-8", errors="replace") gives the
 * reference. A loaded tokenizer is immutable: any number of threads may encode with it. */
#ifndef K3_FRONTEND_TOKENIZER_H
#define K3_FRONTEND_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

struct k3_pool;
struct k3_tok;

#define K3_TOK_N_SPECIAL 256           /* reserved ids after the BPE ranks */
#define K3_TOK_MAX_SLICE_CHARS 400000  /* tokenization_kimi.py TIKTOKEN_MAX_ENCODE_CHARS */
#define K3_TOK_MAX_RUN_CHARS 25000     /* tokenization_kimi.py MAX_NO_WHITESPACES_CHARS */

enum k3_tok_mode {
    K3_TOK_PLAIN = 0,    /* special-token text is plain text: a user cannot forge <|open|> */
    K3_TOK_SPECIAL = 1,  /* special-token text becomes the control token (allowed_special="all") */
};

/* A growable id vector; zero-initialize it, free with k3_tok_ids_free. */
struct k3_tok_ids {
    int32_t *ids;
    size_t n, cap;
};

/* Loads DIR/tiktoken.model and DIR/tokenizer_config.json. Returns 0, or -1 with err set. */
int k3_tok_load(struct k3_tok **out, const char *dir, struct k3_err *err);
/* Same with explicit paths. */
int k3_tok_load_files(struct k3_tok **out, const char *model_path, const char *config_path,
                      struct k3_err *err);
void k3_tok_free(struct k3_tok *tok);

int k3_tok_n_ranks(const struct k3_tok *tok);  /* BPE ranks (163,584) */
int k3_tok_n_vocab(const struct k3_tok *tok);  /* ranks + 256 specials (163,840) */
/* Bytes of one id (a special's bytes are its name); NULL for an id out of range. */
const uint8_t *k3_tok_bytes(const struct k3_tok *tok, int32_t id, size_t *len);
/* Id of a special token by name, or -1. */
int32_t k3_tok_special_id(const struct k3_tok *tok, const char *name);
/* The config's `special` flag of a special id (0 for ranks and unnamed reserved ids). */
int k3_tok_is_special(const struct k3_tok *tok, int32_t id);

/* Appends the ids of text[0..len) to out. pool: NULL runs on the calling thread; a pool
 * splits long inputs at boundaries where the pre-tokenizer provably cuts, with identical
 * ids. Aborts only when memory runs out. */
void k3_tok_encode(const struct k3_tok *tok, const char *text, size_t len, enum k3_tok_mode mode,
                   struct k3_pool *pool, struct k3_tok_ids *out);
void k3_tok_ids_free(struct k3_tok_ids *ids);
/* Empties the memos of pieces the tokenizer keeps from call to call (tokenizer.c) of all the
 * texts seen, back to what a memo is made with (the vocabulary's lowest-rank tokens, which
 * hold nothing of any text: bpe.c, memo_seed), and returns the tables that grew to their
 * first size, so that the next call runs as the first did: for measuring calls on new text.
 * The ids never depend on them. Waits for calls that hold one. Only the memos calls took since
 * the last forget are emptied (the others are as made): emptying all of them, megabytes for a
 * process that saw texts of several sizes, pushed the vocabulary's tables out of the caches
 * before each measured call. */
void k3_tok_forget(const struct k3_tok *tok);
/* Long stretches of text the tokenizer has encoded twice are kept with their ids, so that
 * they are found, not encoded, when they come again (a conversation re-sent with its history,
 * a shared document): the bytes they may hold, ids and text, least recently used out first
 * (K3_TOK_CHUNK_BUDGET, 256 MiB, at load; 0 keeps none). k3_tok_forget empties them too. */
void k3_tok_chunk_budget(struct k3_tok *tok, size_t bytes);
/* What the kept chunks did since load: chunks found (not encoded), chunks encoded (looked up
 * and not found), and the bytes kept now. The two counts only grow (k3_tok_forget empties the
 * chunks, not the counts: /metrics reports them as counters). Only chunks of 256 bytes or more
 * are looked up. */
struct k3_tok_chunk_stats {
    uint64_t found, encoded, bytes;
};
void k3_tok_chunk_stats(const struct k3_tok *tok, struct k3_tok_chunk_stats *out);

/* Decodes ids to their raw bytes (not necessarily valid UTF-8: use k3_detok for text);
 * *out is malloc'ed and NUL-terminated. Returns 0, or -1 for an id out of range. */
int k3_tok_decode(const struct k3_tok *tok, const int32_t *ids, size_t n, char **out,
                  size_t *out_len, struct k3_err *err);

/* Streaming detokenizer: text comes out as ids arrive, never a partial UTF-8 sequence.
 * Bytes that can never become valid UTF-8 come out as U+FFFD, one per maximal invalid
 * subpart, so the concatenated output equals bytes.decode("utf-8", errors="replace") of
 * all ids' bytes at once. */
struct k3_detok {
    const struct k3_tok *tok;
    uint8_t pend[4];  /* an incomplete UTF-8 sequence held back */
    int n_pend;
};

void k3_detok_init(struct k3_detok *d, const struct k3_tok *tok);
/* Appends the text that id completes to out (NUL-terminated; needs the id's byte length
 * + 8 bytes free, K3_DETOK_MAX_OUT is always enough); returns the bytes written, or -1
 * for an id out of range. */
#define K3_DETOK_MAX_OUT 1024
int k3_detok_push(struct k3_detok *d, int32_t id, char *out);
/* End of stream: a held-back incomplete sequence comes out as U+FFFD. Returns bytes. */
int k3_detok_flush(struct k3_detok *d, char *out);

#endif
