/* live.c — the live channel (live.h). */
#define _GNU_SOURCE
#include "live.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include "command.h"
#include "direct.h"
#include "fail.h"
#include "kept.h"
#include "options.h"
#include "output.h"
#include "util.h"
#include "wire.h"

#define ACCEPT_PAUSE_MS 100 /* back-off after accept fails for lack of fds or memory */
/*
 * The ring holds LIVE_HIGH plus what one read becomes (read only while at or
 * below LIVE_HIGH) plus small replies. A read becomes one DATA; as TEXT it
 * may grow 6 times (control characters as \u00xx), so TEXT reads are cut to
 * what the ring can take (output.c) rather than the ring sized for 6 x
 * CHUNK: a ring that wraps touches all of its pages.
 */
#define RING_CAP (LIVE_HIGH + DATA_HEADER + CHUNK + 4096)

enum { LIVE_FLAG_TEXT = 0x01 };
enum { ACK_OK = 0, ACK_NO_STDIN = 1, ACK_STDIN_CLOSED = 2, ACK_NOT_PTY = 3 };

struct live live = { .listen_fd = -1, .client_fd = -1, .mode = SEND_NOTHING, .held_until = 0 };

static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int sock_created;

static unsigned char tbuf[TEXT_HEADER + TEXT_MAX];
static unsigned char ring[RING_CAP];
static size_t ring_head, ring_len;
static unsigned char inbuf[5 + MAX_IN_PAYLOAD]; /* one whole message always fits after compaction */
static size_t in_start, in_len;
/* A STDIN (or a pty's ^D) being written: its bytes stay in inbuf, which is not touched until it completes. */
static int pend_active;
static uint32_t pend_id;
static const unsigned char *pend_ptr;
static size_t pend_left;

void listen_socket(void) {
  if (opt.hold_output_ms) live.held_until = now_ms() + opt.hold_output_ms;
  if (snprintf(sock_path, sizeof sock_path, "%s/sock", opt.dir) >= (int)sizeof sock_path)
    fail("socket path %s/sock is longer than %zu bytes", opt.dir, sizeof sock_path - 1);
  live.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (live.listen_fd < 0) fail("socket: %s", strerror(errno));
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, sock_path, strlen(sock_path));
  if (bind(live.listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0) fail("cannot bind %s: %s", sock_path, strerror(errno));
  sock_created = 1;
  if (listen(live.listen_fd, 4) < 0) fail("listen: %s", strerror(errno));
}

void remove_socket(void) {
  if (sock_created) unlink(sock_path);
  sock_created = 0;
}

size_t unsent_bytes(void) { return ring_len; }
size_t ring_room(void) { return RING_CAP - ring_len; }
int reading_client(void) { return !pend_active && ring_len <= LIVE_HIGH; }
int stdin_write_pending(void) { return pend_active; }

void close_client(void) {
  if (live.client_fd < 0) return;
  close(live.client_fd);
  live.client_fd = -1;
  live.mode = SEND_NOTHING;
  live.held_until = 0; /* the client that was to follow the output is gone: nobody waits for it any more */
  direct_close(); /* a lent socket goes with envd: its client must see the end when envd's copy closes */
  ring_head = ring_len = 0; /* its unsent bytes go with it */
  in_start = in_len = 0;
  pend_active = 0; /* the rest of a half-written STDIN is dropped: nobody is left to ACK it */
}

static void ring_copy(const void *src, size_t n) {
  size_t tail = (ring_head + ring_len) % RING_CAP;
  size_t first = n < RING_CAP - tail ? n : RING_CAP - tail;
  memcpy(ring + tail, src, first);
  memcpy(ring, (const unsigned char *)src + first, n - first);
  ring_len += n;
}

void queue(int type, const void *a, size_t alen, const void *b, size_t blen) {
  if (live.client_fd < 0) return;
  if (5 + alen + blen > RING_CAP - ring_len) { close_client(); return; }
  unsigned char head[5];
  head[0] = (unsigned char)type;
  put_u32(head + 1, (uint32_t)(alen + blen));
  ring_copy(head, 5);
  if (alen) ring_copy(a, alen);
  if (blen) ring_copy(b, blen);
}

static void queue_ack(uint32_t id, int status) {
  unsigned char p[5];
  put_u32(p, id);
  p[4] = (unsigned char)status;
  queue(MSG_ACK, p, sizeof p, NULL, 0);
}

static void queue_hello(void) {
  unsigned char p[25];
  put_u16(p, PROTOCOL_VERSION);
  put_u32(p + 2, (uint32_t)command.shell_pid);
  p[6] = (unsigned char)command.reaped;
  put_u32(p + 7, (uint32_t)command.exit_code);
  put_u32(p + 11, (uint32_t)command.exit_signal);
  p[15] = (unsigned char)kept_truncated(STREAM_STDOUT);
  p[16] = (unsigned char)kept_truncated(STREAM_STDERR);
  put_u64(p + 17, log_end());
  queue(MSG_HELLO, p, sizeof p, NULL, 0);
}

unsigned char *text_buffer(void) { return tbuf + TEXT_HEADER; }

void queue_text(int stream, size_t len, uint64_t offset) {
  tbuf[0] = (unsigned char)stream;
  put_u64(tbuf + 1, log_end());
  put_u64(tbuf + 9, offset);
  queue(MSG_TEXT, tbuf, TEXT_HEADER + len, NULL, 0);
}

void queue_reaped(void) {
  unsigned char p[8];
  put_u32(p, (uint32_t)command.exit_code);
  put_u32(p + 4, (uint32_t)command.exit_signal);
  queue(MSG_REAPED, p, sizeof p, NULL, 0);
}

void queue_exit(void) {
  unsigned char p[18];
  put_u32(p, (uint32_t)command.exit_code);
  put_u32(p + 4, (uint32_t)command.exit_signal);
  p[8] = (unsigned char)kept_truncated(STREAM_STDOUT);
  p[9] = (unsigned char)kept_truncated(STREAM_STDERR);
  put_u64(p + 10, log_end());
  queue(MSG_EXIT, p, sizeof p, NULL, 0);
}

/* Gives the lent socket back (envd may write to it from DIRECT_ENDED on); later output goes to envd as TEXT. */
void queue_direct_ended(int reason) {
  unsigned char p[25];
  put_u64(p, log_end());
  p[8] = (unsigned char)reason;
  put_u64(p + 9, text_offset(STREAM_STDOUT));
  put_u64(p + 17, text_offset(STREAM_STDERR));
  queue(MSG_DIRECT_ENDED, p, sizeof p, NULL, 0);
}

void flush_client(void) {
  while (live.client_fd >= 0 && ring_len > 0) {
    struct iovec iov[2];
    size_t first = ring_len < RING_CAP - ring_head ? ring_len : RING_CAP - ring_head;
    iov[0].iov_base = ring + ring_head;
    iov[0].iov_len = first;
    iov[1].iov_base = ring;
    iov[1].iov_len = ring_len - first;
    ssize_t w = writev(live.client_fd, iov, iov[1].iov_len ? 2 : 1);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_client(); /* EPIPE, ECONNRESET: SIGPIPE is ignored, so this is all a vanished envd costs */
      return;
    }
    ring_head = (ring_head + (size_t)w) % RING_CAP;
    ring_len -= (size_t)w;
  }
  /* Restart at the front when empty, so a client that keeps up only ever touches the first pages. */
  if (ring_len == 0) ring_head = 0;
}

void flush_client_fully(void) {
  while (live.client_fd >= 0 && ring_len > 0) {
    flush_client();
    if (live.client_fd < 0 || ring_len == 0) return;
    struct pollfd p = { live.client_fd, POLLOUT, 0 };
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
  }
}

void linger_until_client_closes(int max_ms) {
  if (live.client_fd < 0 || shutdown(live.client_fd, SHUT_WR) < 0) return;
  for (uint64_t deadline = now_ms() + (uint64_t)max_ms, t; (t = now_ms()) < deadline;) {
    struct pollfd p = { live.client_fd, POLLIN, 0 };
    int r = poll(&p, 1, (int)(deadline - t));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    ssize_t n = read(live.client_fd, inbuf, sizeof inbuf);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return;
  }
}

void write_pending_stdin(void) {
  while (pend_left > 0) {
    ssize_t w = write(command.stdin_fd, pend_ptr, pend_left);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return; /* the command does not read: wait for POLLOUT */
      /* EPIPE (nobody reads the pipe) or EIO (nobody holds the pty): the bytes have nowhere to go. */
      if (!opt.pty) {
        close(command.stdin_fd);
        command.stdin_fd = -1;
        command.stdin_closed = 1;
      }
      pend_active = 0;
      queue_ack(pend_id, ACK_STDIN_CLOSED);
      return;
    }
    pend_ptr += w;
    pend_left -= (size_t)w;
  }
  pend_active = 0;
  queue_ack(pend_id, ACK_OK);
}

static void start_write(uint32_t id, const unsigned char *bytes, size_t n) {
  pend_active = 1;
  pend_id = id;
  pend_ptr = bytes;
  pend_left = n;
  write_pending_stdin();
}

/* Handles one message; returns -1 when the client must be closed for it. */
static int handle_message(int type, const unsigned char *p, uint32_t len) {
  static const unsigned char veof = 0x04; /* ^D, the default VEOF */
  switch (type) {
  case MSG_LIVE_ON: {
    /* No payload (protocol 1), or one byte of flags: TEXT instead of DATA. */
    if (len > 1 || (len == 1 && (p[0] & ~LIVE_FLAG_TEXT))) return -1;
    direct_close();
    live.held_until = 0;
    live.mode = len == 1 && (p[0] & LIVE_FLAG_TEXT) ? SEND_TEXT : SEND_DATA;
    if (live.mode == SEND_TEXT) seed_text_decoders();
    /* Where live output starts: in the log, and in each stream (what a TEXT client's decoders have not taken yet comes live). */
    unsigned char s[24];
    put_u64(s, log_end());
    for (int st = STREAM_STDOUT; st <= STREAM_STDERR; st++)
      put_u64(s + 8 * st, live.mode == SEND_TEXT ? text_offset(st) : output_offset(st));
    queue(MSG_SYNC, s, sizeof s, NULL, 0);
    return 0;
  }
  case MSG_LIVE_OFF:
    if (len != 0) return -1;
    live.held_until = 0;
    live.mode = SEND_NOTHING;
    direct_close(); /* nobody follows the output any more: envd has forgotten the lent socket too */
    return 0;
  case MSG_DIRECT_ON:
    /* envd's pid, the fd of the client's socket in envd, that socket's inode, flags (bit 0: chunked). */
    if (len != 17) return -1;
    start_direct((pid_t)get_u32(p), (int)get_u32(p + 4), get_u64(p + 8), p[16] & 1);
    return 0;
  case MSG_DIRECT_GO:
    if (len != 0) return -1;
    if (live.mode == SEND_DIRECT_WAIT) live.mode = SEND_DIRECT;
    return 0;
  case MSG_DIRECT_OFF:
    /* Late (the socket already went back after an error) is not an error: that DIRECT_ENDED answers it. */
    if (len != 0) return -1;
    stop_direct();
    return 0;
  case MSG_DIRECT_PING:
    /* envd's keep-alive, which it cannot write itself now; output on its way keeps the connection alive anyway. */
    if (len != 0) return -1;
    ping_direct();
    return 0;
  case MSG_STDIN: {
    if (len < 4) return -1;
    uint32_t id = get_u32(p);
    if (command.stdin_fd < 0 && !command.stdin_closed) queue_ack(id, ACK_NO_STDIN);
    else if (command.stdin_closed) queue_ack(id, ACK_STDIN_CLOSED);
    else start_write(id, p + 4, len - 4);
    return 0;
  }
  case MSG_STDIN_EOF: {
    if (len != 4) return -1;
    uint32_t id = get_u32(p);
    if (command.stdin_fd < 0 && !command.stdin_closed) queue_ack(id, ACK_NO_STDIN);
    else if (opt.pty) start_write(id, &veof, 1); /* a terminal stays writable after ^D */
    else if (command.stdin_closed) queue_ack(id, ACK_OK);
    else {
      close(command.stdin_fd);
      command.stdin_fd = -1;
      command.stdin_closed = 1;
      queue_ack(id, ACK_OK);
    }
    return 0;
  }
  case MSG_RESIZE: {
    if (len != 8) return -1;
    uint32_t id = get_u32(p);
    if (!opt.pty) {
      queue_ack(id, ACK_NOT_PTY);
      return 0;
    }
    struct winsize ws = { .ws_row = get_u16(p + 6), .ws_col = get_u16(p + 4) };
    /* The kernel sends SIGWINCH to the terminal's foreground group; on a master this cannot fail short of EBADF. */
    (void)ioctl(command.pty_fd, TIOCSWINSZ, &ws);
    queue_ack(id, ACK_OK);
    return 0;
  }
  default:
    return -1;
  }
}

void process_messages(void) {
  while (live.client_fd >= 0 && reading_client()) {
    size_t avail = in_len - in_start;
    if (avail < 5) return;
    const unsigned char *m = inbuf + in_start;
    uint32_t len = get_u32(m + 1);
    if (len > MAX_IN_PAYLOAD) {
      close_client();
      return;
    }
    if (avail < 5 + (size_t)len) return;
    /* Consumed before it runs: a pending write keeps pointing into inbuf, which is not compacted until it ends. */
    in_start += 5 + (size_t)len;
    if (handle_message(m[0], m + 5, len) < 0) {
      close_client();
      return;
    }
  }
}

void read_client(void) {
  if (in_start > 0) {
    memmove(inbuf, inbuf + in_start, in_len - in_start);
    in_len -= in_start;
    in_start = 0;
  }
  /* Full of whole messages not yet handled (the client was behind): handle them first, read later. */
  if (in_len == sizeof inbuf) return;
  ssize_t n = read(live.client_fd, inbuf + in_len, sizeof inbuf - in_len);
  if (n > 0) in_len += (size_t)n;
  else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) close_client();
}

void accept_client(uint64_t *accept_resume) {
  int fd = accept4(live.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return;
    /* EMFILE/ENFILE/ENOMEM: the connection stays queued; retry later instead of spinning on a readable socket. */
    *accept_resume = now_ms() + ACCEPT_PAUSE_MS;
    return;
  }
  close_client(); /* one client at a time: the newest wins */
  live.client_fd = fd;
  queue_hello();
}
