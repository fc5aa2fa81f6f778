/* js-number.h — a C number as a JavaScript one, for the addon's calls that answer counts or -errno. */
#ifndef ENVD_JS_NUMBER_H
#define ENVD_JS_NUMBER_H
#include <node_api.h>

/** NULL when Node-API could not make it (the call then answers undefined). */
static inline napi_value number(napi_env env, double value) {
  napi_value result;
  return napi_create_double(env, value, &result) == napi_ok ? result : NULL;
}

#endif
