/*
 * event.h — one output event as envd's response carries it
 * (src/commands/sse.ts writes the same bytes): `event: <stream>` and one
 * `data:` line of the JSON object {"stream","data"} around text already
 * escaped (json-text.h), or a keep-alive comment; as one HTTP chunk when the
 * response is chunked (docs/holder-protocol.md, "Direct output").
 */
#ifndef ENVD_EVENT_H
#define ENVD_EVENT_H

#include <stddef.h>

#define EVENT_HEAD 64 /* room in front of the text: the chunk size line and the event's prefix */
#define EVENT_TAIL 8  /* room after it: the event's suffix and the chunk's CRLF */

/*
 * Frames `len` bytes of text at `text` as an event of `stream` (1 stdout,
 * 2 stderr; 0: a keep-alive comment, whose text is written here and `len`
 * ignored), writing into the EVENT_HEAD bytes before `text` and the
 * EVENT_TAIL bytes after it. Returns where the framed bytes start and sets
 * *framed_len to their length.
 */
unsigned char *frame_event(unsigned char *text, size_t len, int stream, int chunked, size_t *framed_len);

#endif
