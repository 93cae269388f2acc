/* dump_input.c - see dump_input.h. The file is read whole (inputs are token
 * ids or chat text: megabytes, not the gigabytes the dump produces). */
#include "io/dump_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dump_journal.h"

static char *slurp(const char *path, size_t *len, struct k3_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        k3_err_set(err, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *b2 = realloc(buf, cap *= 2);
            if (!b2) free(buf);
            buf = b2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        k3_err_set(err, "cannot read %s", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int parse_line(json_t *o, int64_t vocab, struct k3_dump_sample *s, struct k3_err *err)
{
    if (!json_is_object(o)) return k3_err_set(err, "a line must be a JSON object");
    json_t *id = json_object_get(o, "id");
    if (json_is_string(id)) snprintf(s->id, sizeof s->id, "%s", json_string_value(id));
    else if (json_is_integer(id)) snprintf(s->id, sizeof s->id, "%lld", (long long)json_integer_value(id));
    else if (id) return k3_err_set(err, "\"id\" must be a string or an integer");
    json_t *stop = json_object_get(o, "stop_token_ids");
    if (stop && (!json_is_array(stop) || json_array_size(stop) > K3_DUMP_MAX_STOP_IDS))
        return k3_err_set(err, "\"stop_token_ids\" must be an array of at most %d token ids", K3_DUMP_MAX_STOP_IDS);
    for (size_t i = 0; stop && i < json_array_size(stop); i++) {
        json_t *v = json_array_get(stop, i);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x > INT32_MAX || (vocab > 0 && x >= vocab))
            return k3_err_set(err, "stop_token_ids[%zu] must be a token id in [0, %lld)", i,
                              (long long)(vocab > 0 ? vocab : INT32_MAX));
        s->stop_ids[s->n_stop_ids++] = (int32_t)x;
    }
    json_t *ids = json_object_get(o, "prompt_ids"), *msgs = json_object_get(o, "messages");
    if (!!ids == !!msgs) return k3_err_set(err, "a line needs exactly one of \"prompt_ids\" and \"messages\"");
    if (msgs) {
        if (!json_is_array(msgs) || json_array_size(msgs) == 0)
            return k3_err_set(err, "\"messages\" must be a non-empty array");
        s->request = json_deep_copy(o);
        json_object_del(s->request, "id");
        json_object_del(s->request, "stop_token_ids");
        return 0;
    }
    if (!json_is_array(ids) || json_array_size(ids) == 0)
        return k3_err_set(err, "\"prompt_ids\" must be a non-empty array of token ids");
    s->n = (int64_t)json_array_size(ids);
    s->ids = malloc(sizeof(int32_t) * (size_t)s->n);
    s->mask = malloc((size_t)s->n);
    if (!s->ids || !s->mask) return k3_err_set(err, "out of memory");
    for (int64_t i = 0; i < s->n; i++) {
        json_t *v = json_array_get(ids, (size_t)i);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x > INT32_MAX || (vocab > 0 && x >= vocab))
            return k3_err_set(err, "prompt_ids[%lld] must be a token id in [0, %lld)", (long long)i,
                              (long long)(vocab > 0 ? vocab : INT32_MAX));
        s->ids[i] = (int32_t)x;
        s->mask[i] = 1;
    }
    json_t *m = json_object_get(o, "loss_mask");
    if (m) {
        s->has_mask = 1;
        if (!json_is_array(m) || (int64_t)json_array_size(m) != s->n)
            return k3_err_set(err, "\"loss_mask\" must be an array as long as prompt_ids (%lld)", (long long)s->n);
        for (int64_t i = 0; i < s->n; i++) {
            json_t *v = json_array_get(m, (size_t)i);
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : json_is_boolean(v) ? json_is_true(v) : -1;
            if (x != 0 && x != 1) return k3_err_set(err, "loss_mask[%lld] must be 0 or 1", (long long)i);
            s->mask[i] = (uint8_t)x;
        }
    }
    return 0;
}

int k3_dump_input_read(const char *path, int64_t vocab_size, struct k3_dump_input *in, struct k3_err *err)
{
    memset(in, 0, sizeof *in);
    size_t len;
    char *buf = slurp(path, &len, err);
    if (!buf) return -1;
    in->hash = k3_fnv1a64(buf, len, K3_FNV1A64_INIT);
    int64_t cap = 0, line = 0;
    int rc = 0;
    for (char *p = buf; *p && !rc;) {
        char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        line++;
        size_t k = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r')) k++;
        if (k < n) {   /* blank lines are skipped */
            if (in->n == cap) {
                cap = cap ? 2 * cap : 256;
                struct k3_dump_sample *s2 = realloc(in->s, sizeof *in->s * (size_t)cap);
                if (!s2) {
                    rc = k3_err_set(err, "out of memory");
                    break;
                }
                in->s = s2;
            }
            struct k3_dump_sample *s = &in->s[in->n++];
            memset(s, 0, sizeof *s);
            s->line = line;
            json_error_t je;
            json_t *o = json_loadb(p, n, 0, &je);
            if (!o) rc = k3_err_set(err, "%s:%lld: not valid JSON: %s (column %d)", path, (long long)line, je.text,
                                    je.column);
            else if (parse_line(o, vocab_size, s, err)) rc = k3_err_prefix(err, "%s:%lld", path, (long long)line);
            in->n_messages += s->request != NULL;
            json_decref(o);
        }
        p = end ? end + 1 : p + n;
    }
    free(buf);
    if (!rc && in->n == 0) rc = k3_err_set(err, "%s has no samples (one JSON object per line)", path);
    if (rc) k3_dump_input_free(in);
    return rc;
}

void k3_dump_input_free(struct k3_dump_input *in)
{
    for (int64_t i = 0; i < in->n; i++) {
        free(in->s[i].ids);
        free(in->s[i].mask);
        if (in->s[i].request) json_decref(in->s[i].request);
    }
    free(in->s);
    memset(in, 0, sizeof *in);
}
