/* search-batch.h — the addon's scanFiles (search-batch.c). */
#ifndef ENVD_SEARCH_BATCH_H
#define ENVD_SEARCH_BATCH_H
#include <node_api.h>

napi_value search_batch_scan_files(napi_env env, napi_callback_info info);

#endif
