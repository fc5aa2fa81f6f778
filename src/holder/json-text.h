/*
 * json-text.h — the command's output as the text of a JSON string, for the
 * live channel's TEXT messages (docs/holder-protocol.md).
 *
 * envd's event streams carry output as JSON strings: bytes decoded as UTF-8
 * (a character split between reads stays whole; invalid bytes become U+FFFD,
 * one per maximal subpart, as the WHATWG decoder, V8's, and so Node's
 * StringDecoder do) and escaped exactly as JSON.stringify escapes them. Doing
 * that here, in one pass over each read, spares envd a decode, a JSON escape
 * and an encode per chunk: it forwards these bytes between its own constant
 * prefix and suffix.
 */
#ifndef ENVD_JSON_TEXT_H
#define ENVD_JSON_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "sizes.h" /* JSON_TEXT_MAX_GROWTH, JSON_TEXT_ROOM: the room json_text needs */

/* A streaming UTF-8 decoder's state between two reads (the WHATWG decoder's variables). */
struct utf8_state {
  uint32_t code_point;
  uint8_t needed, seen, lower, upper;
};

/* A decoder at the start of a stream. */
void utf8_reset(struct utf8_state *d);
/* Bytes of a character the decoder holds, begun but not complete (0-3): not yet in any text it wrote. */
static inline size_t utf8_pending(const struct utf8_state *d) { return d->needed ? (size_t)d->seen + 1 : 0; }
/* Writes U+FFFD (3 bytes) at o: what a stream ending inside a character gets. */
size_t put_replacement(unsigned char *o);
/*
 * Decodes and escapes in[0..n) into out, stopping only when the next step
 * might not fit in `cap` (cap >= JSON_TEXT_ROOM(1)). Sets *used to the input
 * bytes taken (at least one when n > 0) and returns the output length. A
 * character left incomplete at the end stays in `d` for the next call.
 * With cap >= JSON_TEXT_ROOM(n), *used == n (the proof is in json-text.c).
 */
size_t json_text(struct utf8_state *d, const unsigned char *in, size_t n, unsigned char *out, size_t cap, size_t *used);
/* The decoder's state after a stream whose last bytes (at most 3) are `tail`. */
void utf8_seed(struct utf8_state *d, const unsigned char *tail, size_t n);

#endif
