/*
 * json-text-check: drives json_text (src/holder/json-text.c) over the bytes on
 * stdin, in the pieces the arguments give, and prints the text it makes; the
 * test (test/holder/c-units.test.ts) compares it with JSON.stringify of the
 * WHATWG decoding. Usage: json-text-check CAP|room PIECE...
 *   CAP   the output room of every call (a number), or "room": JSON_TEXT_ROOM
 *         of the piece, in which one call must take the whole piece (exit 3 if not)
 *   PIECE sizes of the successive reads (repeated until the input ends)
 * A stream that ends inside a character gets U+FFFD, as the holder sends it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-text.h"

static unsigned char input[8 << 20];
static unsigned char out[JSON_TEXT_ROOM(sizeof input) / 8];

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  size_t n = fread(input, 1, sizeof input, stdin);
  int room = strcmp(argv[1], "room") == 0;
  size_t cap = room ? 0 : strtoul(argv[1], NULL, 10);
  struct utf8_state d;
  utf8_reset(&d);
  size_t at = 0;
  for (int p = 2; at < n; p = p + 1 < argc ? p + 1 : 2) {
    size_t piece = strtoul(argv[p], NULL, 10);
    if (piece > n - at) piece = n - at;
    size_t end = at + piece;
    while (at < end) {
      size_t want = room ? JSON_TEXT_ROOM(end - at) : cap;
      if (want > sizeof out) return 2;
      size_t used;
      size_t len = json_text(&d, input + at, end - at, out, want, &used);
      if (room && used != end - at) {
        fprintf(stderr, "json_text took %zu of %zu bytes in JSON_TEXT_ROOM\n", used, end - at);
        return 3;
      }
      if (used == 0 || len > want) {
        fprintf(stderr, "json_text took %zu bytes and wrote %zu into %zu\n", used, len, want);
        return 4;
      }
      fwrite(out, 1, len, stdout);
      at += used;
    }
  }
  if (d.needed) fwrite(out, 1, put_replacement(out), stdout);
  return 0;
}
