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
 * leaves is noticed as before. Included by envd-holder.c only.
 */
#ifndef ENVD_DIRECT_H
#define ENVD_DIRECT_H

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "json-text.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define DIRECT_READ 61440 /* one read of the command's output while direct: it always becomes one event */
#define DIRECT_HEAD 64    /* room for the chunk size line and the event's prefix in front of the text */
#define DIRECT_TAIL 8     /* the event's suffix and the chunk's CRLF */
/* Room for the text of a whole read: json_text then takes every byte of it (json-text.h). */
#define DIRECT_TEXT_CAP JSON_TEXT_ROOM(DIRECT_READ)

/* What envd writes around a TEXT (src/commands/sse.ts): the holder writes exactly the same event. */
static const char direct_prefix[3][48] = {
  "",
  "event: stdout\ndata: {\"stream\":\"stdout\",\"data\":\"",
  "event: stderr\ndata: {\"stream\":\"stderr\",\"data\":\"",
};
static const char direct_suffix[] = "\"}\n\n";

static struct {
  int fd;      /* the client's socket, or -1 */
  int chunked; /* envd's response uses chunked transfer coding: each event is one chunk */
  int closing; /* DIRECT_OFF came while an event was half written: the socket goes back once it is out */
  const unsigned char *next;
  size_t left; /* bytes of the current event not yet written */
  unsigned char buf[DIRECT_HEAD + DIRECT_TEXT_CAP + DIRECT_TAIL];
} direct = { .fd = -1 };

enum { DIRECT_TAKEN = 0, DIRECT_NOT_ALLOWED = -1, DIRECT_GONE = -2 };

/*
 * Takes a duplicate of fd `fd` of process `pid` (envd) into *out, if it is still the socket whose inode envd
 * named: between envd's DIRECT_ON and this, its client may have left and the fd number gone to another
 * connection, whose response must never get this command's output. DIRECT_NOT_ALLOWED: this holder may not
 * take envd's fds at all (no pidfd_getfd, or no right to ptrace envd: it needs the same user or root).
 */
static int direct_take(pid_t pid, int fd, uint64_t inode, int *out) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) return errno == ESRCH ? DIRECT_GONE : DIRECT_NOT_ALLOWED;
  int dup = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0); /* O_CLOEXEC is set on it */
  int err = errno;
  close(pidfd);
  if (dup < 0) return err == EBADF ? DIRECT_GONE : DIRECT_NOT_ALLOWED;
  struct stat st;
  if (fstat(dup, &st) != 0 || !S_ISSOCK(st.st_mode) || (uint64_t)st.st_ino != inode) {
    close(dup);
    return DIRECT_GONE;
  }
  *out = dup;
  return DIRECT_TAKEN;
}

/* Where json_text may write the text of the next event. */
static unsigned char *direct_text(void) { return direct.buf + DIRECT_HEAD; }

/* Frames the text of length `len` at direct_text() (or a comment when stream is 0) as the pending event. */
static void direct_frame(int stream, size_t len) {
  unsigned char *text = direct_text();
  size_t pre = stream ? strlen(direct_prefix[stream]) : 0;
  size_t suf = stream ? sizeof direct_suffix - 1 : 0;
  unsigned char *start = text - pre;
  memcpy(start, direct_prefix[stream], pre);
  if (!stream) memcpy(text, ":\n\n", 3), len = 3; /* a keep-alive comment, as envd writes one */
  memcpy(text + len, direct_suffix, suf);
  size_t event = pre + len + suf, end = (size_t)(text - direct.buf) + len + suf;
  if (direct.chunked) {
    char head[16];
    int n = 0;
    for (size_t v = event; n == 0 || v; v >>= 4) head[n++] = "0123456789abcdef"[v & 15];
    start -= n + 2;
    for (int i = 0; i < n; i++) start[i] = (unsigned char)head[n - 1 - i];
    start[n] = '\r';
    start[n + 1] = '\n';
    direct.buf[end++] = '\r';
    direct.buf[end++] = '\n';
  }
  direct.next = start;
  direct.left = (size_t)(direct.buf + end - start);
}

/* Writes what the socket takes now: 1 when the event is out, 0 when the rest waits for POLLOUT, -1 on error. */
static int direct_flush(void) {
  while (direct.left > 0) {
    ssize_t w = write(direct.fd, direct.next, direct.left);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1; /* EPIPE, ECONNRESET: the client is gone, which envd learns from its own end */
    }
    direct.next += w;
    direct.left -= (size_t)w;
  }
  return 1;
}

static void direct_close(void) {
  if (direct.fd >= 0) close(direct.fd);
  direct.fd = -1;
  direct.left = 0;
  direct.closing = 0;
}

#endif
