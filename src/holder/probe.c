/* probe.c — `envd-holder --probe PATH` (probe.h). */
#include "probe.h"

#include <stdio.h>
#include <sys/vfs.h>

int probe_main(int argc, char **argv) {
  if (argc != 3) {
    fputs("usage: envd-holder --probe PATH\n", stderr);
    return 2;
  }
  struct statfs answer;
  (void)statfs(argv[2], &answer);
  return 0;
}
