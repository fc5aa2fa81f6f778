/* byte-search.h — the addon's countNewlines(bytes) and findNeedle(bytes, needle) (byte-search.c). */
#ifndef ENVD_BYTE_SEARCH_H
#define ENVD_BYTE_SEARCH_H
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

napi_value count_newlines(napi_env env, napi_callback_info info);
napi_value find_needle(napi_env env, napi_callback_info info);
/** Where `needle` first occurs in `haystack` (its rarest byte found by memchr), or -1. Thread-safe: also runs on the pool (search-batch.c). */
long find_bytes(const uint8_t *haystack, size_t length, const uint8_t *needle, size_t size);

#endif
