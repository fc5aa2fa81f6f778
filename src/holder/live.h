/*
 * live.h — the live channel (docs/holder-protocol.md, "Live channel"): the
 * holder's listening socket, the one client (envd) connected to it, the
 * messages it sends, and the bounded ring of what the holder has not yet
 * been able to send it.
 */
#ifndef ENVD_LIVE_H
#define ENVD_LIVE_H

#include <stddef.h>
#include <stdint.h>

#define PROTOCOL_VERSION 4
#define MAX_IN_PAYLOAD 65536   /* largest payload envd may send */
#define LIVE_HIGH (256 * 1024) /* unsent bytes above which output is no longer read (LIVE on) */
#define DATA_HEADER 22         /* type, length, stream, logEnd, stream offset */
#define TEXT_HEADER 17         /* stream, logEnd, text offset: in front of a TEXT's text */
#define TEXT_MAX 65536         /* largest TEXT text after its header: envd reads 64 KiB at a time */
#define CHUNK 65536            /* one read(2) from the command */

enum { MSG_LIVE_ON = 0x01, MSG_LIVE_OFF = 0x02, MSG_STDIN = 0x03, MSG_STDIN_EOF = 0x04, MSG_RESIZE = 0x05,
       MSG_DIRECT_ON = 0x06, MSG_DIRECT_GO = 0x07, MSG_DIRECT_OFF = 0x08, MSG_DIRECT_PING = 0x09 };
enum { MSG_HELLO = 0x80, MSG_SYNC = 0x81, MSG_DATA = 0x82, MSG_ACK = 0x83, MSG_REAPED = 0x84, MSG_EXIT = 0x85, MSG_TEXT = 0x86,
       MSG_DIRECT_READY = 0x87, MSG_DIRECT_ENDED = 0x88 };

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
};
extern struct live live;

/* Creates and listens on <dir>/sock; fails the holder on error. */
void listen_socket(void);
/* Removes the socket (before the holder exits, or when it fails). */
void remove_socket(void);

/* Takes a waiting connection (the newest client wins); sets *accept_resume when out of fds or memory. */
void accept_client(uint64_t *accept_resume);
void close_client(void);
/* Sends what the socket takes now; never waits. */
void flush_client(void);
/* Sends everything left, waiting as long as the client reads: the holder's last act but one. */
void flush_client_fully(void);
/*
 * The last: says EOF to the client and waits (at most `max_ms`) until it
 * closes its end, reading and dropping what it still sends. A holder that
 * exited first would make envd's next write fail with EPIPE, and Node drops a
 * socket's unread bytes (EXIT among them) with it.
 */
void linger_until_client_closes(int max_ms);
void read_client(void);
/* Handles the whole messages buffered, stopping while a stdin write is pending or the client is behind. */
void process_messages(void);

/* Unsent bytes for the client. */
size_t unsent_bytes(void);
/* Room left in the ring. */
size_t ring_room(void);
/* Whether the client's messages may be read (no stdin write pending, the client not behind). */
int reading_client(void);
/* A STDIN being written to the command: continued on POLLOUT of stdin_fd. */
int stdin_write_pending(void);
void write_pending_stdin(void);

/* Queues one message of two parts; a client that would overflow the ring is dropped. */
void queue(int type, const void *a, size_t alen, const void *b, size_t blen);
/* TEXT: its text is built in place at text_buffer(); `len` is its length, `offset` text_offset() after it (output.h). */
unsigned char *text_buffer(void);
void queue_text(int stream, size_t len, uint64_t offset);
void queue_reaped(void);
void queue_exit(void);
void queue_direct_ended(int reason);

#endif
