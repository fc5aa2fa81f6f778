/* util.c — see util.h. */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void close_fds_from(int first) {
  if (close_range((unsigned)first, ~0U, 0) == 0) return;
  /* Kernels before 5.9 have no close_range. */
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (long)rl.rlim_cur : 65536;
  for (long fd = first; fd < max; fd++) close((int)fd);
}

int set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return -1;
  return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int read_start_time(pid_t pid, unsigned long long *out) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n;
  do n = read(fd, buf, sizeof buf - 1); while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  /* The command name may contain spaces and ')': fields are counted after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p++;
  for (int field = 2; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  *out = strtoull(p, NULL, 10);
  return 0;
}

const char *errno_name(int err) {
  const char *name = strerrorname_np(err);
  return name ? name : "unknown errno";
}
