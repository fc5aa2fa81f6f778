/*
 * command.h — the command a holder runs: its process and how it ended, its
 * output sources, its stdin (docs/holder-protocol.md, "Invocation" and
 * "Ending"). The loop owns it (holder.h); units below it get a pointer.
 */
#ifndef ENVD_COMMAND_H
#define ENVD_COMMAND_H

#include <stdint.h>
#include <sys/types.h>

#define STREAM_STDOUT 1
#define STREAM_STDERR 2

/* An output source: a pipe's read end, or the pty master as the one stdout source. */
struct source {
  int fd;
  int stream;
  int eof;
  /* Read until empty since the shell was reaped: everything the command's exited processes wrote is read. */
  int drained;
};

struct command {
  pid_t shell_pid; /* -1 until forked */
  int reaped;
  int exit_code;   /* -1 until reaped, and when a signal ended it */
  int exit_signal; /* 0 when none */
  struct source sources[2];
  int source_count;
  int pty_fd;   /* the master: output source and stdin sink at once; -1 without a pty */
  int stdin_fd; /* the pipe's write end, or pty_fd; -1 without stdin */
  int stdin_closed;
  int signal_fd; /* the signalfd that reports SIGCHLD, made by start */
  int status_fd; /* status.tmp, opened at start with its first page taken, so a full state fs cannot stop the status */
};

#endif
