/*
 * outgoing.h — the messages the holder sends envd on the live channel
 * (docs/holder-protocol.md, "Live channel"; src/holder/protocol.ts decodes
 * them), each payload laid out here and nowhere else. They go into the ring
 * (live.h); a client that would overflow it is dropped.
 */
#ifndef ENVD_OUTGOING_H
#define ENVD_OUTGOING_H

#include <stddef.h>
#include <stdint.h>

#include "command.h"
#include "kept.h"
#include "live.h"

#define PROTOCOL_VERSION 4

enum { MSG_HELLO = 0x80, MSG_SYNC = 0x81, MSG_DATA = 0x82, MSG_ACK = 0x83, MSG_REAPED = 0x84, MSG_EXIT = 0x85, MSG_TEXT = 0x86,
       MSG_DIRECT_READY = 0x87, MSG_DIRECT_ENDED = 0x88 };
enum { ACK_OK = 0, ACK_NO_STDIN = 1, ACK_STDIN_CLOSED = 2, ACK_NOT_PTY = 3 };
enum { DIRECT_ENDED_OFF = 0, DIRECT_ENDED_REFUSED = 1, DIRECT_ENDED_FAILED = 2 };

/* The first message to a new client: the command's state and the log's end. */
void queue_hello(struct live *l, const struct command *c, const struct kept *k);
/* LIVE_ON's answer: where live output starts in the log and in each stream (`offsets[1]`, `offsets[2]`). */
void queue_sync(struct live *l, uint64_t log_end, const uint64_t offsets[3]);
void queue_ack(struct live *l, uint32_t id, int status);
/* A read as it came, kept up to `log_end`, the stream at `offset` after it. */
void queue_data(struct live *l, int stream, uint64_t log_end, uint64_t offset, const unsigned char *bytes, size_t n);
/* TEXT: its header is written into the TEXT_HEADER bytes in front of `text` (len bytes); `offset` is the text offset after it. */
void queue_text(struct live *l, int stream, uint64_t log_end, uint64_t offset, unsigned char *text, size_t len);
void queue_reaped(struct live *l, const struct command *c);
void queue_exit(struct live *l, const struct command *c, const struct kept *k);
void queue_direct_ready(struct live *l);
/* Gives the lent socket back (envd may write to it from DIRECT_ENDED on), with the text offsets it reached. */
void queue_direct_ended(struct live *l, uint64_t log_end, int reason, uint64_t out_offset, uint64_t err_offset);

#endif
