/* fuzz_json_schema.c - libFuzzer target for the JSON Schema check: schemas come from
 * requests and instances from the model, so any pair must give a verdict without a crash,
 * a leak or a hang (cyclic $refs included). Input: schema JSON, a NUL byte, instance JSON. */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "frontend/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    size_t n_schema = (size_t)(nul - data);
    json_t *schema = json_loadb((const char *)data, n_schema, JSON_DECODE_ANY, NULL);
    json_t *inst = json_loadb((const char *)nul + 1, size - n_schema - 1, JSON_DECODE_ANY, NULL);
    if (schema && inst) {
        struct k3_err err;
        int r = k3_json_schema_check(schema, inst, &err);
        if (r < -1 || r > 1) __builtin_trap();
    }
    json_decref(schema);
    json_decref(inst);
    return 0;
}
