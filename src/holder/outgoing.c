/* outgoing.c — the holder's messages to envd (outgoing.h). */
#include "outgoing.h"

#include "wire.h"

void queue_hello(struct live *l, const struct command *c, const struct kept *k) {
  unsigned char p[25];
  put_u16(p, PROTOCOL_VERSION);
  put_u32(p + 2, (uint32_t)c->shell_pid);
  p[6] = (unsigned char)c->reaped;
  put_u32(p + 7, (uint32_t)c->exit_code);
  put_u32(p + 11, (uint32_t)c->exit_signal);
  p[15] = (unsigned char)kept_truncated(k, STREAM_STDOUT);
  p[16] = (unsigned char)kept_truncated(k, STREAM_STDERR);
  put_u64(p + 17, log_end(k));
  queue(l, MSG_HELLO, p, sizeof p, NULL, 0);
}

void queue_sync(struct live *l, uint64_t log_end, const uint64_t offsets[3]) {
  unsigned char p[24];
  put_u64(p, log_end);
  for (int st = STREAM_STDOUT; st <= STREAM_STDERR; st++) put_u64(p + 8 * st, offsets[st]);
  queue(l, MSG_SYNC, p, sizeof p, NULL, 0);
}

void queue_ack(struct live *l, uint32_t id, int status) {
  unsigned char p[5];
  put_u32(p, id);
  p[4] = (unsigned char)status;
  queue(l, MSG_ACK, p, sizeof p, NULL, 0);
}

void queue_data(struct live *l, int stream, uint64_t log_end, uint64_t offset, const unsigned char *bytes, size_t n) {
  unsigned char h[DATA_HEADER - MESSAGE_HEADER];
  h[0] = (unsigned char)stream;
  put_u64(h + 1, log_end);
  put_u64(h + 9, offset);
  queue(l, MSG_DATA, h, sizeof h, bytes, n);
}

void queue_text(struct live *l, int stream, uint64_t log_end, uint64_t offset, unsigned char *text, size_t len) {
  unsigned char *h = text - TEXT_HEADER;
  h[0] = (unsigned char)stream;
  put_u64(h + 1, log_end);
  put_u64(h + 9, offset);
  queue(l, MSG_TEXT, h, TEXT_HEADER + len, NULL, 0);
}

void queue_reaped(struct live *l, const struct command *c) {
  unsigned char p[8];
  put_u32(p, (uint32_t)c->exit_code);
  put_u32(p + 4, (uint32_t)c->exit_signal);
  queue(l, MSG_REAPED, p, sizeof p, NULL, 0);
}

void queue_exit(struct live *l, const struct command *c, const struct kept *k) {
  unsigned char p[18];
  put_u32(p, (uint32_t)c->exit_code);
  put_u32(p + 4, (uint32_t)c->exit_signal);
  p[8] = (unsigned char)kept_truncated(k, STREAM_STDOUT);
  p[9] = (unsigned char)kept_truncated(k, STREAM_STDERR);
  put_u64(p + 10, log_end(k));
  queue(l, MSG_EXIT, p, sizeof p, NULL, 0);
}

void queue_direct_ready(struct live *l) { queue(l, MSG_DIRECT_READY, NULL, 0, NULL, 0); }

void queue_direct_ended(struct live *l, uint64_t log_end, int reason, uint64_t out_offset, uint64_t err_offset) {
  unsigned char p[25];
  put_u64(p, log_end);
  p[8] = (unsigned char)reason;
  put_u64(p + 9, out_offset);
  put_u64(p + 17, err_offset);
  queue(l, MSG_DIRECT_ENDED, p, sizeof p, NULL, 0);
}
