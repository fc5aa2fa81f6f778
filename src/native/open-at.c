/*
 * open-at.c — openat(2) for the walk of search and find
 * (src/files/search/user-access.ts), which Node does not offer. Without it
 * each child was opened by the path /proc/self/fd/N/name, then fstat, read
 * and close each crossed into C on its own: most of a search's time on a
 * tree of small files. One call here opens a child of a directory descriptor
 * the hostile-path way (O_NOFOLLOW|O_NONBLOCK, so a planted symlink or FIFO
 * opens nothing and blocks nothing), checks the opened inode with fstat (its
 * type, the reader's permission bits) and, for a file, reads its first bytes,
 * closing it when that was all of it. statAt is find's lstat of a listed
 * child. Listing is in list-dir.c.
 *
 * Results are negative errno values or counts; sizes and descriptors go into
 * the caller's Float64Array, so no call allocates a JavaScript object.
 */
#define _GNU_SOURCE
#include "open-at.h"
#include "js-number.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/** A name longer than NAME_MAX cannot be a directory entry; the buffer holds it and its NUL. */
#define NAME_BUFFER_BYTES 512
/** out[]: the file's size from fstat, and its descriptor when left open (-1 when closed). */
#define OUT_SIZE 0
#define OUT_FD 1
#define OUT_LENGTH 2
_Static_assert(NAME_BUFFER_BYTES > 255, "a name of NAME_MAX bytes fits");

/** The arguments every call shares: dirfd, name, reader (Int32Array [uid, gid...] or null). */
struct at_args {
  int dirfd;
  char name[NAME_BUFFER_BYTES];
  const int32_t *reader;
  size_t reader_length;
};

/** 0, or -EINVAL: argv[0] a descriptor, argv[1] one name (a string, or a Buffer of bytes that are not UTF-8). */
static int read_dirfd_and_name(napi_env env, napi_value *argv, struct at_args *args) {
  if (napi_get_value_int32(env, argv[0], &args->dirfd) != napi_ok) return -EINVAL;
  size_t length = 0;
  bool is_buffer = false;
  napi_is_buffer(env, argv[1], &is_buffer);
  if (is_buffer) {
    void *bytes;
    if (napi_get_buffer_info(env, argv[1], &bytes, &length) != napi_ok || length >= NAME_BUFFER_BYTES) return -EINVAL;
    memcpy(args->name, bytes, length);
    args->name[length] = '\0';
  } else if (napi_get_value_string_utf8(env, argv[1], args->name, NAME_BUFFER_BYTES, &length) != napi_ok || length >= NAME_BUFFER_BYTES - 1) {
    return -EINVAL;
  }
  // One name, never a path: a slash or an embedded NUL would open something else.
  if (length == 0 || memchr(args->name, '/', length) != NULL || strlen(args->name) != length) return -EINVAL;
  return 0;
}

/** 0, or -EINVAL when the arguments are not what user-access.ts passes (a JS exception is then pending). */
static int read_at_args(napi_env env, napi_value *argv, struct at_args *args) {
  int status = read_dirfd_and_name(env, argv, args);
  if (status != 0) return status;
  napi_valuetype type;
  args->reader = NULL;
  args->reader_length = 0;
  if (napi_typeof(env, argv[2], &type) != napi_ok) return -EINVAL;
  if (type != napi_null && type != napi_undefined) {
    napi_typedarray_type kind;
    void *data;
    if (napi_get_typedarray_info(env, argv[2], &kind, &args->reader_length, &data, NULL, NULL) != napi_ok || kind != napi_int32_array || args->reader_length == 0) return -EINVAL;
    args->reader = data;
  }
  return 0;
}

/** The permission bits (4 read, 2 write, 1 execute) the reader gets from the inode: owner, else group, else other. */
static int reader_bits(const struct stat *st, const int32_t *reader, size_t length) {
  if (reader == NULL) return 7;
  if ((uint32_t)reader[0] == st->st_uid) return (st->st_mode >> 6) & 7;
  for (size_t i = 1; i < length; i++)
    if ((uint32_t)reader[i] == st->st_gid) return (st->st_mode >> 3) & 7;
  return st->st_mode & 7;
}

/** The data of a Float64Array of at least `length` numbers (a caller's results), or NULL. */
static double *float64_out(napi_env env, napi_value value, size_t length) {
  napi_typedarray_type kind;
  size_t have;
  void *data;
  if (napi_get_typedarray_info(env, value, &kind, &have, &data, NULL, NULL) != napi_ok || kind != napi_float64_array || have < length) return NULL;
  return data;
}

/**
 * Opens `name` below `dirfd`, fstats it; -errno, or the descriptor when it is
 * of `type` and gives the reader `bits`. Also called from the thread pool
 * (search-batch.c): it touches nothing but its arguments.
 */
int open_child_checked(int dirfd, const char *name, const int32_t *reader, size_t reader_length, int flags, unsigned type, int bits, struct stat *st) {
  int fd = openat(dirfd, name, flags | O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return -errno;
  int error = 0;
  if (fstat(fd, st) != 0) error = errno;
  else if ((st->st_mode & S_IFMT) != type) error = type == S_IFDIR ? ENOTDIR : EINVAL;
  else if ((reader_bits(st, reader, reader_length) & bits) != bits) error = EACCES;
  if (error == 0) return fd;
  close(fd);
  return -error;
}

static int open_checked(const struct at_args *args, int flags, mode_t type, int bits, struct stat *st) {
  return open_child_checked(args->dirfd, args->name, args->reader, args->reader_length, flags, type, bits, st);
}

/**
 * openDirAt(dirfd, name, reader): a child directory the reader may list
 * (read and execute), opened; its descriptor, or -errno.
 */
napi_value open_dir_at(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  struct at_args args;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3) return NULL;
  int status = read_at_args(env, argv, &args);
  if (status != 0) return number(env, status);
  struct stat st;
  return number(env, open_checked(&args, O_DIRECTORY, S_IFDIR, 5, &st));
}

/** statAt's out[]: what find's entry info shows of an inode. */
enum { STAT_MODE, STAT_UID, STAT_GID, STAT_SIZE, STAT_MTIME_MS, STAT_FIELDS };

/**
 * statAt(dirfd, name, out): lstat of a child, by fstatat(AT_SYMLINK_NOFOLLOW)
 * on its directory's descriptor; 0 with out = [mode, uid, gid, size,
 * mtime in ms], or -errno. find's entry infos: through /proc/self/fd/N/name
 * each lstat cost 7 us of path walk, most of a find that lists many files.
 */
napi_value stat_at(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  struct at_args args;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3) return NULL;
  int status = read_dirfd_and_name(env, argv, &args);
  if (status != 0) return number(env, status);
  double *out = float64_out(env, argv[2], STAT_FIELDS);
  if (out == NULL) return number(env, -EINVAL);
  struct stat st;
  if (fstatat(args.dirfd, args.name, &st, AT_SYMLINK_NOFOLLOW) != 0) return number(env, -errno);
  out[STAT_MODE] = st.st_mode;
  out[STAT_UID] = st.st_uid;
  out[STAT_GID] = st.st_gid;
  out[STAT_SIZE] = (double)st.st_size;
  out[STAT_MTIME_MS] = (double)st.st_mtim.tv_sec * 1e3 + (double)st.st_mtim.tv_nsec / 1e6;
  return number(env, 0);
}

/**
 * openFileAt(dirfd, name, reader, buffer, maxBytes, out): a regular child
 * file the reader may read, opened and read from its start into `buffer`
 * (nothing when it is empty, or larger than maxBytes > 0). -errno, or 0 with
 * out = [size, fd or -1 once closed, bytes read]: the descriptor stays open
 * unless the buffer holds all of the file (an empty one is closed at once).
 */
napi_value open_file_at(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  struct at_args args;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 6) return NULL;
  int status = read_at_args(env, argv, &args);
  if (status != 0) return number(env, status);
  void *buffer;
  size_t capacity;
  double max_bytes;
  double *out = float64_out(env, argv[5], 3);
  if (napi_get_buffer_info(env, argv[3], &buffer, &capacity) != napi_ok || napi_get_value_double(env, argv[4], &max_bytes) != napi_ok || out == NULL) return number(env, -EINVAL);
  struct stat st;
  int fd = open_checked(&args, 0, S_IFREG, 4, &st);
  if (fd < 0) return number(env, fd);
  out[OUT_SIZE] = (double)st.st_size;
  out[OUT_LENGTH] = 0;
  // Empty (or /proc's and /sys's size-0 pseudo-files, some of which block a read) or over the limit: not read.
  size_t want = st.st_size == 0 || (max_bytes > 0 && (double)st.st_size > max_bytes) ? 0 : (size_t)st.st_size < capacity ? (size_t)st.st_size : capacity;
  size_t got = 0;
  while (got < want) {
    ssize_t n = pread(fd, (char *)buffer + got, want - got, (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      close(fd);
      return number(env, -error);
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  out[OUT_LENGTH] = (double)got;
  if (got >= (size_t)st.st_size) {
    close(fd);
    out[OUT_FD] = -1;
  } else {
    out[OUT_FD] = fd;
  }
  return number(env, 0);
}
