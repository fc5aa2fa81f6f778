/* direct.c — direct output: the lent socket and its events (direct.h). */
#define _GNU_SOURCE
#include "direct.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "event.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/*
 * Takes a duplicate of fd `fd` of process `pid` (envd), if it is still the socket whose inode envd
 * named: between envd's DIRECT_ON and this, its client may have left and the fd number gone to another
 * connection, whose response must never get this command's output. DIRECT_NOT_ALLOWED: no pidfd_getfd,
 * or no right to ptrace envd (it needs the same user or root).
 */
int direct_take(struct direct *d, pid_t pid, int fd, uint64_t inode, int chunked) {
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
  d->fd = dup;
  d->chunked = chunked;
  d->left = 0;
  return DIRECT_TAKEN;
}

void direct_close(struct direct *d) {
  if (d->fd >= 0) close(d->fd);
  d->fd = -1;
  d->left = 0;
  d->closing = 0;
}

unsigned char *direct_text(struct direct *d) { return d->buf + EVENT_HEAD; }

int direct_flush(struct direct *d) {
  while (d->left > 0) {
    ssize_t w = write(d->fd, d->next, d->left);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1; /* EPIPE, ECONNRESET: the client is gone, which envd learns from its own end */
    }
    d->next += w;
    d->left -= (size_t)w;
  }
  return 1;
}

int direct_send(struct direct *d, int stream, size_t len, uint64_t out_offset, uint64_t err_offset) {
  struct event_id id = { out_offset, err_offset };
  d->next = frame_event(direct_text(d), len, stream, &id, d->chunked, &d->left);
  return direct_flush(d);
}

int direct_ping(struct direct *d) {
  d->next = frame_event(direct_text(d), 0, 0, NULL, d->chunked, &d->left);
  return direct_flush(d);
}
