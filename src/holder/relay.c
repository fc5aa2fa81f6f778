/* relay.c — `envd-holder --relay` (relay.h). */
#define _GNU_SOURCE
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sha256.h"
#include "util.h"

#define RELAY_SOCKET_FD 3
#define RELAY_OUT_FD 4
#define RELAY_IDLE_MS 60000
/* The pair's send buffer: with the default ~200 KiB the relay and envd woke each other every few reads
 * (archive upload 800 ms instead of 580, bench/archive.mjs); 1 MiB is envd's own read-ahead. */
#define RELAY_OUT_ROOM (1024 * 1024)

static unsigned char buffer[256 * 1024];

static int relay_report(const char *what, int err, uint64_t done) {
  if (err) printf("%s %d %llu\n", what, err, (unsigned long long)done);
  else printf("%s %llu\n", what, (unsigned long long)done);
  fflush(stdout);
  return 1;
}

/* Passes `n` bytes of the buffer on to envd and into the hash; 0, or an errno. */
static int relay_pass(struct sha256 *hash, size_t n) {
  if (write_all(RELAY_OUT_FD, buffer, n) < 0) return errno;
  sha256_update(hash, buffer, n);
  return 0;
}

int relay_main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: envd-holder --relay BYTES EARLY (early bytes on stdin, socket on fd 3, the body out on fd 4)\n");
    return 2;
  }
  uint64_t want = strtoull(argv[2], NULL, 10), early = strtoull(argv[3], NULL, 10);
  /* envd closing fd 4 (it refused the archive) is an EPIPE to report, not a signal to die of. */
  signal(SIGPIPE, SIG_IGN);
  /* fd 4 is this process's own end of the pair: blocking, so that a full one waits for envd. */
  (void)fcntl(RELAY_OUT_FD, F_SETFL, fcntl(RELAY_OUT_FD, F_GETFL) & ~O_NONBLOCK);
  int room = RELAY_OUT_ROOM; /* FORCE (root) passes net.core.wmem_max, which a guest may leave at 208 KiB */
  if (setsockopt(RELAY_OUT_FD, SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room) < 0) (void)setsockopt(RELAY_OUT_FD, SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
  struct sha256 hash;
  sha256_init(&hash, sha256_best_blocks());

  for (uint64_t passed = 0; passed < early;) {
    ssize_t n = read(0, buffer, early - passed < sizeof buffer ? (size_t)(early - passed) : sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return relay_report("error", n < 0 ? errno : EIO, 0);
    int err = relay_pass(&hash, (size_t)n);
    if (err) return relay_report("error", err, 0);
    passed += (uint64_t)n;
  }
  uint64_t done = 0;
  while (done < want) {
    ssize_t n = read(RELAY_SOCKET_FD, buffer, want - done < sizeof buffer ? (size_t)(want - done) : sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = { RELAY_SOCKET_FD, POLLIN, 0 };
      int r = poll(&pfd, 1, RELAY_IDLE_MS);
      if (r == 0) return relay_report("idle", 0, done);
      continue;
    }
    if (n <= 0) return relay_report("short", 0, done); /* closed, or ECONNRESET and the like: the client is gone */
    int err = relay_pass(&hash, (size_t)n);
    if (err) return relay_report("error", err, done);
    done += (uint64_t)n;
  }
  char hex[65];
  sha256_hex(&hash, hex);
  printf("ok %llu %s\n", (unsigned long long)done, hex);
  fflush(stdout);
  return 0;
}
