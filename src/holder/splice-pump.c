/* splice-pump.c — a forwarded connection's directions by splice(2) (splice-pump.h). */
#define _GNU_SOURCE
#include "splice-pump.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#define SPLICE_FLAGS (SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

void pump_init(struct pump *p, size_t limit) {
  p->held = 0;
  p->limit = limit;
  p->spares = 0;
  p->starved = 0;
}

void direction_init(struct direction *d, int from, int to) {
  d->from = from;
  d->to = to;
  d->pipe[0] = d->pipe[1] = -1;
  d->in_pipe = 0;
  d->ended = d->shut = d->starved = 0;
}

static int borrow_pipe(struct pump *p, struct direction *d) {
  if (p->spares > 0) {
    p->spares--;
    d->pipe[0] = p->spare[p->spares][0];
    d->pipe[1] = p->spare[p->spares][1];
    return 0;
  }
  if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
  (void)fcntl(d->pipe[1], F_SETPIPE_SZ, PUMP_PIPE_BYTES);
  return 0;
}

/* An empty pipe goes back to the pool (or is closed when the pool is full). */
static void return_pipe(struct pump *p, struct direction *d) {
  if (d->pipe[0] < 0) return;
  if (d->in_pipe == 0 && p->spares < PUMP_SPARE_PIPES) {
    p->spare[p->spares][0] = d->pipe[0];
    p->spare[p->spares][1] = d->pipe[1];
    p->spares++;
  } else {
    close(d->pipe[0]);
    close(d->pipe[1]);
  }
  d->pipe[0] = d->pipe[1] = -1;
}

static void give_back(struct pump *p, size_t bytes) {
  size_t before = p->held;
  p->held -= bytes;
  if (before > p->limit / 2 && p->held <= p->limit / 2 && p->starved) p->starved = 2;
}

/* Drains the pipe into `to`: 1 when empty, 0 when `to` is full, -1 on an error. */
static int drain(struct pump *p, struct direction *d) {
  while (d->in_pipe > 0) {
    ssize_t n = splice(d->pipe[0], NULL, d->to, NULL, d->in_pipe, SPLICE_FLAGS);
    if (n > 0) {
      d->in_pipe -= (size_t)n;
      give_back(p, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n == 0) errno = EPIPE;
    return -1;
  }
  return_pipe(p, d);
  return 1;
}

int direction_move(struct pump *p, struct direction *d) {
  for (;;) {
    int drained = drain(p, d);
    if (drained < 0) return DIRECTION_FAILED;
    if (drained == 0) return DIRECTION_WAIT;
    if (d->ended) {
      if (!d->shut && shutdown(d->to, SHUT_WR) != 0 && errno != ENOTCONN) return DIRECTION_FAILED;
      d->shut = 1;
      return DIRECTION_DONE;
    }
    if (p->held >= p->limit) {
      d->starved = 1;
      p->starved = 1;
      return DIRECTION_WAIT;
    }
    d->starved = 0;
    if (borrow_pipe(p, d) != 0) return DIRECTION_FAILED;
    size_t room = p->limit - p->held;
    if (room > PUMP_PIPE_BYTES) room = PUMP_PIPE_BYTES;
    ssize_t n = splice(d->from, NULL, d->pipe[1], NULL, room, SPLICE_FLAGS);
    if (n > 0) {
      d->in_pipe = (size_t)n;
      p->held += (size_t)n;
      continue;
    }
    return_pipe(p, d);
    if (n == 0) {
      d->ended = 1;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return DIRECTION_WAIT;
    return DIRECTION_FAILED;
  }
}

void direction_release(struct pump *p, struct direction *d) {
  if (d->in_pipe > 0) give_back(p, d->in_pipe);
  d->in_pipe = 0;
  if (d->pipe[0] >= 0) {
    close(d->pipe[0]);
    close(d->pipe[1]);
  }
  d->pipe[0] = d->pipe[1] = -1;
}

int pump_unstarved(struct pump *p) {
  if (p->starved != 2) return 0;
  p->starved = 0;
  return 1;
}
