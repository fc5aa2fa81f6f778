/* open-at.h — the addon's openFileAt, openDirAt and statAt (open-at.c). */
#ifndef ENVD_OPEN_AT_H
#define ENVD_OPEN_AT_H
#include <node_api.h>
#include <stdint.h>
struct stat;

int open_child_checked(int dirfd, const char *name, const int32_t *reader, size_t reader_length, int flags, unsigned type, int bits, struct stat *st);

napi_value open_file_at(napi_env env, napi_callback_info info);
napi_value open_dir_at(napi_env env, napi_callback_info info);
napi_value stat_at(napi_env env, napi_callback_info info);

#endif
