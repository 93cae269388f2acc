/* json_schema.h - does a JSON value satisfy a JSON Schema? For tool-call arguments against
 * a tool's `parameters` and for response_format output: KVV's schema accuracy is the share
 * of calls whose arguments pass Draft 2020-12 validation (research/frontend.md §4.1-§4.2).
 *
 * Keywords (Draft 2020-12 semantics, as Python jsonschema's Draft202012Validator applies
 * them): boolean schemas, type (one or a list; 1.0 is an integer), enum, const, properties,
 * required, additionalProperties, propertyNames, min/maxProperties, items, prefixItems,
 * contains, min/maxItems, uniqueItems, anyOf, allOf, oneOf, not, if/then/else,
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, min/maxLength (in code
 * points), and $ref to "#" or a JSON pointer inside the schema ("#/$defs/X"). Annotations
 * (title, description, default, examples, $id, $comment, format) are ignored, and so is
 * `pattern` (no regex engine here: documented as not checked). A keyword that changes the
 * verdict but is not implemented (patternProperties, unevaluated*, dependent*, a $ref to
 * another document) makes the answer "unknown" rather than a wrong "valid". */
#ifndef K3_FRONTEND_JSON_SCHEMA_H
#define K3_FRONTEND_JSON_SCHEMA_H

#include <jansson.h>

#include "core/err.h"

enum k3_jschema_verdict {
    K3_JSCHEMA_UNKNOWN = -1,  /* err says which keyword or reference could not be used */
    K3_JSCHEMA_INVALID = 0,   /* err says where and why, e.g. "$.city: expected string" */
    K3_JSCHEMA_VALID = 1,
};

enum k3_jschema_verdict k3_json_schema_check(const json_t *schema, const json_t *instance,
                                             struct k3_err *err);

#endif
