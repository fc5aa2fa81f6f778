/*
 * sha256-check.c — prints the sha256 of stdin as each block function makes
 * it: "portable HEX", then "shani HEX" (or "shani none" on a CPU without the
 * SHA extensions). The input is fed in pieces of the sizes given as
 * arguments, cycled, so that every split of a block is exercised.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sha256.h"

static void hash_stdin_copy(const unsigned char *data, size_t length, sha256_blocks_fn *blocks, int argc, char **argv, char hex[65]) {
  struct sha256 s;
  sha256_init(&s, blocks);
  for (size_t at = 0, i = 0; at < length; i++) {
    size_t piece = argc > 1 ? strtoul(argv[1 + i % (size_t)(argc - 1)], NULL, 10) : length;
    if (piece > length - at) piece = length - at;
    sha256_update(&s, data + at, piece);
    at += piece;
  }
  sha256_hex(&s, hex);
}

int main(int argc, char **argv) {
  size_t length = 0, room = 1 << 16;
  unsigned char *data = malloc(room);
  for (size_t n; data && (n = fread(data + length, 1, room - length, stdin)) > 0;) {
    length += n;
    if (length == room) data = realloc(data, room *= 2);
  }
  if (!data) return 1;
  char hex[65];
  hash_stdin_copy(data, length, sha256_blocks_portable, argc, argv, hex);
  printf("portable %s\n", hex);
  sha256_blocks_fn *shani = sha256_shani_blocks();
  if (shani) hash_stdin_copy(data, length, shani, argc, argv, hex);
  printf("shani %s\n", shani ? hex : "none");
  free(data);
  return 0;
}
