/* machine.c — sync, filesystem freeze and thaw, entropy and hostname for envd (machine.h). */
#define _GNU_SOURCE
#include "machine.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <linux/fs.h>
#include <linux/random.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "util.h"

/* What --add-entropy takes at most; envd's /init checks the same bound (MAX_ENTROPY_BYTES). */
#define ENTROPY_MAX_BYTES 4096
#define ENTROPY_MIN_BYTES 32

static int failed(const char *job, const char *call) {
  fprintf(stderr, "envd-holder %s: %s: %s (%s)\n", job, call, strerror(errno), errno_name(errno));
  return 1;
}

int sync_main(int argc, char **argv) {
  (void)argv;
  if (argc != 2) {
    fprintf(stderr, "usage: envd-holder --sync\n");
    return 2;
  }
  sync();
  return 0;
}

static int freeze_ioctl(int argc, char **argv, unsigned long request, const char *job) {
  if (argc != 3) {
    fprintf(stderr, "usage: envd-holder %s MOUNTPOINT\n", job);
    return 2;
  }
  int fd = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return failed(job, "open");
  int result = ioctl(fd, request, 0);
  int saved = errno;
  close(fd);
  errno = saved;
  return result < 0 ? failed(job, request == FIFREEZE ? "FIFREEZE" : "FITHAW") : 0;
}

int fsfreeze_main(int argc, char **argv) { return freeze_ioctl(argc, argv, FIFREEZE, "--fsfreeze"); }

int fsthaw_main(int argc, char **argv) { return freeze_ioctl(argc, argv, FITHAW, "--fsthaw"); }

/* The bytes are read straight into the ioctl's buffer: its flexible `buf` starts where `bytes` does. */
struct entropy_pool {
  struct rand_pool_info info;
  unsigned char bytes[ENTROPY_MAX_BYTES + 1];
};
_Static_assert(offsetof(struct entropy_pool, bytes) == offsetof(struct rand_pool_info, buf), "the bytes must be the pool's buf");

int add_entropy_main(int argc, char **argv) {
  (void)argv;
  if (argc != 2) {
    fprintf(stderr, "usage: envd-holder --add-entropy < BYTES\n");
    return 2;
  }
  struct entropy_pool pool;
  size_t have = 0;
  while (have < sizeof pool.bytes) {
    ssize_t got = read(STDIN_FILENO, pool.bytes + have, sizeof pool.bytes - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return failed("--add-entropy", "read");
    if (got == 0) break;
    have += (size_t)got;
  }
  if (have < ENTROPY_MIN_BYTES || have > ENTROPY_MAX_BYTES) {
    fprintf(stderr, "envd-holder --add-entropy: %zu bytes on stdin, want %d to %d\n", have, ENTROPY_MIN_BYTES, ENTROPY_MAX_BYTES);
    return 2;
  }
  pool.info.buf_size = (int)have;
  pool.info.entropy_count = (int)have * 8;
  int fd = open("/dev/random", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return failed("--add-entropy", "open /dev/random");
  if (ioctl(fd, RNDADDENTROPY, &pool.info) < 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return failed("--add-entropy", "RNDADDENTROPY");
  }
  /*
   * Once the kernel's generator is ready, new input waits in the pool for its
   * next scheduled reseed (up to a minute on): until then two forks would
   * still read the same bytes. Reseed now. ENODATA: not ready yet, and then
   * the credit above already seeds it.
   */
  int result = ioctl(fd, RNDRESEEDCRNG);
  int saved = errno;
  close(fd);
  errno = saved;
  return result < 0 && errno != ENODATA ? failed("--add-entropy", "RNDRESEEDCRNG") : 0;
}

int set_hostname_main(int argc, char **argv) {
  if (argc != 3 || argv[2][0] == '\0') {
    fprintf(stderr, "usage: envd-holder --set-hostname NAME\n");
    return 2;
  }
  return sethostname(argv[2], strlen(argv[2])) < 0 ? failed("--set-hostname", "sethostname") : 0;
}
