/*
 * incoming.h — envd's messages to the holder on the live channel
 * (docs/holder-protocol.md, "Live channel"; src/holder/protocol.ts encodes
 * them): LIVE_ON and LIVE_OFF, the lent socket's DIRECT_*, STDIN, STDIN_EOF
 * and RESIZE, each checked and answered.
 */
#ifndef ENVD_INCOMING_H
#define ENVD_INCOMING_H

struct holder;

enum { MSG_LIVE_ON = 0x01, MSG_LIVE_OFF = 0x02, MSG_STDIN = 0x03, MSG_STDIN_EOF = 0x04, MSG_RESIZE = 0x05,
       MSG_DIRECT_ON = 0x06, MSG_DIRECT_GO = 0x07, MSG_DIRECT_OFF = 0x08, MSG_DIRECT_PING = 0x09 };

/* Handles the whole messages buffered, stopping while a stdin write is pending or the client is behind; a bad one closes the client. */
void process_messages(struct holder *h);
/* A STDIN being written to the command: continued on POLLOUT of its stdin, ACKed once it ends. */
void continue_stdin(struct holder *h);

#endif
