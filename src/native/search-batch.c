/*
 * search-batch.c — a search's per-file work for a batch of files, as one job
 * on libuv's thread pool (src/files/search/file-batches.ts). On the event
 * loop alone a search used one of the machine's CPUs while ripgrep used all;
 * most of its time was this work (open, fstat, read, close, the byte search),
 * which needs no JavaScript. With two or more batches in flight the pool's
 * threads do it on the other CPUs while the event loop walks the tree, and
 * only the files that can match come back to JavaScript, still open.
 *
 *   scanFiles(dirfds, names, reader, needle, firstBytes, maxBytes, stop, arena)
 *     -> Promise<Float64Array>: 4 numbers a file: its verdict (or -errno when
 *     it could not be opened as a regular file the reader may read), the
 *     descriptor of a candidate left open (-1 otherwise), fstat's size, and
 *     where in `arena` a candidate's bytes are (-1: not there).
 *   dirfds: Int32Array, each file's directory; names: Buffer, each name
 *   followed by a NUL byte; reader: Int32Array [uid, gid...] or null (no
 *   check); needle: Buffer or null; firstBytes: how many bytes the caller's
 *   first read takes (the binary check without a needle); maxBytes: files
 *   larger are skipped (0: no limit); stop: Int32Array whose [0] the caller
 *   sets to end the batch early (a disconnect, the time budget); arena: a
 *   Buffer the job copies small candidates into (all of a file that fits the
 *   first read): those come back closed, and the event loop reads nothing.
 *   At most MAX_OPEN_CANDIDATES candidates a job stay open; the rest come
 *   back as "reopen", so a search's descriptors stay few whatever it matches.
 *
 * The verdict is conservative: "no match" only when the caller's own scan
 * (scan.ts) could not find one. That scan stops at the first chunk holding a
 * NUL byte and searches only what came before, and every match contains the
 * needle: so a file without the needle before its first NUL has no match.
 * Opening is open-at.c's (O_NOFOLLOW|O_NONBLOCK, checks on the opened inode).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <node_api.h>

#include "byte-search.h"
#include "open-at.h"
#include "search-batch.h"

/**
 * The bytes one job reads a file through: with SEARCH_BATCHES_IN_FLIGHT
 * (file-batches.ts) jobs at once, what a search holds in flight beyond its
 * JavaScript state, whatever the sizes of the files.
 */
#define SCAN_READ_BYTES (64 * 1024)
/** A longer needle is not searched here (every file is then a candidate): the carry between reads must fit the buffer. */
#define MAX_NEEDLE_BYTES (SCAN_READ_BYTES / 4)
/**
 * Past this many bytes read by one job, a file is read no further than its
 * first read: it is a candidate, scanned in slices on the event loop. A job
 * then stays short (libuv's pool also serves envd's other file calls) even
 * over a tree of large logs: at most this plus one read a file.
 */
#define JOB_READ_BUDGET (4 * 1024 * 1024)
#define RESULT_FIELDS 4
/** Candidates a job leaves open (larger than the first read, or the arena full); past this they are closed and reopened by the caller. */
#define MAX_OPEN_CANDIDATES 16

/** Verdicts, as file-batches.ts reads them. */
#define SKIPPED 0   /* empty or over maxBytes: not searched */
#define NO_MATCH 1  /* searched: no match can be in it */
#define CANDIDATE 2 /* may match: left open for the caller's scan */
#define NOT_REACHED 3 /* the batch was stopped first */
#define REOPEN 4      /* may match, but closed (MAX_OPEN_CANDIDATES): the caller opens it again */

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref stop_ref;
  napi_ref arena_ref;
  uint8_t *arena;
  size_t arena_length;
  const volatile int32_t *stop;
  size_t count;
  int32_t *dirfds;
  char *names;
  int32_t *reader;
  size_t reader_length;
  uint8_t *needle;
  size_t needle_length;
  size_t first_bytes;
  double max_bytes;
  double *results;
  size_t bytes_read;
} batch_t;

static void free_batch(napi_env env, batch_t *batch) {
  if (batch->stop_ref) napi_delete_reference(env, batch->stop_ref);
  if (batch->arena_ref) napi_delete_reference(env, batch->arena_ref);
  if (batch->work) napi_delete_async_work(env, batch->work);
  free(batch->dirfds);
  free(batch->names);
  free(batch->reader);
  free(batch->needle);
  free(batch->results);
  free(batch);
}

static int stopped(const batch_t *batch) { return __atomic_load_n(batch->stop, __ATOMIC_RELAXED) != 0; }

/** pread until `want` bytes or the end; the count, or -errno. */
static ssize_t read_at(int fd, uint8_t *into, size_t want, off_t offset) {
  size_t got = 0;
  while (got < want) {
    ssize_t n = pread(fd, into + got, want - got, offset + (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

/** Without a needle: a candidate unless the caller's first read (`first_bytes`, at most SCAN_READ_BYTES) would hold a NUL byte (binary). */
static int first_read_verdict(int fd, size_t size, size_t first_bytes, uint8_t *buffer, size_t *held) {
  size_t want = size < first_bytes ? size : first_bytes;
  ssize_t got = read_at(fd, buffer, want, 0);
  if (got < 0) return (int)got;
  *held = (size_t)got;
  return memchr(buffer, 0, (size_t)got) != NULL ? NO_MATCH : CANDIDATE;
}

/** With a needle: a candidate when it occurs before the first NUL byte within fstat's size. Reads carry needle-1 bytes over. */
static int needle_verdict(batch_t *batch, int fd, size_t size, uint8_t *buffer, size_t *held) {
  size_t keep = 0;
  size_t offset = 0;
  while (offset < size) {
    if (stopped(batch)) return NOT_REACHED;
    if (offset > 0 && batch->bytes_read >= JOB_READ_BUDGET) return CANDIDATE;
    size_t want = SCAN_READ_BYTES - keep;
    if (want > size - offset) want = size - offset;
    ssize_t got = read_at(fd, buffer + keep, want, (off_t)offset);
    if (got < 0) return (int)got;
    if (got == 0) break;
    offset += (size_t)got;
    batch->bytes_read += (size_t)got;
    size_t end = keep + (size_t)got;
    const uint8_t *nul = memchr(buffer + keep, 0, (size_t)got);
    size_t limit = nul ? (size_t)(nul - buffer) : end;
    if (find_bytes(buffer, limit, batch->needle, batch->needle_length) >= 0) {
      // Found in the first read: the buffer holds the file's first bytes.
      if (keep == 0 && offset == (size_t)got) *held = (size_t)got;
      return CANDIDATE;
    }
    if (nul) return NO_MATCH;
    keep = batch->needle_length - 1 < end ? batch->needle_length - 1 : end;
    memmove(buffer, buffer + end - keep, keep);
  }
  return NO_MATCH;
}

static void scan_files(napi_env env, void *data) {
  (void)env;
  batch_t *batch = data;
  uint8_t *buffer = malloc(SCAN_READ_BYTES);
  const char *name = batch->names;
  size_t arena_used = 0;
  size_t open_candidates = 0;
  for (size_t i = 0; i < batch->count; i++, name += strlen(name) + 1) {
    double *out = batch->results + i * RESULT_FIELDS;
    out[0] = NOT_REACHED;
    out[1] = -1;
    out[2] = 0;
    out[3] = -1;
    if (buffer == NULL) {
      out[0] = -ENOMEM;
      continue;
    }
    if (stopped(batch)) continue;
    // One name, never a path (the walk's names come from readdir, but the rule is checked where it matters).
    if (name[0] == '\0' || strchr(name, '/') != NULL) {
      out[0] = -EINVAL;
      continue;
    }
    struct stat st;
    int fd = open_child_checked(batch->dirfds[i], name, batch->reader, batch->reader_length, 0, S_IFREG, 4, &st);
    if (fd < 0) {
      out[0] = fd;
      continue;
    }
    out[2] = (double)st.st_size;
    size_t size = (size_t)st.st_size;
    // Empty (or /proc's and /sys's size-0 pseudo-files, some of which block a read) or over the limit: not searched.
    size_t held = 0;
    int verdict = size == 0 || (batch->max_bytes > 0 && (double)size > batch->max_bytes) ? SKIPPED
                  : batch->needle ? needle_verdict(batch, fd, size, buffer, &held)
                                  : first_read_verdict(fd, size, batch->first_bytes, buffer, &held);
    if (verdict == CANDIDATE && held == size && size <= batch->first_bytes && batch->arena_length - arena_used >= size) {
      // All of it fits the caller's first read: the bytes go back, the descriptor is closed.
      memcpy(batch->arena + arena_used, buffer, size);
      out[3] = (double)arena_used;
      arena_used += size;
    } else if (verdict == CANDIDATE && open_candidates < MAX_OPEN_CANDIDATES) {
      open_candidates++;
      out[0] = verdict;
      out[1] = fd;
      continue;
    } else if (verdict == CANDIDATE) {
      verdict = REOPEN;
    }
    out[0] = verdict;
    close(fd);
  }
  free(buffer);
}

static void complete(napi_env env, napi_status status, void *data) {
  batch_t *batch = data;
  size_t length = batch->count * RESULT_FIELDS;
  napi_value array_buffer, array;
  void *bytes;
  if (status == napi_ok && napi_create_arraybuffer(env, length * sizeof(double), &bytes, &array_buffer) == napi_ok &&
      napi_create_typedarray(env, napi_float64_array, length, array_buffer, 0, &array) == napi_ok) {
    memcpy(bytes, batch->results, length * sizeof(double));
    napi_resolve_deferred(env, batch->deferred, array);
  } else {
    // Not answered: close what the job left open, so no descriptor outlives the batch.
    for (size_t i = 0; i < batch->count; i++)
      if (batch->results[i * RESULT_FIELDS + 1] >= 0) close((int)batch->results[i * RESULT_FIELDS + 1]);
    napi_value message, error;
    napi_create_string_utf8(env, "search batch failed", NAPI_AUTO_LENGTH, &message);
    napi_create_error(env, NULL, message, &error);
    napi_reject_deferred(env, batch->deferred, error);
  }
  free_batch(env, batch);
}

/** A copy of a typed array's or Buffer's bytes (null/undefined: none); false when `value` is neither. */
static bool copy_bytes(napi_env env, napi_value value, void **copy, size_t *length, size_t element) {
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok) return false;
  *copy = NULL;
  *length = 0;
  if (type == napi_null || type == napi_undefined) return true;
  void *data;
  size_t count;
  napi_typedarray_type kind;
  if (napi_get_typedarray_info(env, value, &kind, &count, &data, NULL, NULL) != napi_ok) return false;
  if (kind != (element == 4 ? napi_int32_array : napi_uint8_array)) return false;
  *copy = malloc(count * element + 1);
  if (*copy == NULL) return false;
  memcpy(*copy, data, count * element);
  *length = count;
  return true;
}

napi_value search_batch_scan_files(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 8) return NULL;
  batch_t *batch = calloc(1, sizeof *batch);
  if (batch == NULL) return NULL;
  size_t dir_count, names_length;
  double first_bytes;
  napi_typedarray_type kind;
  void *stop;
  size_t stop_length;
  bool ok = copy_bytes(env, argv[0], (void **)&batch->dirfds, &dir_count, 4) && batch->dirfds && copy_bytes(env, argv[1], (void **)&batch->names, &names_length, 1) && batch->names &&
            copy_bytes(env, argv[2], (void **)&batch->reader, &batch->reader_length, 4) && copy_bytes(env, argv[3], (void **)&batch->needle, &batch->needle_length, 1) &&
            napi_get_value_double(env, argv[4], &first_bytes) == napi_ok && first_bytes >= 0 && napi_get_value_double(env, argv[5], &batch->max_bytes) == napi_ok &&
            napi_get_typedarray_info(env, argv[6], &kind, &stop_length, &stop, NULL, NULL) == napi_ok && kind == napi_int32_array && stop_length >= 1 &&
            napi_get_buffer_info(env, argv[7], (void **)&batch->arena, &batch->arena_length) == napi_ok;
  if (ok) {
    // As many NUL-terminated names as directories, and nothing after the last.
    size_t names = 0;
    for (size_t i = 0; i < names_length; i++) names += batch->names[i] == '\0';
    ok = names == dir_count && (names_length == 0 || batch->names[names_length - 1] == '\0') && (batch->reader == NULL || batch->reader_length > 0);
  }
  if (ok && batch->needle && (batch->needle_length == 0 || batch->needle_length > MAX_NEEDLE_BYTES)) {
    free(batch->needle);
    batch->needle = NULL;
  }
  batch->count = dir_count;
  batch->first_bytes = first_bytes < SCAN_READ_BYTES ? (size_t)first_bytes : SCAN_READ_BYTES;
  batch->stop = stop;
  batch->results = ok ? calloc(dir_count ? dir_count * RESULT_FIELDS : 1, sizeof(double)) : NULL;
  napi_value promise, name;
  if (!ok || batch->results == NULL || napi_create_reference(env, argv[6], 1, &batch->stop_ref) != napi_ok ||
      napi_create_reference(env, argv[7], 1, &batch->arena_ref) != napi_ok || napi_create_promise(env, &batch->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "envd-search-batch", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, scan_files, complete, batch, &batch->work) != napi_ok || napi_queue_async_work(env, batch->work) != napi_ok) {
    free_batch(env, batch);
    napi_throw_type_error(env, NULL, "scanFiles(dirfds: Int32Array, names: Buffer, reader, needle, firstBytes, maxBytes, stop: Int32Array, arena: Buffer)");
    return NULL;
  }
  return promise;
}
