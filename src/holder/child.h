/*
 * child.h — the command's own process between fork and exec
 * (docs/holder-protocol.md, "Invocation"): its own session, its terminal or
 * pipes as 0, 1 and 2, a clean signal state, envd's umask, an OOM score the
 * killer may take, nothing else open; then the command.
 */
#ifndef ENVD_CHILD_H
#define ENVD_CHILD_H

#include <sys/types.h>

/* What the child needs of the holder's set-up: -1 for what it does not have. */
struct child_setup {
  int in_fd, out_fd, err_fd;
  const char *slave_name; /* the pty slave to open as the controlling terminal, or "" */
  mode_t umask;
};

void run_child(const struct child_setup *setup) __attribute__((noreturn));

#endif
