/*
 * holder.h — one command's holder (docs/holder-protocol.md is the spec).
 *
 * One small process per command sits between envd and the command, like
 * conmon or containerd-shim: it owns the command's pipes (or pty master), so
 * they outlive envd; writes the kept output to segment files within global
 * budgets, so it lives outside envd's heap; records the exit status; and
 * serves a live channel on a unix socket that a (re)started envd connects to.
 *
 * Shape: single-threaded, one poll(2) loop, no signal handlers (SIGCHLD comes
 * through a signalfd, SIGPIPE and SIGHUP are ignored), so EINTR is rare but
 * still retried. Memory is fixed: one read buffer, one client input buffer
 * and one bounded ring of unsent client output, all in the one struct holder
 * (sizes.h has their sizes). Nothing grows with the command's output; no
 * malloc is ever called by the holder.
 *
 * Calls go one way: from the loop (holder.c) to the messages from envd
 * (incoming.c), to the output paths (output.c), to the messages to envd
 * (outgoing.c) and the channel (live.c), to the lent socket, the stdin
 * write and the kept log (direct.c, stdin-write.c, kept.c), to fail.c and
 * util.c. A unit below reports up by its return value, never by a call
 * (test/holder/call-graph.test.ts).
 */
#ifndef ENVD_HOLDER_H
#define ENVD_HOLDER_H

#include "command.h"
#include "kept.h"
#include "live.h"
#include "options.h"
#include "output.h"

/* A holder's state, one struct per concern; the loop owns it and hands each unit what it works on. */
struct holder {
  struct options opt;
  struct command command;
  struct kept kept;
  struct output output;
  struct live live;
};

/* A holder's main: from the command line of an exec, or from a request in a spawner's child. */
int holder_main(int argc, char **argv);

#endif
