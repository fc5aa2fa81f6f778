/*
 * file-batch.c — the tar writer's file system calls for many small files in
 * one thread-pool job each (src/files/tar/file-batch.ts). Through node:fs, a
 * small file of a downloaded tree took four pool round trips (open, fstat,
 * read, close), and the futex hand-offs of those 40,000 trips per 10,000 files
 * were most of the download's cost (strace -c: 340,000 futex calls, 77 % of
 * the system time). Here a directory's batch of entries is opened and fstat-ed
 * in one job, and a piece's small files are read and closed in another. The
 * calls are the same as before and still run in a pool thread, never on the
 * event loop: openat relative to the directory's descriptor with
 * O_NOFOLLOW|O_NONBLOCK (a symlink or FIFO swapped in is refused or returns at
 * once), fstat before a byte is read.
 *
 *   openEntries(dirfd, names) -> Promise<Float64Array>: 6 numbers a name:
 *     fd (or -errno; -1000 when it is not a regular file, already closed),
 *     mode, uid, gid, size, mtime in ms.
 *   readFiles(buffer, plan) -> Promise<Float64Array>: plan is 4 numbers a file
 *     (fd, start, size, end): pread up to size bytes at buffer[start], zeros up
 *     to end, close fd. Gives the bytes read per file, or -errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <node_api.h>
#include "file-batch.h"

#define ENTRY_FIELDS 6
#define PLAN_FIELDS 4
#define NOT_REGULAR (-1000.0)

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref keep; /* the buffer readFiles writes into */
  int dirfd;
  size_t count;
  char **names;   /* openEntries */
  double *plan;   /* readFiles */
  char *data;
  size_t data_length;
  double *results;
} batch_t;

static void free_batch(napi_env env, batch_t *batch) {
  if (batch->names) {
    for (size_t i = 0; i < batch->count; i++) free(batch->names[i]);
    free(batch->names);
  }
  if (batch->keep) napi_delete_reference(env, batch->keep);
  if (batch->work) napi_delete_async_work(env, batch->work);
  free(batch->plan);
  free(batch->results);
  free(batch);
}

static void open_entries(napi_env env, void *data) {
  (void)env;
  batch_t *batch = data;
  for (size_t i = 0; i < batch->count; i++) {
    double *out = batch->results + i * ENTRY_FIELDS;
    int fd = openat(batch->dirfd, batch->names[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      out[0] = -errno;
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      out[0] = -errno;
      close(fd);
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      out[0] = NOT_REGULAR;
      close(fd);
      continue;
    }
    out[0] = fd;
    out[1] = st.st_mode;
    out[2] = st.st_uid;
    out[3] = st.st_gid;
    out[4] = (double)st.st_size;
    out[5] = (double)st.st_mtim.tv_sec * 1000.0 + (double)st.st_mtim.tv_nsec / 1e6;
  }
}

static void read_files(napi_env env, void *data) {
  (void)env;
  batch_t *batch = data;
  for (size_t i = 0; i < batch->count; i++) {
    const double *p = batch->plan + i * PLAN_FIELDS;
    int fd = (int)p[0];
    size_t start = (size_t)p[1], size = (size_t)p[2], end = (size_t)p[3];
    size_t got = 0;
    double result = 0;
    if (end > batch->data_length || start + size > end) {
      result = -EINVAL;
    } else {
      while (got < size) {
        ssize_t n = pread(fd, batch->data + start + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          result = -errno;
          break;
        }
        if (n == 0) break; /* shrank meanwhile: zeros stand in for the rest */
        got += (size_t)n;
      }
      memset(batch->data + start + got, 0, end - start - got);
      if (result == 0) result = (double)got;
    }
    close(fd);
    batch->results[i] = result;
  }
}

static void complete(napi_env env, napi_status status, void *data) {
  batch_t *batch = data;
  size_t fields = batch->names ? ENTRY_FIELDS : 1;
  napi_value array_buffer, array;
  void *bytes;
  if (status == napi_ok && napi_create_arraybuffer(env, batch->count * fields * sizeof(double), &bytes, &array_buffer) == napi_ok &&
      napi_create_typedarray(env, napi_float64_array, batch->count * fields, array_buffer, 0, &array) == napi_ok) {
    memcpy(bytes, batch->results, batch->count * fields * sizeof(double));
    napi_resolve_deferred(env, batch->deferred, array);
  } else {
    napi_value message, error;
    napi_create_string_utf8(env, "file batch failed", NAPI_AUTO_LENGTH, &message);
    napi_create_error(env, NULL, message, &error);
    napi_reject_deferred(env, batch->deferred, error);
  }
  free_batch(env, batch);
}

static napi_value queue(napi_env env, batch_t *batch, napi_async_execute_callback execute) {
  napi_value promise, name;
  if (napi_create_promise(env, &batch->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "envd-file-batch", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, execute, complete, batch, &batch->work) != napi_ok ||
      napi_queue_async_work(env, batch->work) != napi_ok) {
    free_batch(env, batch);
    napi_throw_error(env, NULL, "cannot queue a file batch");
    return NULL;
  }
  return promise;
}

napi_value file_batch_open_entries(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t dirfd;
  uint32_t count;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 || napi_get_value_int32(env, argv[0], &dirfd) != napi_ok ||
      napi_get_array_length(env, argv[1], &count) != napi_ok) {
    napi_throw_type_error(env, NULL, "openEntries(dirfd, names)");
    return NULL;
  }
  batch_t *batch = calloc(1, sizeof *batch);
  if (!batch) return NULL;
  batch->dirfd = dirfd;
  batch->count = count;
  batch->names = calloc(count ? count : 1, sizeof(char *));
  batch->results = calloc(count ? count * ENTRY_FIELDS : 1, sizeof(double));
  if (!batch->names || !batch->results) {
    free_batch(env, batch);
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < count; i++) {
    napi_value element;
    size_t length;
    if (napi_get_element(env, argv[1], i, &element) != napi_ok || napi_get_value_string_utf8(env, element, NULL, 0, &length) != napi_ok ||
        !(batch->names[i] = malloc(length + 1)) || napi_get_value_string_utf8(env, element, batch->names[i], length + 1, &length) != napi_ok ||
        strlen(batch->names[i]) != length) {
      free_batch(env, batch);
      napi_throw_type_error(env, NULL, "openEntries: names must be strings without NUL");
      return NULL;
    }
  }
  return queue(env, batch, open_entries);
}

napi_value file_batch_read_files(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  void *data, *plan;
  size_t data_length, plan_length;
  napi_typedarray_type type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 || napi_get_buffer_info(env, argv[0], &data, &data_length) != napi_ok ||
      napi_get_typedarray_info(env, argv[1], &type, &plan_length, &plan, NULL, NULL) != napi_ok || type != napi_float64_array || plan_length % PLAN_FIELDS != 0) {
    napi_throw_type_error(env, NULL, "readFiles(buffer, plan: Float64Array)");
    return NULL;
  }
  batch_t *batch = calloc(1, sizeof *batch);
  if (!batch) return NULL;
  batch->count = plan_length / PLAN_FIELDS;
  batch->data = data;
  batch->data_length = data_length;
  batch->plan = malloc(plan_length ? plan_length * sizeof(double) : 1);
  batch->results = calloc(batch->count ? batch->count : 1, sizeof(double));
  if (!batch->plan || !batch->results || napi_create_reference(env, argv[0], 1, &batch->keep) != napi_ok) {
    free_batch(env, batch);
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  memcpy(batch->plan, plan, plan_length * sizeof(double));
  return queue(env, batch, read_files);
}
