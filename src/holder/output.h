/*
 * output.h — reading the command's output: each read is kept (kept.h) and,
 * when a client follows, sent to it as DATA, as TEXT (decoded and escaped,
 * json-text.h), or written to its lent socket (direct.h)
 * (docs/holder-protocol.md, "Keeping output", "Flow control", "TEXT").
 */
#ifndef ENVD_OUTPUT_H
#define ENVD_OUTPUT_H

#include "command.h"

/* Reads once from a source; at EOF (or a pty's EIO) marks it so and closes it. */
void read_source(struct source *s);
/* Back-pressure: while true the command's output stays in its pipes. */
int output_held(void);
/* LIVE_ON with TEXT: each stream's decoder starts from the last bytes read, so a split character stays whole. */
void seed_text_decoders(void);

#endif
