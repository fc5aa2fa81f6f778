/*
 * stdin-write.h — a STDIN (or a pty's ^D) being written to the command
 * (docs/holder-protocol.md, "Live channel": STDIN, STDIN_EOF). A command that
 * does not read leaves the rest for POLLOUT on its stdin; its bytes stay
 * where they came (the live channel's input buffer, live.h) until it ends.
 */
#ifndef ENVD_STDIN_WRITE_H
#define ENVD_STDIN_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "command.h"

struct stdin_write {
  int active;
  uint32_t id; /* the STDIN's id, for its ACK */
  const unsigned char *next;
  size_t left;
};

enum { STDIN_WRITTEN = 0, STDIN_WAITING = 1, STDIN_GONE = 2 };

/* Starts writing n bytes for the STDIN `id`, then as stdin_write_continue. */
int stdin_write_start(struct stdin_write *w, struct command *c, uint32_t id, const unsigned char *bytes, size_t n);
/*
 * Writes what the command takes now: STDIN_WRITTEN (all of it), STDIN_WAITING (the rest waits for POLLOUT),
 * or STDIN_GONE (nobody reads it any more; a pipe's end is then closed). Active only while STDIN_WAITING.
 */
int stdin_write_continue(struct stdin_write *w, struct command *c);

#endif
