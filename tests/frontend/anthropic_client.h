/* anthropic_client.h - a strict reader of the Anthropic SSE stream for the tests and the
 * fuzz target: it rebuilds the Message from the events the way the SDK's accumulator does
 * (text / thinking appended, partial_json concatenated and read at the block's stop) and
 * flags any break of the grammar: event name != data.type, events outside
 * message_start..message_stop, a block started while another is open, indices that are
 * not contiguous from 0, a delta that does not fit its block or is empty, a record that is
 * not "event: T\ndata: JSON\n\n", a data line that is not one JSON object. */
#ifndef K3_TESTS_FRONTEND_ANTHROPIC_CLIENT_H
#define K3_TESTS_FRONTEND_ANTHROPIC_CLIENT_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/anthropic.h"

static int str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

struct client {
    json_t *msg;
    json_t *partial;  /* partial_json text per block index */
    int open;         /* index of the open block, -1 */
    int started, stopped, bad;
    char why[160];
};

static void client_init(struct client *c)
{
    memset(c, 0, sizeof *c);
    c->partial = json_array();
    c->open = -1;
}

static void client_free(struct client *c)
{
    json_decref(c->msg);
    json_decref(c->partial);
}

static void bad(struct client *c, const char *why)
{
    if (!c->bad) snprintf(c->why, sizeof c->why, "%s", why);
    c->bad = 1;
}

static void client_event(struct client *c, const char *event, const char *data)
{
    json_t *d = json_loads(data, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(d)) { bad(c, "data is not a JSON object"); json_decref(d); return; }
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!type || strcmp(type, event)) bad(c, "event name != data.type");
    else if (!strcmp(type, "ping")) {
    } else if (!strcmp(type, "message_start")) {
        if (c->started) bad(c, "second message_start");
        c->started = 1;
        c->msg = json_deep_copy(json_object_get(d, "message"));
    } else if (!c->started || c->stopped) {
        bad(c, "event outside message_start..message_stop");
    } else if (!strcmp(type, "content_block_start")) {
        json_t *content = json_object_get(c->msg, "content");
        if (c->open >= 0) bad(c, "block started while another is open");
        if (json_integer_value(json_object_get(d, "index")) != (json_int_t)json_array_size(content))
            bad(c, "block index not contiguous");
        c->open = (int)json_array_size(content);
        json_array_append(content, json_object_get(d, "content_block"));
        json_array_append_new(c->partial, json_string(""));
    } else if (!strcmp(type, "content_block_delta")) {
        int i = (int)json_integer_value(json_object_get(d, "index"));
        if (i != c->open) { bad(c, "delta for a block that is not open"); goto out; }
        json_t *blk = json_array_get(json_object_get(c->msg, "content"), (size_t)i);
        const json_t *delta = json_object_get(d, "delta");
        const char *dt = json_string_value(json_object_get(delta, "type"));
        const char *bt = json_string_value(json_object_get(blk, "type"));
        const char *field = !dt ? NULL : !strcmp(dt, "text_delta") ? "text"
                            : !strcmp(dt, "thinking_delta") ? "thinking"
                            : !strcmp(dt, "input_json_delta") ? "partial_json" : NULL;
        const char *want = !field ? NULL : !strcmp(field, "partial_json") ? "tool_use" : field;
        if (!field || strcmp(want, bt)) { bad(c, "delta type does not fit the block"); goto out; }
        const json_t *piece = json_object_get(delta, field);
        if (!json_is_string(piece) || !json_string_length(piece)) bad(c, "empty delta");
        json_t *cur = !strcmp(field, "partial_json") ? json_array_get(c->partial, (size_t)i)
                                                     : json_object_get(blk, field);
        struct k3_sbuf s = {0};
        k3_sbuf_add(&s, json_string_value(cur), json_string_length(cur));
        k3_sbuf_add(&s, json_string_value(piece), json_string_length(piece));
        if (!strcmp(field, "partial_json"))
            json_array_set_new(c->partial, (size_t)i, json_stringn(s.p, s.n));
        else
            json_object_set_new(blk, field, json_stringn(s.p, s.n));
        k3_sbuf_free(&s);
    } else if (!strcmp(type, "content_block_stop")) {
        int i = (int)json_integer_value(json_object_get(d, "index"));
        if (i != c->open) bad(c, "stop for a block that is not open");
        json_t *blk = json_array_get(json_object_get(c->msg, "content"), (size_t)i);
        if (str_eq(json_object_get(blk, "type"), "tool_use")) {
            json_t *p = json_array_get(c->partial, (size_t)i);
            json_object_set_new(blk, "input", k3_anth_tool_input(json_string_value(p),
                                                                 json_string_length(p)));
        }
        c->open = -1;
    } else if (!strcmp(type, "message_delta")) {
        if (c->open >= 0) bad(c, "message_delta with a block open");
        json_object_update(c->msg, json_object_get(d, "delta"));
        json_object_set(c->msg, "usage", json_object_get(d, "usage"));
    } else if (!strcmp(type, "message_stop")) {
        c->stopped = 1;
    } else {
        bad(c, "unknown event");
    }
out:
    json_decref(d);
}

static void client_read(struct client *c, const char *s, size_t n)
{
    const char *end = s + n;
    while (s < end) {
        const char *rec = strstr(s, "\n\n");
        if (!rec || rec >= end) { bad(c, "unterminated record"); return; }
        if (strncmp(s, "event: ", 7)) { bad(c, "record without event line"); return; }
        const char *nl = memchr(s, '\n', (size_t)(rec - s));
        if (!nl || strncmp(nl + 1, "data: ", 6)) { bad(c, "record without data line"); return; }
        char event[64];
        snprintf(event, sizeof event, "%.*s", (int)(nl - s - 7), s + 7);
        size_t dl = (size_t)(rec - (nl + 7));
        char *data = malloc(dl + 1);
        memcpy(data, nl + 7, dl);
        data[dl] = 0;
        if (memchr(data, '\n', dl)) bad(c, "newline inside data");
        client_event(c, event, data);
        free(data);
        s = rec + 2;
    }
}

#endif
