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

#include "json-text.h"

#define DIRECT_READ 61440 /* one read of the command's output while direct: it always becomes one event */
/* Room for the text of a whole read: json_text then takes every byte of it (json-text.h). */
#define DIRECT_TEXT_CAP JSON_TEXT_ROOM(DIRECT_READ)

enum { DIRECT_ENDED_OFF = 0, DIRECT_ENDED_REFUSED = 1, DIRECT_ENDED_FAILED = 2 };

/* DIRECT_ON: takes fd `fd` of process `pid` (envd) if it is still the socket of `inode`; READY or ENDED answers. */
void start_direct(pid_t pid, int fd, uint64_t inode, int chunked);
/* DIRECT_OFF: the socket goes back once the event under way is out. */
void stop_direct(void);
/* DIRECT_PING: a keep-alive comment, unless an event is under way. */
void ping_direct(void);
/* Gives the socket back now (output complete, or the event under way is out) with DIRECT_ENDED. */
void end_direct(int reason);
/* Drops the socket without a word (LIVE_OFF, the link gone). */
void direct_close(void);

/* Where json_text may write the text of the next event (DIRECT_TEXT_CAP bytes). */
unsigned char *direct_text(void);
/*
 * Frames the text of length `len` at direct_text() as the next event of `stream`, with the SSE id of the
 * position after it (text_offset of both streams), and writes what the socket takes.
 */
void send_direct(int stream, size_t len, uint64_t out_offset, uint64_t err_offset);
/* Bytes of the event under way not yet written: output waits for them. */
size_t direct_unsent(void);
/* The lent socket, for POLLOUT while an event is under way. */
int direct_fd(void);
/* Continues the event under way on POLLOUT. */
void write_direct(void);

#endif
