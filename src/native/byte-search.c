/*
 * byte-search.c — the two byte loops of a search (src/files/search/scan.ts)
 * that ran at a fraction of memory speed in JavaScript:
 *
 * - countNewlines(bytes): the '\n' bytes of a chunk without a match, so that a
 *   match in a later chunk of the file has its line number (a Buffer.indexOf
 *   call per line was a fifth of a search);
 * - findNeedle(bytes, needle): where a literal first occurs, or -1. Most chunks
 *   do not hold it. memchr runs over the chunk for the needle's rarest byte (by
 *   the rough frequency of bytes in source text) and each hit is compared in
 *   full: 2-3 times Buffer.indexOf's speed, ripgrep's own trick.
 */
#include "byte-search.h"
#include "js-number.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/** How common a byte is in text and code, roughly: lower-case letters and blanks most, then digits and common punctuation, then the rest. */
static int commonness(uint8_t byte) {
  if ((byte >= 'a' && byte <= 'z') || byte == ' ' || byte == '\n' || byte == '\t') return 3;
  if ((byte >= '0' && byte <= '9') || strchr("().,;:=_'\"-/*{}", byte) != NULL) return 2;
  if (byte >= 'A' && byte <= 'Z') return 1;
  return 0;
}

/** The Uint8Array argument `value`; false (a TypeError pending) when it is something else. */
static bool bytes_of(napi_env env, napi_value value, const uint8_t **data, size_t *length) {
  napi_typedarray_type type;
  void *raw;
  if (napi_get_typedarray_info(env, value, &type, length, &raw, NULL, NULL) != napi_ok || type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "expected a Uint8Array");
    return false;
  }
  *data = raw;
  return true;
}

napi_value count_newlines(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  const uint8_t *at;
  size_t length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 || !bytes_of(env, argv[0], &at, &length)) return NULL;
  const uint8_t *end = at + length;
  double count = 0;
  while (at < end && (at = memchr(at, '\n', (size_t)(end - at))) != NULL) {
    count++;
    at++;
  }
  return number(env, count);
}

napi_value find_needle(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  const uint8_t *haystack;
  const uint8_t *needle;
  size_t length;
  size_t size;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2 || !bytes_of(env, argv[0], &haystack, &length) || !bytes_of(env, argv[1], &needle, &size)) return NULL;
  return number(env, (double)find_bytes(haystack, length, needle, size));
}

long find_bytes(const uint8_t *haystack, size_t length, const uint8_t *needle, size_t size) {
  if (size == 0) return 0;
  if (size > length) return -1;
  size_t rare = 0;
  for (size_t i = 1; i < size; i++)
    if (commonness(needle[i]) < commonness(needle[rare])) rare = i;
  // Candidates: where the rare byte may sit with the whole needle inside the haystack.
  const uint8_t *at = haystack + rare;
  const uint8_t *last = haystack + (length - size) + rare;
  while (at <= last && (at = memchr(at, needle[rare], (size_t)(last - at) + 1)) != NULL) {
    if (memcmp(at - rare, needle, size) == 0) return (long)(at - rare - haystack);
    at++;
  }
  return -1;
}
