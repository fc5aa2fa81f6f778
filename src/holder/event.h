/*
 * event.h — one output event as envd's response carries it
 * (src/commands/sse.ts writes the same bytes): `event: <stream>`, `id:` with
 * the position after it in both streams, and one `data:` line of the JSON
 * object {"stream","data"} around text already escaped (json-text.h); or a
 * keep-alive comment. As one HTTP chunk when the response is chunked
 * (docs/holder-protocol.md, "Direct output").
 */
#ifndef ENVD_EVENT_H
#define ENVD_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "sizes.h" /* EVENT_HEAD, EVENT_TAIL */


/* An event's SSE id, `<stdout>-<stderr>`: how far each stream's text has gone out with it (docs/api.md). */
struct event_id {
  uint64_t out, err;
};

/*
 * Frames `len` bytes of text at `text` as an event of `stream` (1 stdout,
 * 2 stderr) with `id`; or, for stream 0, a keep-alive comment (its text is
 * written here, `len` and `id` ignored). Writes into the EVENT_HEAD bytes
 * before `text` and the EVENT_TAIL bytes after it. Returns where the framed
 * bytes start and sets *framed_len to their length.
 */
unsigned char *frame_event(unsigned char *text, size_t len, int stream, const struct event_id *id, int chunked, size_t *framed_len);

#endif
