/*
 * malloc-trim.c — a Node-API addon with one function, trim(): glibc's
 * malloc_trim(0), which gives the free memory inside malloc's arenas back to
 * the kernel. free() returns only what lies at the top of an arena; after a
 * burst (a 1,000-command kill storm), the freed chunks below live ones stayed:
 * 9-18 MiB of envd's RSS that nothing in Node can return (docs/performance.md).
 * envd calls it after its memory-reducing collections (src/memory-reclaim.ts).
 * Only libc and Node-API, which the Node binary exports. The addon also
 * carries reseed() (random-reseed.c), the tar writer's openEntries() and
 * readFiles() (file-batch.c), and the search's openFileAt(), openDirAt(),
 * statAt() (open-at.c), listDir() (list-dir.c), countNewlines() and findNeedle() (byte-search.c): one
 * shared object for envd's few in-process native calls.
 */
#include <malloc.h>
#include <node_api.h>

#include "byte-search.h"
#include "file-batch.h"
#include "list-dir.h"
#include "open-at.h"
#include "random-reseed.h"
#include "search-batch.h"

/** trim(): true when malloc_trim gave memory back. */
static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value released;
  if (napi_get_boolean(env, malloc_trim(0) != 0, &released) != napi_ok) return NULL;
  return released;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "trim", NAPI_AUTO_LENGTH, trim, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trim", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "reseed", NAPI_AUTO_LENGTH, random_reseed, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "reseed", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "openEntries", NAPI_AUTO_LENGTH, file_batch_open_entries, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "openEntries", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "readFiles", NAPI_AUTO_LENGTH, file_batch_read_files, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "readFiles", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "openFileAt", NAPI_AUTO_LENGTH, open_file_at, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "openFileAt", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "openDirAt", NAPI_AUTO_LENGTH, open_dir_at, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "openDirAt", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "listDir", NAPI_AUTO_LENGTH, list_dir, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "listDir", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "statAt", NAPI_AUTO_LENGTH, stat_at, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "statAt", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "scanFiles", NAPI_AUTO_LENGTH, search_batch_scan_files, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "scanFiles", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "countNewlines", NAPI_AUTO_LENGTH, count_newlines, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "countNewlines", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "findNeedle", NAPI_AUTO_LENGTH, find_needle, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "findNeedle", fn) != napi_ok) return NULL;
  return exports;
}
