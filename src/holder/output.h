/*
 * output.h — reading the command's output: each read is kept (kept.h) and,
 * when a client follows, sent to it as DATA, as TEXT (decoded and escaped,
 * json-text.h), or written to its lent socket (direct.h)
 * (docs/holder-protocol.md, "Keeping output", "Flow control", "TEXT",
 * "Direct output").
 */
#ifndef ENVD_OUTPUT_H
#define ENVD_OUTPUT_H

#include <stdint.h>

#include "command.h"
#include "json-text.h"
#include "sizes.h"

struct holder;

/* The read buffer, the TEXT being built, and for TEXT each stream's decoder and last bytes. */
struct output {
  struct utf8_state text_state[3];
  unsigned char tail[3][3]; /* a stream's last 3 bytes: they seed its decoder when LIVE goes on */
  size_t tail_len[3];
  /* A read, with a frame header's room in front of it, so a frame goes to its segment with one write. */
  unsigned char read_buf[FRAME_HEADER + CHUNK];
  /* A TEXT: its text is built in place after the room for its header. */
  unsigned char text_buf[TEXT_HEADER + TEXT_MAX];
};

enum { READ_EMPTY = 0, READ_DATA = 1, READ_END = 2, READ_HELD = 3 };
/* Reads once from a source; at EOF (or a pty's EIO) marks it so and closes it. Returns READ_*. */
int read_source(struct holder *h, struct source *s);
/* Back-pressure: while true the command's output stays in its pipes. */
int output_held(struct holder *h);
/* LIVE_ON with TEXT: each stream's decoder starts from the last bytes read, so a split character stays whole. */
void seed_text_decoders(struct output *o);
/*
 * The offset up to which a stream's text has gone out: the bytes the command
 * wrote, less a character the decoder still holds. A client that resumes there
 * decodes from a character's start, as the holder's decoder did.
 */
uint64_t text_offset(const struct holder *h, int stream);

/* Gives the lent socket back now (output complete, or the event under way is out) with DIRECT_ENDED; TEXT follows. */
void end_direct(struct holder *h, int reason);
/* After a write to the lent socket (direct_flush's result): a failed one, or the last before DIRECT_OFF, gives it back. */
void direct_written(struct holder *h, int written);

#endif
