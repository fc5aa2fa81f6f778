/*
 * splice-pump.h — one forwarded TCP connection's two directions, copied by
 * splice(2) through a pipe: the bytes move between the sockets inside the
 * kernel, never through a user buffer (the `--forward` job, forward.h).
 *
 * Each direction drains its pipe into the destination before it reads more,
 * so a pipe holds bytes only while the destination's socket buffer is full.
 * An empty direction owns no pipe: it borrows one from the pump's spare pool
 * for a read and gives it back once drained, so an idle connection costs two
 * descriptors, its sockets. All directions together hold at most `limit`
 * bytes in pipes; past it no direction reads until the total is back under
 * half (pump_starved says which wait).
 */
#ifndef ENVD_SPLICE_PUMP_H
#define ENVD_SPLICE_PUMP_H

#include <stddef.h>

/* Spare pipes kept open between reads; more are closed when they empty. */
#define PUMP_SPARE_PIPES 16
/* What one pipe may hold (F_SETPIPE_SZ; the kernel's default of 64 KiB where that fails). */
#define PUMP_PIPE_BYTES (1024 * 1024)

struct pump {
  size_t held, limit;
  int spare[PUMP_SPARE_PIPES][2];
  int spares;
  /* Set when a direction stopped for the limit: the caller runs every starved connection again once it is lifted. */
  int starved;
};

/* One direction: bytes read from `from` go to `to`; a read's end becomes shutdown(to, SHUT_WR). */
struct direction {
  int from, to;
  int pipe[2]; /* -1 while it holds nothing */
  size_t in_pipe;
  int ended;   /* `from` sent its FIN */
  int shut;    /* ... and `to` was given one */
  int starved; /* stopped for the pump's limit */
};

enum { DIRECTION_WAIT, DIRECTION_DONE, DIRECTION_FAILED };

void pump_init(struct pump *p, size_t limit);
void direction_init(struct direction *d, int from, int to);
/* Moves what can move now; DIRECTION_DONE once the end is passed on, DIRECTION_FAILED on a socket error (errno). */
int direction_move(struct pump *p, struct direction *d);
/* Gives a direction's pipe and what it held back (the connection is closing). */
void direction_release(struct pump *p, struct direction *d);
/* Whether the limit has been lifted since a direction starved (clears the flag). */
int pump_unstarved(struct pump *p);

#endif
