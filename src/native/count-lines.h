/* count-lines.h — the addon's countNewlines(bytes) (count-lines.c). */
#ifndef ENVD_COUNT_LINES_H
#define ENVD_COUNT_LINES_H
#include <node_api.h>

napi_value count_newlines(napi_env env, napi_callback_info info);

#endif
