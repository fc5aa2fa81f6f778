/* live.c — the live channel (live.h). */
#define _GNU_SOURCE
#include "live.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fail.h"
#include "util.h"
#include "wire.h"

#define ACCEPT_PAUSE_MS 100 /* back-off after accept fails for lack of fds or memory */

void listen_socket(struct live *l, const char *dir, uint64_t hold_output_ms) {
  l->listen_fd = l->client_fd = -1;
  l->mode = SEND_NOTHING;
  l->direct.fd = -1;
  l->held_until = hold_output_ms ? now_ms() + hold_output_ms : 0;
  if (snprintf(l->sock_path, sizeof l->sock_path, "%s/sock", dir) >= (int)sizeof l->sock_path)
    fail("socket path %s/sock is longer than %zu bytes", dir, sizeof l->sock_path - 1);
  l->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->listen_fd < 0) fail("socket: %s", strerror(errno));
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, l->sock_path, strlen(l->sock_path));
  if (bind(l->listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0) fail("cannot bind %s: %s", l->sock_path, strerror(errno));
  l->sock_created = 1;
  fail_unlinks(l->sock_path);
  if (listen(l->listen_fd, 4) < 0) fail("listen: %s", strerror(errno));
}

void remove_socket(struct live *l) {
  if (l->sock_created) unlink(l->sock_path);
  l->sock_created = 0;
  fail_unlinks(NULL);
}

size_t unsent_bytes(const struct live *l) { return l->ring_len; }
size_t ring_room(const struct live *l) { return RING_CAP - l->ring_len; }
int reading_client(const struct live *l) { return !l->stdin_write.active && l->ring_len <= LIVE_HIGH; }

void close_client(struct live *l) {
  if (l->client_fd < 0) return;
  close(l->client_fd);
  l->client_fd = -1;
  l->mode = SEND_NOTHING;
  l->held_until = 0; /* the client that was to follow the output is gone: nobody waits for it any more */
  direct_close(&l->direct); /* a lent socket goes with envd: its client must see the end when envd's copy closes */
  l->ring_head = l->ring_len = 0; /* its unsent bytes go with it */
  l->in_start = l->in_len = 0;
  l->stdin_write.active = 0; /* the rest of a half-written STDIN is dropped: nobody is left to ACK it */
}

static void ring_copy(struct live *l, const void *src, size_t n) {
  size_t tail = (l->ring_head + l->ring_len) % RING_CAP;
  size_t first = n < RING_CAP - tail ? n : RING_CAP - tail;
  memcpy(l->ring + tail, src, first);
  memcpy(l->ring, (const unsigned char *)src + first, n - first);
  l->ring_len += n;
}

void queue(struct live *l, int type, const void *a, size_t alen, const void *b, size_t blen) {
  if (l->client_fd < 0) return;
  if (MESSAGE_HEADER + alen + blen > RING_CAP - l->ring_len) { close_client(l); return; }
  unsigned char head[MESSAGE_HEADER];
  head[0] = (unsigned char)type;
  put_u32(head + 1, (uint32_t)(alen + blen));
  ring_copy(l, head, MESSAGE_HEADER);
  if (alen) ring_copy(l, a, alen);
  if (blen) ring_copy(l, b, blen);
}

void flush_client(struct live *l) {
  while (l->client_fd >= 0 && l->ring_len > 0) {
    struct iovec iov[2];
    size_t first = l->ring_len < RING_CAP - l->ring_head ? l->ring_len : RING_CAP - l->ring_head;
    iov[0].iov_base = l->ring + l->ring_head;
    iov[0].iov_len = first;
    iov[1].iov_base = l->ring;
    iov[1].iov_len = l->ring_len - first;
    ssize_t w = writev(l->client_fd, iov, iov[1].iov_len ? 2 : 1);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_client(l); /* EPIPE, ECONNRESET: SIGPIPE is ignored, so this is all a vanished envd costs */
      return;
    }
    l->ring_head = (l->ring_head + (size_t)w) % RING_CAP;
    l->ring_len -= (size_t)w;
  }
  /* Restart at the front when empty, so a client that keeps up only ever touches the first pages. */
  if (l->ring_len == 0) l->ring_head = 0;
}

void flush_client_fully(struct live *l) {
  while (l->client_fd >= 0 && l->ring_len > 0) {
    flush_client(l);
    if (l->client_fd < 0 || l->ring_len == 0) return;
    struct pollfd p = { l->client_fd, POLLOUT, 0 };
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
  }
}

void linger_until_client_closes(struct live *l, int max_ms) {
  if (l->client_fd < 0 || shutdown(l->client_fd, SHUT_WR) < 0) return;
  for (uint64_t deadline = now_ms() + (uint64_t)max_ms, t; (t = now_ms()) < deadline;) {
    struct pollfd p = { l->client_fd, POLLIN, 0 };
    int r = poll(&p, 1, (int)(deadline - t));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    ssize_t n = read(l->client_fd, l->in, sizeof l->in);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return;
  }
}

int next_message(struct live *l, int *type, const unsigned char **payload, uint32_t *len) {
  size_t avail = l->in_len - l->in_start;
  if (avail < MESSAGE_HEADER) return 0;
  const unsigned char *m = l->in + l->in_start;
  uint32_t n = get_u32(m + 1);
  if (n > MAX_IN_PAYLOAD) return -1;
  if (avail < MESSAGE_HEADER + (size_t)n) return 0;
  /* Taken before it is handled: a pending STDIN write keeps pointing into `in`, which is not compacted until it ends. */
  l->in_start += MESSAGE_HEADER + (size_t)n;
  *type = m[0];
  *payload = m + MESSAGE_HEADER;
  *len = n;
  return 1;
}

void read_client(struct live *l) {
  if (l->in_start > 0) {
    memmove(l->in, l->in + l->in_start, l->in_len - l->in_start);
    l->in_len -= l->in_start;
    l->in_start = 0;
  }
  /* Full of whole messages not yet handled (the client was behind): handle them first, read later. */
  if (l->in_len == sizeof l->in) return;
  ssize_t n = read(l->client_fd, l->in + l->in_len, sizeof l->in - l->in_len);
  if (n > 0) l->in_len += (size_t)n;
  else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) close_client(l);
}

int accept_client(struct live *l, uint64_t *accept_resume) {
  int fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return 0;
    /* EMFILE/ENFILE/ENOMEM: the connection stays queued; retry later instead of spinning on a readable socket. */
    *accept_resume = now_ms() + ACCEPT_PAUSE_MS;
    return 0;
  }
  close_client(l); /* one client at a time: the newest wins */
  l->client_fd = fd;
  return 1;
}
