/*
 * live.h — the live channel (docs/holder-protocol.md, "Live channel"): the
 * holder's listening socket, the one client (envd) connected to it, the
 * bounded ring of what the holder has not yet been able to send it, and the
 * buffer of what it sent. What the messages say is outgoing.h's and
 * incoming.h's; this unit only moves them.
 *
 * Two things live and die with the client: the socket it lent (direct.h) and
 * a STDIN of its still being written (stdin-write.h), whose bytes stay in the
 * input buffer. close_client drops both with it.
 */
#ifndef ENVD_LIVE_H
#define ENVD_LIVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "direct.h"
#include "sizes.h" /* RING_CAP, IN_BUF, LIVE_HIGH */
#include "stdin-write.h"

/*
 * What a LIVE client gets: nothing (LIVE off), DATA, or TEXT; or, while its stream client's socket is lent
 * (direct.h), nothing yet (DIRECT_WAIT: envd still writes what it has) and then events on that socket
 * (DIRECT). One state, so LIVE_OFF cannot leave TEXT or the socket on.
 */
enum { SEND_NOTHING = 0, SEND_DATA, SEND_TEXT, SEND_DIRECT_WAIT, SEND_DIRECT };

struct live {
  int listen_fd;
  int client_fd; /* -1: no client */
  int mode;      /* SEND_* */
  /*
   * --hold-output MS: no output is read until this monotonic time (ms), unless the first client says LIVE_ON
   * or LIVE_OFF (or goes) first. envd starts a streamed command so: its stream client gets every byte, even
   * past the output cap, however late its LIVE_ON comes; and an envd that never says it (it died) does not
   * block the command for good. 0: not holding.
   */
  uint64_t held_until;
  struct direct direct;           /* the client's lent socket, while mode is SEND_DIRECT_WAIT or SEND_DIRECT */
  struct stdin_write stdin_write; /* a STDIN of the client's being written: its bytes are in `in` */
  char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  int sock_created;
  unsigned char ring[RING_CAP]; /* unsent bytes for the client */
  size_t ring_head, ring_len;
  unsigned char in[IN_BUF]; /* the client's messages not yet handled */
  size_t in_start, in_len;
};

/* Creates and listens on <dir>/sock, holding output `hold_output_ms` (0: not); fails the holder on error. */
void listen_socket(struct live *l, const char *dir, uint64_t hold_output_ms);
/* Removes the socket (before the holder exits). */
void remove_socket(struct live *l);

/* Takes a waiting connection (the newest client wins): 1 when it did; sets *accept_resume when out of fds or memory. */
int accept_client(struct live *l, uint64_t *accept_resume);
/* Drops the client, its unsent bytes, the socket it lent and the rest of its STDIN. */
void close_client(struct live *l);
/* Sends what the socket takes now; never waits. */
void flush_client(struct live *l);
/* Sends everything left, waiting as long as the client reads: the holder's last act but one. */
void flush_client_fully(struct live *l);
/*
 * The last: says EOF to the client and waits (at most `max_ms`) until it
 * closes its end, reading and dropping what it still sends. A holder that
 * exited first would make envd's next write fail with EPIPE, and Node drops a
 * socket's unread bytes (EXIT among them) with it.
 */
void linger_until_client_closes(struct live *l, int max_ms);
/* Reads what the client sent into the input buffer; closes the client at EOF or on error. */
void read_client(struct live *l);
/*
 * The next whole message in the input buffer, taken out of it (its payload stays in place until the buffer
 * is next read into): 1, or 0 when none is whole yet, or -1 when its length is over MAX_IN_PAYLOAD.
 */
int next_message(struct live *l, int *type, const unsigned char **payload, uint32_t *len);

/* Queues one message of two parts; a client that would overflow the ring is dropped. */
void queue(struct live *l, int type, const void *a, size_t alen, const void *b, size_t blen);
/* Unsent bytes for the client. */
size_t unsent_bytes(const struct live *l);
/* Room left in the ring. */
size_t ring_room(const struct live *l);
/* Whether the client's messages may be read (no stdin write pending, the client not behind). */
int reading_client(const struct live *l);

#endif
