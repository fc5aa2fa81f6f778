/* incoming.c — envd's messages to the holder (incoming.h). */
#define _GNU_SOURCE
#include "incoming.h"

#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "direct.h"
#include "holder.h"
#include "live.h"
#include "outgoing.h"
#include "output.h"
#include "stdin-write.h"
#include "wire.h"

enum { LIVE_FLAG_TEXT = 0x01 };

/* The ACK of a STDIN write that ended (written, or nowhere to go); nothing while it waits for POLLOUT. */
static void ack_stdin_write(struct holder *h, int result) {
  if (result == STDIN_WRITTEN) queue_ack(&h->live, h->live.stdin_write.id, ACK_OK);
  else if (result == STDIN_GONE) queue_ack(&h->live, h->live.stdin_write.id, ACK_STDIN_CLOSED);
}

void continue_stdin(struct holder *h) { ack_stdin_write(h, stdin_write_continue(&h->live.stdin_write, &h->command)); }

static void start_stdin_write(struct holder *h, uint32_t id, const unsigned char *bytes, size_t n) {
  ack_stdin_write(h, stdin_write_start(&h->live.stdin_write, &h->command, id, bytes, n));
}

/* DIRECT_ON: only a caught-up TEXT client is lent one. Not allowed: envd stops asking; gone: that client is leaving. */
static void start_direct(struct holder *h, pid_t pid, int fd, uint64_t inode, int chunked) {
  struct live *l = &h->live;
  int taken = l->mode != SEND_TEXT ? DIRECT_GONE : direct_take(&l->direct, pid, fd, inode, chunked);
  if (taken != DIRECT_TAKEN) {
    int reason = taken == DIRECT_NOT_ALLOWED ? DIRECT_ENDED_REFUSED : DIRECT_ENDED_FAILED;
    queue_direct_ended(l, log_end(&h->kept), reason, text_offset(h, STREAM_STDOUT), text_offset(h, STREAM_STDERR));
    return;
  }
  /* No output is read until GO: envd first writes the TEXT sent before READY. */
  l->mode = SEND_DIRECT_WAIT;
  queue_direct_ready(l);
}

/* DIRECT_OFF: the socket goes back once the event under way is out. */
static void stop_direct(struct holder *h) {
  struct live *l = &h->live;
  if (l->mode == SEND_DIRECT && l->direct.left > 0) l->direct.closing = 1;
  else if (l->mode == SEND_DIRECT || l->mode == SEND_DIRECT_WAIT) end_direct(h, DIRECT_ENDED_OFF);
}

/* Handles one message; returns -1 when the client must be closed for it. */
static int handle_message(struct holder *h, int type, const unsigned char *p, uint32_t len) {
  static const unsigned char veof = 0x04; /* ^D, the default VEOF */
  struct live *l = &h->live;
  struct command *c = &h->command;
  switch (type) {
  case MSG_LIVE_ON: {
    /* No payload (protocol 1), or one byte of flags: TEXT instead of DATA. */
    if (len > 1 || (len == 1 && (p[0] & ~LIVE_FLAG_TEXT))) return -1;
    direct_close(&l->direct);
    l->held_until = 0;
    l->mode = len == 1 && (p[0] & LIVE_FLAG_TEXT) ? SEND_TEXT : SEND_DATA;
    if (l->mode == SEND_TEXT) seed_text_decoders(&h->output);
    /* Where live output starts: in the log, and in each stream (what a TEXT client's decoders have not taken yet comes live). */
    uint64_t offsets[3] = { 0 };
    for (int st = STREAM_STDOUT; st <= STREAM_STDERR; st++)
      offsets[st] = l->mode == SEND_TEXT ? text_offset(h, st) : output_offset(&h->kept, st);
    queue_sync(l, log_end(&h->kept), offsets);
    return 0;
  }
  case MSG_LIVE_OFF:
    if (len != 0) return -1;
    l->held_until = 0;
    l->mode = SEND_NOTHING;
    direct_close(&l->direct); /* nobody follows the output any more: envd has forgotten the lent socket too */
    return 0;
  case MSG_DIRECT_ON:
    /* envd's pid, the fd of the client's socket in envd, that socket's inode, flags (bit 0: chunked). */
    if (len != 17) return -1;
    start_direct(h, (pid_t)get_u32(p), (int)get_u32(p + 4), get_u64(p + 8), p[16] & 1);
    return 0;
  case MSG_DIRECT_GO:
    if (len != 0) return -1;
    if (l->mode == SEND_DIRECT_WAIT) l->mode = SEND_DIRECT;
    return 0;
  case MSG_DIRECT_OFF:
    /* Late (the socket already went back after an error) is not an error: that DIRECT_ENDED answers it. */
    if (len != 0) return -1;
    stop_direct(h);
    return 0;
  case MSG_DIRECT_PING:
    /* envd's keep-alive, which it cannot write itself now; output on its way keeps the connection alive anyway. */
    if (len != 0) return -1;
    if (l->mode == SEND_DIRECT && l->direct.left == 0) direct_written(h, direct_ping(&l->direct));
    return 0;
  case MSG_STDIN: {
    if (len < 4) return -1;
    uint32_t id = get_u32(p);
    if (c->stdin_fd < 0 && !c->stdin_closed) queue_ack(l, id, ACK_NO_STDIN);
    else if (c->stdin_closed) queue_ack(l, id, ACK_STDIN_CLOSED);
    else start_stdin_write(h, id, p + 4, len - 4);
    return 0;
  }
  case MSG_STDIN_EOF: {
    if (len != 4) return -1;
    uint32_t id = get_u32(p);
    if (c->stdin_fd < 0 && !c->stdin_closed) queue_ack(l, id, ACK_NO_STDIN);
    else if (c->pty_fd >= 0) start_stdin_write(h, id, &veof, 1); /* a terminal stays writable after ^D */
    else if (c->stdin_closed) queue_ack(l, id, ACK_OK);
    else {
      close(c->stdin_fd);
      c->stdin_fd = -1;
      c->stdin_closed = 1;
      queue_ack(l, id, ACK_OK);
    }
    return 0;
  }
  case MSG_RESIZE: {
    if (len != 8) return -1;
    uint32_t id = get_u32(p);
    if (c->pty_fd < 0) {
      queue_ack(l, id, ACK_NOT_PTY);
      return 0;
    }
    struct winsize ws = { .ws_row = get_u16(p + 6), .ws_col = get_u16(p + 4) };
    /* The kernel sends SIGWINCH to the terminal's foreground group; on a master this cannot fail short of EBADF. */
    (void)ioctl(c->pty_fd, TIOCSWINSZ, &ws);
    queue_ack(l, id, ACK_OK);
    return 0;
  }
  default:
    return -1;
  }
}

void process_messages(struct holder *h) {
  struct live *l = &h->live;
  while (l->client_fd >= 0 && reading_client(l)) {
    int type;
    const unsigned char *payload;
    uint32_t len;
    int got = next_message(l, &type, &payload, &len);
    if (got == 0) return;
    if (got < 0 || handle_message(h, type, payload, len) < 0) {
      close_client(l);
      return;
    }
  }
}
