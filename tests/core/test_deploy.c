/* test_deploy.c - the deployment schema: defaults, typed setters, byte sizes,
 * lists, cross-key rules, and print -> parse round trips through libconfig. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/deploy_load.h"
#include "core/deploy.h"
#include "k3_test.h"

static const struct k3_cfg_key *key(const char *name)
{
    const struct k3_cfg_key *k = k3_deploy_key_find(name);
    if (!k) {
        fprintf(stderr, "no key %s\n", name);
        abort();
    }
    return k;
}

static void test_defaults(void)
{
    struct k3_deploy d;
    struct k3_err err;
    k3_deploy_defaults(&d);
    CHECK(d.parallel.tp == 1 && d.parallel.adp == 1);
    CHECK(!strcmp(d.server.host, "127.0.0.1")); /* loopback unless configured */
    CHECK(d.server.api_key[0] == 0);
    CHECK(d.server.max_body_bytes == 32 << 20);
    CHECK(k3_deploy_validate(&d, &err) == 0);
    /* every key has a meaning, a section and a unique name */
    for (int i = 0; i < k3_deploy_n_keys; i++) {
        CHECK(strchr(k3_deploy_schema[i].key, '.') != NULL);
        CHECK(strlen(k3_deploy_schema[i].meaning) > 10);
        for (int j = 0; j < i; j++) CHECK(strcmp(k3_deploy_schema[i].key, k3_deploy_schema[j].key));
    }
}

static void test_setters(void)
{
    struct k3_deploy d;
    struct k3_err err;
    k3_deploy_defaults(&d);
    CHECK(k3_deploy_set(&d, key("parallel.tp"), "8", &err) == 0 && d.parallel.tp == 8);
    CHECK(k3_deploy_set(&d, key("parallel.tp"), "8x", &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "parallel.tp must be an integer, not '8x'");
    CHECK(k3_deploy_set(&d, key("parallel.tp"), "99999", &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "out of range");
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "16GiB", &err) == 0);
    CHECK(d.cache.kv_bytes == 16LL << 30);
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "2G", &err) == 0 && d.cache.kv_bytes == 2LL << 30);
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "3MB", &err) == 0 && d.cache.kv_bytes == 3000000);
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "1.5KiB", &err) == 0 && d.cache.kv_bytes == 1536);
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "1.3B", &err) == -1);
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "-1", &err) == -1);
    CHECK(k3_deploy_set(&d, key("cache.kv_bytes"), "12Q", &err) == -1);
    CHECK(k3_deploy_set(&d, key("backend.kind"), "cuda", &err) == 0);
    CHECK(k3_deploy_set(&d, key("backend.kind"), "cud", &err) == -1);
    CHECK(k3_deploy_set(&d, key("cache.prefix_cache"), "off", &err) == 0 && !d.cache.prefix_cache);
    CHECK(k3_deploy_set(&d, key("cache.prefix_cache"), "maybe", &err) == -1);
    CHECK(k3_deploy_set(&d, key("backend.memory_fraction"), "0.5", &err) == 0);
    CHECK(k3_deploy_set(&d, key("backend.memory_fraction"), "nan", &err) == -1);
    CHECK(k3_deploy_set(&d, key("dump.layers"), "7,23, 51", &err) == 0);
    CHECK(d.dump.n_layers == 3 && d.dump.layers[2] == 51);
    CHECK(k3_deploy_set(&d, key("dump.layers"), "7,x", &err) == -1);
    CHECK(k3_deploy_set(&d, key("dump.layers"), "", &err) == 0 && d.dump.n_layers == 0);
    char big[400];
    memset(big, 'h', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(k3_deploy_set(&d, key("server.host"), big, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "too long");
}

static void test_overrides(void)
{
    struct k3_deploy d;
    struct k3_err err;
    k3_deploy_defaults(&d);
    CHECK(k3_deploy_override(&d, "server.port=9000", &err) == 0 && d.server.port == 9000);
    CHECK(k3_deploy_override(&d, "server.prot=9000", &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "did you mean 'server.port'");
    CHECK(k3_deploy_override(&d, "server.port", &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "KEY=VALUE");
    /* the file parser: later sections override earlier values in the struct */
    CHECK(k3_deploy_parse(&d, "server = { port = 1234; };", "inline", &err) == 0);
    CHECK(d.server.port == 1234);
    CHECK(k3_deploy_parse(&d, "cache = { kv_bytes = 17179869184L; };", "inline", &err) == 0);
    CHECK(d.cache.kv_bytes == 17179869184LL);
    /* libconfig 1.5 would wrap this to 0 without a word: we refuse it */
    CHECK(k3_deploy_parse(&d, "# 99999999999 in a comment is fine\n"
                          "server = { host = \"1234567890123\"; };\n"
                          "cache = { kv_bytes = 17179869184; };", "inline", &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "inline:3: integer 17179869184 does not fit in 32 bits");
    CHECK(k3_deploy_parse(&d, "cache = { kv_bytes = 0x7fffffff; };", "inline", &err) == 0);
    CHECK(k3_deploy_parse(&d, "cache = { kv_bytes = 0x1ffffffff; };", "inline", &err) == -1);
    CHECK(k3_deploy_parse(&d, "backend = { memory_fraction = 1; };", "inline", &err) == 0);
    CHECK(d.backend.memory_fraction == 1.0);
}

static void test_round_trip(void)
{
    struct k3_deploy a, b;
    struct k3_err err;
    k3_deploy_defaults(&a);
    CHECK(k3_deploy_override(&a, "parallel.tp=4", &err) == 0);
    CHECK(k3_deploy_override(&a, "server.host=0.0.0.0", &err) == 0);
    CHECK(k3_deploy_override(&a, "server.served_model_name=kimi \"k3\" \\ test", &err) == 0);
    CHECK(k3_deploy_override(&a, "backend.memory_fraction=0.123456789", &err) == 0);
    CHECK(k3_deploy_override(&a, "dump.layers=7,23,51,67,83", &err) == 0);
    CHECK(k3_deploy_override(&a, "cache.kv_bytes=5TiB", &err) == 0);
    CHECK(k3_deploy_override(&a, "server.api_key=sekrit", &err) == 0);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    k3_deploy_print(&a, m);
    fclose(m);
    CHECK(strstr(text, "sekrit") == NULL); /* secrets never printed */
    k3_deploy_defaults(&b);
    CHECK_MSG(k3_deploy_parse(&b, text, "printed", &err) == 0, "%s", err.msg);
    strcpy(b.server.api_key, a.server.api_key); /* the one field not printed */
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(text);
}

int main(void)
{
    test_defaults();
    test_setters();
    test_overrides();
    test_round_trip();
    return k3_test_summary();
}
