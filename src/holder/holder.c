/* holder.c — the holder's loop, the reap and the end (holder.h). */
#define _GNU_SOURCE
#include "holder.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "direct.h"
#include "incoming.h"
#include "outgoing.h"
#include "start.h"
#include "util.h"

/*
 * Once the shell is reaped, its outputs are read until empty (what the
 * command's exited processes wrote is all there, however slowly the holder
 * gets to read it); then a process the command left behind (a daemon) may
 * keep them open for GRACE_MS more, and at most GRACE_MAX_MS after the reap
 * in all. Both count only time in which the outputs were being read, not
 * time paused by a client's back-pressure.
 */
#define GRACE_MS 200
#define GRACE_MAX_MS 2000
/* After EXIT, how long the holder waits at most for envd to close the connection (see live.h). */
#define EXIT_LINGER_MS (10 * 60 * 1000)

/* The one holder of this process: in static storage (its buffers are most of a MiB), owned by this file. */
static struct holder holder;

static void reap(struct holder *h) {
  struct command *command = &h->command;
  struct signalfd_siginfo info;
  while (read(command->signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {}
  int status;
  pid_t r;
  do r = waitpid(command->shell_pid, &status, WNOHANG); while (r < 0 && errno == EINTR);
  if (r == 0) return;
  command->reaped = 1;
  if (r < 0) { command->exit_code = -1; command->exit_signal = 0; } /* ECHILD: cannot happen, we are its only reaper */
  else if (WIFSIGNALED(status)) { command->exit_code = -1; command->exit_signal = WTERMSIG(status); }
  else { command->exit_code = WEXITSTATUS(status); command->exit_signal = 0; }
  queue_reaped(&h->live, command);
}

/* Into the status.tmp opened at start (its page already taken, so a full state fs cannot stop it), then renamed. */
static void write_status(const struct holder *h, const char *line) {
  char tmp[PATH_MAX], path[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/status.tmp", h->opt.dir);
  snprintf(path, sizeof path, "%s/status", h->opt.dir);
  ssize_t w;
  do w = pwrite(h->command.status_fd, line, strlen(line), 0); while (w < 0 && errno == EINTR);
  close(h->command.status_fd);
  if (w == (ssize_t)strlen(line)) rename(tmp, path);
  else unlink(tmp); /* no status: envd then sees a lost command, which is what it is */
}

/* Output complete: status first (envd trusts it), then the socket goes, then EXIT to whoever listens. */
static void finish(struct holder *h) __attribute__((noreturn));
static void finish(struct holder *h) {
  struct command *command = &h->command;
  struct live *l = &h->live;
  for (int i = 0; i < command->source_count; i++)
    if (command->sources[i].fd >= 0 && command->sources[i].fd != command->pty_fd) close(command->sources[i].fd);
  if (command->pty_fd >= 0) close(command->pty_fd);
  else if (command->stdin_fd >= 0) close(command->stdin_fd);
  close_kept_output(&h->kept);
  char line[128];
  snprintf(line, sizeof line, "%d %d %d %d %llu\n", command->exit_code, command->exit_signal, kept_truncated(&h->kept, STREAM_STDOUT),
           kept_truncated(&h->kept, STREAM_STDERR), (unsigned long long)log_end(&h->kept));
  write_status(h, line);
  remove_socket(l);
  close(l->listen_fd);
  if (l->client_fd < 0) exit(0);
  /* All output is on the lent socket (the main loop finished its last event): it goes back before EXIT. */
  if (l->mode == SEND_DIRECT || l->mode == SEND_DIRECT_WAIT) end_direct(h, DIRECT_ENDED_OFF);
  queue_exit(l, command, &h->kept);
  /* Nothing else to do: wait for the client to take the rest, then for it to go. */
  flush_client_fully(l);
  linger_until_client_closes(l, EXIT_LINGER_MS);
  exit(0);
}

/* Whether every open output has been read until empty since the reap. */
static int outputs_drained(const struct command *command) {
  for (int i = 0; i < command->source_count; i++)
    if (!command->sources[i].eof && !command->sources[i].drained) return 0;
  return 1;
}

int holder_main(int argc, char **argv) {
  struct holder *h = &holder;
  struct command *command = &h->command;
  struct live *l = &h->live;
  *command = (struct command){ .shell_pid = -1, .exit_code = -1, .pty_fd = -1, .stdin_fd = -1, .signal_fd = -1, .status_fd = -1 };
  parse_options(&h->opt, argc, argv);
  start(h);

  uint64_t grace_used = 0, after_reap = 0, last = now_ms(), accept_resume = 0;
  int polled_sources = 0;
  for (;;) {
    uint64_t t = now_ms();
    /* Grace runs only while the outputs were being read: a stalled live client does not use it up. */
    if (polled_sources) {
      after_reap += t - last;
      if (outputs_drained(command)) grace_used += t - last;
    }
    last = t;

    int open_sources = 0;
    for (int i = 0; i < command->source_count; i++) open_sources += !command->sources[i].eof;
    /* A half-written event on the lent socket is finished first: EXIT must follow all output there. */
    int direct_pending = l->client_fd >= 0 && l->mode == SEND_DIRECT && l->direct.left > 0;
    if (command->reaped && !direct_pending && (open_sources == 0 || grace_used >= GRACE_MS || after_reap >= GRACE_MAX_MS)) break;

    /* Flush first: what it frees may let buffered messages be handled before deciding whether to read more. */
    if (l->client_fd >= 0 && unsent_bytes(l) > 0) flush_client(l);
    process_messages(h);

    struct pollfd fds[7];
    int nfds = 0, i_listen = -1, i_signal = -1, i_client = -1, i_stdin = -1, i_direct = -1, i_src[2] = { -1, -1 };
    int timeout = -1;
    if (accept_resume && t >= accept_resume) accept_resume = 0;
    if (!accept_resume) { i_listen = nfds; fds[nfds++] = (struct pollfd){ l->listen_fd, POLLIN, 0 }; }
    else timeout = (int)(accept_resume - t);
    /* Output held for a client that has not said LIVE_ON yet: read it anyway once the hold runs out. */
    if (l->held_until > t && (timeout < 0 || l->held_until - t < (uint64_t)timeout)) timeout = (int)(l->held_until - t);
    if (!command->reaped) { i_signal = nfds; fds[nfds++] = (struct pollfd){ command->signal_fd, POLLIN, 0 }; }
    int reading = !output_held(h);
    polled_sources = 0;
    for (int i = 0; i < command->source_count; i++) {
      if (command->sources[i].eof || !reading) continue;
      i_src[i] = nfds;
      fds[nfds++] = (struct pollfd){ command->sources[i].fd, POLLIN, 0 };
      polled_sources = command->reaped;
    }
    if (polled_sources) {
      /* Outputs not yet read until empty are read at once, readable or not: poll cannot tell a pty's flip buffers. */
      int left = outputs_drained(command) ? (int)(GRACE_MS - grace_used) : 0;
      if (left > (int)(GRACE_MAX_MS - after_reap)) left = (int)(GRACE_MAX_MS - after_reap);
      if (timeout < 0 || left < timeout) timeout = left;
    }
    if (l->stdin_write.active) { i_stdin = nfds; fds[nfds++] = (struct pollfd){ command->stdin_fd, POLLOUT, 0 }; }
    if (direct_pending) { i_direct = nfds; fds[nfds++] = (struct pollfd){ l->direct.fd, POLLOUT, 0 }; }
    if (l->client_fd >= 0) {
      short events = 0;
      if (reading_client(l)) events |= POLLIN;
      if (unsent_bytes(l) > 0) events |= POLLOUT;
      i_client = nfds;
      fds[nfds++] = (struct pollfd){ l->client_fd, events, 0 };
    }

    if (poll(fds, (nfds_t)nfds, timeout) < 0) {
      if (errno == EINTR) continue;
      /* Cannot happen with valid fds; avoid a hot loop if it ever does. */
      struct timespec ts = { 0, 10 * 1000 * 1000 };
      nanosleep(&ts, NULL);
      continue;
    }

    for (int i = 0; i < command->source_count; i++) {
      struct source *s = &command->sources[i];
      if (i_src[i] < 0 || !(fds[i_src[i]].revents || (command->reaped && !s->drained))) continue;
      /* Re-checked per source: two chunks in one round must not push the ring past its bound. */
      if (output_held(h)) break;
      int got = read_source(h, s);
      if (command->reaped && (got == READ_EMPTY || got == READ_END)) s->drained = 1;
    }
    /* After the output of the same round, so what the shell printed last usually precedes REAPED (not a promise). */
    if (i_signal >= 0 && fds[i_signal].revents) reap(h);
    if (i_stdin >= 0 && fds[i_stdin].revents && l->stdin_write.active) continue_stdin(h);
    /* Re-checked: a message handled above may have given the socket back already. */
    if (i_direct >= 0 && fds[i_direct].revents && l->mode == SEND_DIRECT && l->direct.left > 0) direct_written(h, direct_flush(&l->direct));
    if (i_client >= 0 && l->client_fd >= 0) {
      short re = fds[i_client].revents;
      if (re & POLLOUT) flush_client(l);
      if (l->client_fd >= 0 && (re & POLLIN)) read_client(l);
      else if (l->client_fd >= 0 && (re & (POLLHUP | POLLERR | POLLNVAL))) close_client(l);
    }
    if (i_listen >= 0 && fds[i_listen].revents && accept_client(l, &accept_resume)) queue_hello(l, command, &h->kept);
  }
  finish(h);
}
