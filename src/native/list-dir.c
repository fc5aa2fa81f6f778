/*
 * list-dir.c — listDir(), the listing of one directory for the walk of search
 * and find (src/files/search/user-access.ts). getdents64 on the walk's own
 * descriptor (fdopendir needed a duplicate and three more calls), the names
 * sorted by their bytes in C (ripgrep's --sort path order).
 *
 * A directory is an attacker's: 300,000 empty files take a user 9 s to make,
 * and listed whole they grew envd by 56-136 MiB. So a call returns about as
 * many bytes of names as the caller allows. A directory that fits comes sorted in one
 * call; a larger one comes in chunks in the file system's order (sorting
 * would need all of it at once), each call reading on from where the last
 * stopped, so the walk holds one chunk of it at a time.
 */
#define _GNU_SOURCE
#include "list-dir.h"
#include "js-number.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GETDENTS_BYTES (32 * 1024)
/** The most a caller may ask a call to hold (walk.ts asks 4-256 KiB). */
#define LIST_MAX_BYTES (16 * 1024 * 1024)

/** The entries read so far: type letter + name + NUL each in `text`; where each starts in `entries`. */
struct listing {
  char *text;
  size_t used, capacity;
  struct listed {
    size_t at;
    size_t length;
  } *entries;
  size_t count, slots;
  /** Some name is not UTF-8: the listing goes back as bytes (a string would turn them into U+FFFD). */
  bool has_invalid_utf8;
};

/** The type letter of an entry: 'd' directory, 'f' regular file, 'o' anything else (symlinks included: never followed). */
static char type_letter(int dirfd, const char *name, unsigned char type) {
  if (type == DT_UNKNOWN) {
    // Some filesystems do not fill d_type: ask the inode, without following a symlink.
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 'o';
    type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
  }
  return type == DT_DIR ? 'd' : type == DT_REG ? 'f' : 'o';
}

/** Strict UTF-8, as Node's isUtf8(): no overlong forms, no surrogates, nothing past U+10FFFF. */
static bool is_utf8(const unsigned char *s, size_t length) {
  for (size_t i = 0; i < length;) {
    unsigned char c = s[i];
    size_t more = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 4;
    if (more == 4 || i + more >= length + (more == 0)) return false;
    unsigned code = more == 0 ? c : c & (0x3F >> more);
    for (size_t k = 1; k <= more; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    static const unsigned smallest[] = {0, 0x80, 0x800, 0x10000};
    if (code < smallest[more] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += more + 1;
  }
  return true;
}

/** Adds one entry; ENOMEM when the listing cannot grow. */
static int add_entry(struct listing *list, char letter, const char *name) {
  size_t length = strlen(name);
  if (list->count == list->slots) {
    size_t slots = list->slots ? list->slots * 2 : 64;
    struct listed *grown = realloc(list->entries, slots * sizeof *grown);
    if (grown == NULL) return ENOMEM;
    list->entries = grown;
    list->slots = slots;
  }
  if (list->used + length + 2 > list->capacity) {
    size_t capacity = list->capacity ? list->capacity : 4096;
    while (list->used + length + 2 > capacity) capacity *= 2;
    char *grown = realloc(list->text, capacity);
    if (grown == NULL) return ENOMEM;
    list->text = grown;
    list->capacity = capacity;
  }
  list->entries[list->count++] = (struct listed){list->used, length};
  list->text[list->used] = letter;
  memcpy(list->text + list->used + 1, name, length + 1);
  list->used += length + 2;
  list->has_invalid_utf8 |= !is_utf8((const unsigned char *)name, length);
  return 0;
}

/** Reads on from the descriptor's position until its end (*more = false) or `max_bytes` of names (one getdents block more at most); 0 or an errno. */
static int read_chunk(int dirfd, struct listing *list, size_t max_bytes, bool *more) {
  static _Thread_local char block[GETDENTS_BYTES];
  *more = false;
  while (list->used < max_bytes) {
    long got = syscall(SYS_getdents64, dirfd, block, sizeof block);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return 0;
    for (long at = 0; at < got;) {
      struct dirent64 *entry = (struct dirent64 *)(block + at);
      at += entry->d_reclen;
      const char *name = entry->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      int error = add_entry(list, type_letter(dirfd, name, entry->d_type), name);
      if (error != 0) return error;
    }
  }
  *more = true;
  return 0;
}

static int by_name_bytes(const void *a, const void *b, void *text) {
  const struct listed *x = a, *y = b;
  size_t shorter = x->length < y->length ? x->length : y->length;
  int order = memcmp((char *)text + x->at + 1, (char *)text + y->at + 1, shorter);
  return order != 0 ? order : (x->length > y->length) - (x->length < y->length);
}

/** The entries joined by '/' (which no name holds), with a '/' after the last when `more`: a string, or a Buffer when a name is not UTF-8. */
static napi_value joined(napi_env env, const struct listing *list, bool more) {
  char *out = malloc(list->used + 1);
  if (out == NULL) return NULL;
  size_t length = 0;
  for (size_t i = 0; i < list->count; i++) {
    memcpy(out + length, list->text + list->entries[i].at, list->entries[i].length + 1);
    length += list->entries[i].length + 1;
    if (i + 1 < list->count || more) out[length++] = '/';
  }
  napi_value result = NULL;
  napi_status status = list->has_invalid_utf8 ? napi_create_buffer_copy(env, length, out, NULL, &result) : napi_create_string_utf8(env, out, length, &result);
  free(out);
  return status == napi_ok ? result : NULL;
}

/**
 * listDir(dirfd, fromStart, maxBytes): entries of the directory, each its type letter
 * ('d' directory, 'f' regular file, 'o' anything else) and its name, joined
 * by '/'; "" when there are none; -errno when it cannot be read. fromStart
 * reads from the first entry, else on from the last call's end. A listing
 * that ends with '/' has more entries after it (read them with fromStart
 * false); one that does not is the rest of the directory, sorted by the names'
 * bytes when it is all of it. A call stops once it holds maxBytes of names.
 * A string, or a Buffer of the same bytes when some name is not UTF-8.
 */
napi_value list_dir(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int dirfd;
  bool from_start;
  uint32_t max_bytes;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3 || napi_get_value_int32(env, argv[0], &dirfd) != napi_ok ||
      napi_get_value_bool(env, argv[1], &from_start) != napi_ok || napi_get_value_uint32(env, argv[2], &max_bytes) != napi_ok) {
    return NULL;
  }
  if (max_bytes == 0 || max_bytes > LIST_MAX_BYTES) return number(env, -EINVAL);
  if (from_start && lseek(dirfd, 0, SEEK_SET) < 0) return number(env, -errno);
  struct listing list = {0};
  bool more = false;
  int error = read_chunk(dirfd, &list, max_bytes, &more);
  napi_value result;
  if (error != 0) {
    result = number(env, -error);
  } else {
    if (from_start && !more) qsort_r(list.entries, list.count, sizeof *list.entries, by_name_bytes, list.text);
    result = joined(env, &list, more);
    if (result == NULL) result = number(env, -ENOMEM);
  }
  free(list.entries);
  free(list.text);
  return result;
}
