/* stdin-write.c — a STDIN being written to the command (stdin-write.h). */
#define _GNU_SOURCE
#include "stdin-write.h"

#include <errno.h>
#include <unistd.h>

int stdin_write_continue(struct stdin_write *w, struct command *c) {
  while (w->left > 0) {
    ssize_t n = write(c->stdin_fd, w->next, w->left);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return STDIN_WAITING; /* the command does not read: wait for POLLOUT */
      /* EPIPE (nobody reads the pipe) or EIO (nobody holds the pty): the bytes have nowhere to go. */
      if (c->pty_fd < 0) {
        close(c->stdin_fd);
        c->stdin_fd = -1;
        c->stdin_closed = 1;
      }
      w->active = 0;
      return STDIN_GONE;
    }
    w->next += n;
    w->left -= (size_t)n;
  }
  w->active = 0;
  return STDIN_WRITTEN;
}

int stdin_write_start(struct stdin_write *w, struct command *c, uint32_t id, const unsigned char *bytes, size_t n) {
  *w = (struct stdin_write){ .active = 1, .id = id, .next = bytes, .left = n };
  return stdin_write_continue(w, c);
}
