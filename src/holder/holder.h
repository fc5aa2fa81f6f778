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
 * and one bounded ring of unsent client output, all static. Nothing grows
 * with the command's output; no malloc is ever called by the holder.
 */
#ifndef ENVD_HOLDER_H
#define ENVD_HOLDER_H

/* A holder's main: from the command line of an exec, or from a request in a spawner's child. */
int holder_main(int argc, char **argv);

#endif
