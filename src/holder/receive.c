/* receive.c — `envd-holder --receive` (receive.h). */
#define _GNU_SOURCE
#include "receive.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#define RECEIVE_SOCKET_FD 3
#define RECEIVE_FILE_FD 4
#define RECEIVE_PIPE_BYTES (1024 * 1024)
#define RECEIVE_WRITEBACK_EVERY (4ULL * 1024 * 1024)
#define RECEIVE_IDLE_MS 60000

static int receive_report(const char *what, int err, uint64_t done) {
  if (err) printf("%s %d %llu\n", what, err, (unsigned long long)done);
  else printf("%s %llu\n", what, (unsigned long long)done);
  fflush(stdout);
  return strcmp(what, "ok") == 0 ? 0 : 1;
}

/* Moves what the pipe holds into the file at *offset; 0, or an errno. */
static int receive_drain(int pipe_read, size_t *in_pipe, loff_t *offset) {
  while (*in_pipe > 0) {
    ssize_t n = splice(pipe_read, NULL, RECEIVE_FILE_FD, offset, *in_pipe, SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO; /* cannot happen for a regular file */
    *in_pipe -= (size_t)n;
  }
  return 0;
}

int receive_main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: envd-holder --receive BYTES EARLY (early bytes on stdin, socket on fd 3, file on fd 4)\n");
    return 2;
  }
  uint64_t want = strtoull(argv[2], NULL, 10);
  loff_t offset = (loff_t)strtoll(argv[3], NULL, 10);
  /* The early bytes: a few reads' worth (Node's parser stops at its high-water mark), copied as they come. */
  for (loff_t at = 0; at < offset;) {
    char buf[65536];
    ssize_t n = read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return receive_report("error", n < 0 ? errno : EIO, 0);
    for (ssize_t w, put = 0; put < n; put += w) {
      w = pwrite(RECEIVE_FILE_FD, buf + put, (size_t)(n - put), at + put);
      if (w < 0 && errno == EINTR) { w = 0; continue; }
      if (w < 0) return receive_report("error", errno, 0);
    }
    at += n;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return receive_report("error", errno, 0);
  (void)fcntl(p[1], F_SETPIPE_SZ, RECEIVE_PIPE_BYTES); /* a bigger pipe means fewer splices; the default works too */
  uint64_t done = 0, flushed_to = (uint64_t)offset;
  size_t in_pipe = 0;
  while (done < want) {
    uint64_t left = want - done;
    ssize_t n = splice(RECEIVE_SOCKET_FD, NULL, p[1], NULL, left < RECEIVE_PIPE_BYTES ? (size_t)left : RECEIVE_PIPE_BYTES, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      /* Nothing to read (or the pipe is full): empty the pipe, then wait for the client. */
      int err = receive_drain(p[0], &in_pipe, &offset);
      if (err) return receive_report("error", err, done);
      struct pollfd pfd = { RECEIVE_SOCKET_FD, POLLIN, 0 };
      int r = poll(&pfd, 1, RECEIVE_IDLE_MS);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return receive_report("idle", 0, done);
      continue;
    }
    if (n < 0) return receive_report("short", 0, done); /* ECONNRESET and the like: the client is gone */
    if (n == 0) return receive_report("short", 0, done);
    in_pipe += (size_t)n;
    done += (uint64_t)n;
    int err = receive_drain(p[0], &in_pipe, &offset);
    if (err) return receive_report("error", err, done - in_pipe);
    if ((uint64_t)offset - flushed_to >= RECEIVE_WRITEBACK_EVERY) {
      /* Start writing this stretch to disk now; the fsync at the end then has little left to wait for. */
      (void)sync_file_range(RECEIVE_FILE_FD, (off64_t)flushed_to, (off64_t)((uint64_t)offset - flushed_to), SYNC_FILE_RANGE_WRITE);
      flushed_to = (uint64_t)offset;
    }
  }
  if (fsync(RECEIVE_FILE_FD) < 0) return receive_report("error", errno, done);
  return receive_report("ok", 0, done);
}
