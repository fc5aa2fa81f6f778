/*
 * child.h — the command's own process between fork and exec
 * (docs/holder-protocol.md, "Invocation"): its own session, its terminal or
 * pipes as 0, 1 and 2, a clean signal state, envd's umask, an OOM score the
 * killer may take, nothing else open; then the command.
 */
#ifndef ENVD_CHILD_H
#define ENVD_CHILD_H

#include <sys/types.h>

/*
 * How the command's process fails before it runs the command: a line
 * "envd-holder: <what failed>: <error> (<ERRNO>)" on the command's stderr (its
 * pipe, or its terminal), and an exit status of its own for each kind.
 */
enum {
  CHILD_EXIT_CGROUP = 120,    /* the command's cgroup could not be joined: it would run without its limits */
  CHILD_EXIT_STDIO = 121,     /* stdin, stdout or stderr could not be set up (dup2, /dev/null) */
  CHILD_EXIT_SESSION = 122,   /* setsid failed: the command would share envd's session */
  CHILD_EXIT_TERMINAL = 123,  /* the terminal could not become the controlling terminal (TIOCSCTTY) */
  CHILD_EXIT_USER = 125,      /* the user could not be entered (setgroups, setgid, setuid) */
  CHILD_EXIT_NOT_RUN = 126,   /* exec failed for another reason than a missing file (EACCES, ENOEXEC, ...) */
  CHILD_EXIT_NOT_FOUND = 127, /* exec: no such file */
};

/* What the child needs of the holder's set-up: -1 for what it does not have. */
struct child_setup {
  int in_fd, out_fd, err_fd;
  const char *slave_name; /* the pty slave to open as the controlling terminal, or "" */
  mode_t umask;
};

struct options;
void run_child(const struct child_setup *setup, const struct options *opt) __attribute__((noreturn));

#endif
