/* test_json_schema.c - the verdicts Python jsonschema cannot be compared on: "unknown" for
 * what is not implemented or cannot resolve (never a wrong "valid"), $ref cycles that
 * consume nothing, and the location and reason in the message. The verdicts themselves
 * are checked against jsonschema by check_json_schema.py. */
#include <jansson.h>
#include <string.h>

#include "frontend/json_schema.h"
#include "k3_test.h"

static int verdict(const char *schema, const char *inst, char *msg)
{
    json_t *s = json_loads(schema, JSON_DECODE_ANY, NULL), *v = json_loads(inst, JSON_DECODE_ANY, NULL);
    struct k3_err err = {{0}};
    int r = (s && v) ? (int)k3_json_schema_check(s, v, &err) : -2;
    if (msg) strcpy(msg, err.msg);
    json_decref(s);
    json_decref(v);
    return r;
}

int main(void)
{
    char msg[K3_ERR_MSG_BYTES];
    CHECK(verdict("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                  "\"required\":[\"city\"]}", "{\"city\":\"Beijing\"}", NULL) == K3_JSCHEMA_VALID);
    CHECK(verdict("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}",
                  "{\"city\":3}", msg) == K3_JSCHEMA_INVALID);
    CHECK_STR_CONTAINS(msg, "$.city: expected string");
    CHECK(verdict("{\"required\":[\"a\"]}", "{}", msg) == K3_JSCHEMA_INVALID);
    CHECK_STR_CONTAINS(msg, "missing required property 'a'");
    CHECK(verdict("{\"additionalProperties\":false,\"properties\":{\"a\":{}}}", "{\"b\":1}", msg) ==
          K3_JSCHEMA_INVALID);
    CHECK_STR_CONTAINS(msg, "'b' is not allowed");
    /* anyOf branches fail quietly; the message names the anyOf, not a branch */
    CHECK(verdict("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", "1", msg) ==
          K3_JSCHEMA_INVALID);
    CHECK_STR_CONTAINS(msg, "none of anyOf");
    /* recursive schema through $ref, as in walle TestDefs */
    const char *tree = "{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":"
                       "\"array\",\"items\":{\"$ref\":\"#/$defs/Node\"}}}}},\"$ref\":\"#/$defs/Node\"}";
    CHECK(verdict(tree, "{\"kids\":[{\"kids\":[]},{}]}", NULL) == K3_JSCHEMA_VALID);
    CHECK(verdict(tree, "{\"kids\":[{\"kids\":[1]}]}", msg) == K3_JSCHEMA_INVALID);
    CHECK_STR_CONTAINS(msg, "$.kids[0].kids[0]");
    /* unknown, never a guess */
    CHECK(verdict("{\"$ref\":\"#\"}", "1", msg) == K3_JSCHEMA_UNKNOWN);
    CHECK_STR_CONTAINS(msg, "deeper than the limit");
    CHECK(verdict("{\"$ref\":\"#/$defs/missing\"}", "1", msg) == K3_JSCHEMA_UNKNOWN);
    CHECK(verdict("{\"$ref\":\"other.json#/a\"}", "1", NULL) == K3_JSCHEMA_UNKNOWN);
    CHECK(verdict("{\"patternProperties\":{\"^a\":{}}}", "{}", msg) == K3_JSCHEMA_UNKNOWN);
    CHECK_STR_CONTAINS(msg, "patternProperties");
    CHECK(verdict("{\"anyOf\":[{\"unevaluatedItems\":false}]}", "[]", NULL) == K3_JSCHEMA_UNKNOWN);
    CHECK(verdict("\"not a schema\"", "1", NULL) == K3_JSCHEMA_UNKNOWN);
    /* boolean schemas, integer-valued reals, code-point lengths */
    CHECK(verdict("true", "{}", NULL) == K3_JSCHEMA_VALID);
    CHECK(verdict("false", "{}", NULL) == K3_JSCHEMA_INVALID);
    CHECK(verdict("{\"type\":\"integer\"}", "2.0", NULL) == K3_JSCHEMA_VALID);
    CHECK(verdict("{\"type\":\"integer\"}", "2.5", NULL) == K3_JSCHEMA_INVALID);
    CHECK(verdict("{\"maxLength\":2}", "\"\xe4\xb8\xad\xe6\x96\x87\"", NULL) == K3_JSCHEMA_VALID);
    CHECK(verdict("{\"enum\":[1]}", "true", NULL) == K3_JSCHEMA_INVALID);
    CHECK(verdict("{\"enum\":[1]}", "1.0", NULL) == K3_JSCHEMA_VALID);
    return k3_test_summary();
}
