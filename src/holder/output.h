/*
 * output.h — reading the command's output: each read is kept (kept.h) and,
 * when a client follows, sent to it as DATA, as TEXT (decoded and escaped,
 * json-text.h), or written to its lent socket (direct.h)
 * (docs/holder-protocol.md, "Keeping output", "Flow control", "TEXT").
 */
#ifndef ENVD_OUTPUT_H
#define ENVD_OUTPUT_H

#include <stdint.h>

#include "command.h"

enum { READ_EMPTY = 0, READ_DATA = 1, READ_END = 2, READ_HELD = 3 };
/* Reads once from a source; at EOF (or a pty's EIO) marks it so and closes it. Returns READ_*. */
int read_source(struct source *s);
/* Back-pressure: while true the command's output stays in its pipes. */
int output_held(void);
/* LIVE_ON with TEXT: each stream's decoder starts from the last bytes read, so a split character stays whole. */
void seed_text_decoders(void);
/*
 * The offset up to which a stream's text has gone out: the bytes the command
 * wrote, less a character the decoder still holds. A client that resumes there
 * decodes from a character's start, as the holder's decoder did.
 */
uint64_t text_offset(int stream);

#endif
