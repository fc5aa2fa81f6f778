/*
 * direct.h — live output written by the holder straight to a stream client's
 * socket (docs/holder-protocol.md, "Direct output").
 *
 * Through envd, every byte of a busy command's output crossed a unix socket
 * to envd and was copied again into the client's TCP socket: two more kernel
 * copies, a wakeup of envd and its event loop per event. With one client that
 * has caught up, envd lends the holder that client's socket (the holder takes
 * a duplicate of envd's fd with pidfd_getfd) and the holder writes the same
 * event bytes envd would, framed as the HTTP chunks of envd's response. envd
 * writes nothing to the socket meanwhile and still reads it, so a client that
 * leaves is noticed as before.
 */
#ifndef ENVD_DIRECT_H
#define ENVD_DIRECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sizes.h" /* DIRECT_READ, DIRECT_TEXT_CAP, DIRECT_BUF */

/* The lent socket and the event under way on it. */
struct direct {
  int fd;      /* the client's socket, or -1 */
  int chunked; /* envd's response uses chunked transfer coding: each event is one chunk */
  int closing; /* DIRECT_OFF came while an event was half written: the socket goes back once it is out */
  const unsigned char *next;
  size_t left; /* bytes of the current event not yet written */
  unsigned char buf[DIRECT_BUF];
};

enum { DIRECT_TAKEN = 0, DIRECT_NOT_ALLOWED = -1, DIRECT_GONE = -2 };

/*
 * DIRECT_ON: takes fd `fd` of process `pid` (envd) if it is still the socket of `inode`. DIRECT_NOT_ALLOWED:
 * this holder may not take envd's fds at all; DIRECT_GONE: that client is leaving.
 */
int direct_take(struct direct *d, pid_t pid, int fd, uint64_t inode, int chunked);
/* Drops the socket without a word (given back, LIVE_OFF, the link gone). */
void direct_close(struct direct *d);

/* Where json_text may write the text of the next event (DIRECT_TEXT_CAP bytes). */
unsigned char *direct_text(struct direct *d);
/*
 * Frames the text of length `len` at direct_text() as the next event of `stream`, with the SSE id of the
 * position after it (the text offsets of both streams), and writes what the socket takes: as direct_flush.
 */
int direct_send(struct direct *d, int stream, size_t len, uint64_t out_offset, uint64_t err_offset);
/* DIRECT_PING: a keep-alive comment, written as direct_send writes an event. */
int direct_ping(struct direct *d);
/* Writes what the socket takes of the event under way: 1 when it is out, 0 when the rest waits for POLLOUT, -1 on error. */
int direct_flush(struct direct *d);

#endif
