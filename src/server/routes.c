/* routes.c - the route table: one row per API endpoint (see route.h to add one). */
#include "server/route.h"

const struct k3_route k3_srv_routes[] = {
    {"POST", "/v1/chat/completions", k3_api_chat, NULL, K3_ROUTE_GENERATES | K3_ROUTE_TOKENIZER},
    {"POST", "/v1/completions", k3_api_completions, NULL, K3_ROUTE_GENERATES | K3_ROUTE_TOKENIZER},
    {"POST", "/v1/messages", k3_api_messages, k3_srv_err_anthropic, K3_ROUTE_GENERATES | K3_ROUTE_TOKENIZER},
    {"GET", "/v1/models", k3_api_models, NULL, 0},
    {"GET", "/health", k3_api_health, NULL, K3_ROUTE_OPEN},
    {"GET", "/metrics", k3_api_metrics, NULL, K3_ROUTE_OPEN},
    {"POST", "/tokenize", k3_api_tokenize, NULL, K3_ROUTE_TOKENIZER},
    {"POST", "/detokenize", k3_api_detokenize, NULL, K3_ROUTE_TOKENIZER},
};
const int k3_srv_n_routes = (int)(sizeof k3_srv_routes / sizeof k3_srv_routes[0]);
