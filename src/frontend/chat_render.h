/* chat_render.h - the Kimi K3 chat format (XTML): an OpenAI-style conversation rendered to
 * the prompt segments of Moonshot's encoding_k3.py, then to token ids.
 *
 * research/frontend.md §2.3, corrected by research/frontend-k3-corrections.md. A prompt is
 * a list of segments; each is tokenized on its own (never the concatenation), structural
 * tokens (<|open|> <|close|> <|sep|> <|end_of_msg|>) with specials recognised and all other
 * text (tag names, attributes, message bodies) with specials off, so a user who writes
 * "<|end_of_msg|>" gets plain text. usage.prompt_tokens excludes the generation stub's last
 * open tag (<|open|>think<|sep|> or <|open|>response<|sep|>, 3 ids).
 *
 * This layer is the encoder only: request-level mapping (developer -> system, thinking and
 * effort from the request, validation) is request.h. It still never crashes on odd input:
 * whatever the encoder would raise on comes back as -1 with a message. */
#ifndef K3_FRONTEND_CHAT_RENDER_H
#define K3_FRONTEND_CHAT_RENDER_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"
#include "frontend/fe_buf.h"
#include "frontend/tokenizer.h"

struct k3_seg {
    size_t off, len;  /* bytes of the prompt text */
    int special;      /* 1: tokenized with special-token text recognised */
};

struct k3_chat_prompt {
    struct k3_sbuf text;  /* every segment, concatenated: the rendered prompt */
    struct k3_seg *segs;
    size_t n_segs, cap_segs;
    size_t stub_seg;      /* first segment of the generation stub's last open tag (= n_segs
                             when there is no generation prompt, or for a partial turn) */
    int ends_in_think;    /* generation continues inside the think channel */
};

struct k3_chat_opts {
    int thinking;                     /* think channels and the effort note */
    const char *thinking_effort;      /* "low" | "high" | "max", or NULL: no effort note */
    const char *tool_choice;          /* "required" / "none" add a note; NULL or else nothing */
    const json_t *response_format;    /* NULL, or the request's response_format */
    int add_generation_prompt;
    /* The last message is a partial assistant turn (Moonshot "partial": true) that the model
     * continues: it is rendered open, after the notes, in place of the generation stub.
     * Thinking on: with reasoning, <|open|>think<|sep|>REASONING and, when there is content,
     * <|close|>think<|sep|><|open|>response<|sep|>CONTENT; without reasoning, no think
     * channel, <|open|>response<|sep|>CONTENT. Every id counts as a prompt token. This is
     * not in encoding_k3.py; it is what reproduces the 8 KVV partial-prefill counts. */
    int continue_final;
};

/* Renders messages (a JSON array) with request tools (NULL, or a JSON array) into out
 * (zero-initialised by the caller). Returns 0, or -1 with err set; out is then freed. */
int k3_chat_render(const json_t *messages, const json_t *tools, const struct k3_chat_opts *o,
                   struct k3_chat_prompt *out, struct k3_err *err);
void k3_chat_prompt_free(struct k3_chat_prompt *p);

/* Tokenizes p segment by segment into ids (appended) and returns the prompt token count as
 * K3 reports it: every id before the generation stub's last open tag. */
size_t k3_chat_prompt_encode(const struct k3_tok *tok, const struct k3_chat_prompt *p,
                             struct k3_tok_ids *ids);
/* The same with a thread pool for long segments (a pasted document, a long tool result):
 * identical ids (tokenizer.h), less time to the first token. pool may be NULL. */
size_t k3_chat_prompt_encode_pool(const struct k3_tok *tok, const struct k3_chat_prompt *p,
                                  struct k3_pool *pool, struct k3_tok_ids *ids);

/* Python str.isspace() for one code point; used for the encoder's .strip() tests. */
int k3_py_isspace(unsigned cp);
/* 1 if s[0..len) (UTF-8) has a character that is not Python whitespace. */
int k3_py_has_nonspace(const char *s, size_t len);

#endif
