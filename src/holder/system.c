/* system.c — mounting /dev/pts and setting the clock for envd (system.h). */
#define _GNU_SOURCE
#include "system.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define DEVPTS_SUPER_MAGIC 0x1cd1

int mount_devpts(void) {
  struct statfs fs;
  if (statfs("/dev/pts", &fs) == 0 && fs.f_type == DEVPTS_SUPER_MAGIC) return 0;
  if (mkdir("/dev/pts", 0755) < 0 && errno != EEXIST) return -1;
  /* ptmxmode: /dev/pts/ptmx usable by every user; mode and gid of new terminals as login would give them. */
  if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620") < 0) return -1;
  struct stat st;
  if (lstat("/dev/ptmx", &st) < 0 && errno == ENOENT && symlink("pts/ptmx", "/dev/ptmx") < 0) return -1;
  return 0;
}

int set_clock_main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: envd-holder --set-clock SECONDS[.FRACTION] (since the epoch, UTC)\n");
    return 2;
  }
  char *end;
  errno = 0;
  double seconds = strtod(argv[2], &end);
  if (errno || *end || end == argv[2] || seconds < 0 || seconds > 4e9) {
    fprintf(stderr, "envd-holder --set-clock: not a time: %s\n", argv[2]);
    return 2;
  }
  struct timespec ts = { .tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9) };
  if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
    fprintf(stderr, "envd-holder --set-clock: clock_settime: %s (%s)\n", strerror(errno), errno_name(errno));
    return 1;
  }
  return 0;
}
