/* random-reseed.h — the addon's reseed(bytes) (random-reseed.c). */
#ifndef ENVD_RANDOM_RESEED_H
#define ENVD_RANDOM_RESEED_H
#include <node_api.h>

napi_value random_reseed(napi_env env, napi_callback_info info);

#endif
