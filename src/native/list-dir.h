/* list-dir.h — the addon's listDir (list-dir.c). */
#ifndef ENVD_LIST_DIR_H
#define ENVD_LIST_DIR_H
#include <node_api.h>

napi_value list_dir(napi_env env, napi_callback_info info);

#endif
