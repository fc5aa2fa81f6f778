/* direct.c — direct output (direct.h). */
#define _GNU_SOURCE
#include "direct.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "event.h"
#include "live.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

static struct {
  int fd;      /* the client's socket, or -1 */
  int chunked; /* envd's response uses chunked transfer coding: each event is one chunk */
  int closing; /* DIRECT_OFF came while an event was half written: the socket goes back once it is out */
  const unsigned char *next;
  size_t left; /* bytes of the current event not yet written */
  unsigned char buf[EVENT_HEAD + DIRECT_TEXT_CAP + EVENT_TAIL];
} direct = { .fd = -1 };

enum { DIRECT_TAKEN = 0, DIRECT_NOT_ALLOWED = -1, DIRECT_GONE = -2 };

/*
 * Takes a duplicate of fd `fd` of process `pid` (envd) into *out, if it is still the socket whose inode envd
 * named: between envd's DIRECT_ON and this, its client may have left and the fd number gone to another
 * connection, whose response must never get this command's output. DIRECT_NOT_ALLOWED: this holder may not
 * take envd's fds at all (no pidfd_getfd, or no right to ptrace envd: it needs the same user or root).
 */
static int take_socket(pid_t pid, int fd, uint64_t inode, int *out) {
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

void start_direct(pid_t pid, int fd, uint64_t inode, int chunked) {
  /* Only a caught-up TEXT client is lent one. Not allowed: envd stops asking; gone: that client is leaving. */
  int taken = live.mode != SEND_TEXT ? DIRECT_GONE : take_socket(pid, fd, inode, &fd);
  if (taken != DIRECT_TAKEN) {
    queue_direct_ended(taken == DIRECT_NOT_ALLOWED ? DIRECT_ENDED_REFUSED : DIRECT_ENDED_FAILED);
    return;
  }
  direct.fd = fd;
  direct.chunked = chunked;
  direct.left = 0;
  /* No output is read until GO: envd first writes the TEXT sent before READY. */
  live.mode = SEND_DIRECT_WAIT;
  queue(MSG_DIRECT_READY, NULL, 0, NULL, 0);
}

void stop_direct(void) {
  if (live.mode == SEND_DIRECT && direct.left > 0) direct.closing = 1;
  else if (live.mode == SEND_DIRECT || live.mode == SEND_DIRECT_WAIT) end_direct(DIRECT_ENDED_OFF);
}

void direct_close(void) {
  if (direct.fd >= 0) close(direct.fd);
  direct.fd = -1;
  direct.left = 0;
  direct.closing = 0;
}

void end_direct(int reason) {
  direct_close();
  live.mode = SEND_TEXT;
  queue_direct_ended(reason);
}

unsigned char *direct_text(void) { return direct.buf + EVENT_HEAD; }
size_t direct_unsent(void) { return direct.left; }
int direct_fd(void) { return direct.fd; }

/* Writes what the socket takes now: 1 when the event is out, 0 when the rest waits for POLLOUT, -1 on error. */
static int flush_event(void) {
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

void write_direct(void) {
  int r = flush_event();
  if (r < 0) end_direct(DIRECT_ENDED_FAILED);
  else if (r > 0 && direct.closing) end_direct(DIRECT_ENDED_OFF);
}

void send_direct(int stream, size_t len, uint64_t out_offset, uint64_t err_offset) {
  struct event_id id = { out_offset, err_offset };
  direct.next = frame_event(direct_text(), len, stream, &id, direct.chunked, &direct.left);
  write_direct();
}

void ping_direct(void) {
  if (live.mode != SEND_DIRECT || direct.left != 0) return;
  direct.next = frame_event(direct_text(), 0, 0, NULL, direct.chunked, &direct.left);
  write_direct();
}
