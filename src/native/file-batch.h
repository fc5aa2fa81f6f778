/* file-batch.h — the addon's openEntries and readFiles (file-batch.c). */
#ifndef ENVD_FILE_BATCH_H
#define ENVD_FILE_BATCH_H
#include <node_api.h>

napi_value file_batch_open_entries(napi_env env, napi_callback_info info);
napi_value file_batch_read_files(napi_env env, napi_callback_info info);

#endif
