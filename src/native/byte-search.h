/* byte-search.h — the addon's countNewlines(bytes) and findNeedle(bytes, needle) (byte-search.c). */
#ifndef ENVD_BYTE_SEARCH_H
#define ENVD_BYTE_SEARCH_H
#include <node_api.h>

napi_value count_newlines(napi_env env, napi_callback_info info);
napi_value find_needle(napi_env env, napi_callback_info info);

#endif
