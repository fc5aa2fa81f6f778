#define _GNU_SOURCE
#include "envd-process.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"

/** The settings file the install writes (rootfs/install.sh), read as systemd's EnvironmentFile. */
#define SETTINGS "/etc/envd/envd.env"

/** Where envd is, relative to envd-init's directory: the build's dist/, then the install's lib/envd/. */
static const char *const ENVD_PLACES[] = {"envd", "../../bin/envd"};

/** Puts each KEY=VALUE line of the settings file into the environment (comments and blanks skipped). */
static void load_settings(void) {
  FILE *file = fopen(SETTINGS, "r");
  if (file == NULL) return;
  char line[4096];
  while (fgets(line, sizeof line, file) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    char *equals = strchr(line, '=');
    if (line[0] == '#' || equals == NULL || equals == line) continue;
    *equals = '\0';
    setenv(line, equals + 1, 1);
  }
  fclose(file);
}

static int find_envd(char *path, size_t size) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  *strrchr(self, '/') = '\0';
  for (size_t i = 0; i < sizeof ENVD_PLACES / sizeof *ENVD_PLACES; i++) {
    if ((size_t)snprintf(path, size, "%s/%s", self, ENVD_PLACES[i]) < size && access(path, X_OK) == 0) return 0;
  }
  return -1;
}

pid_t start_envd(void) {
  char path[PATH_MAX];
  if (find_envd(path, sizeof path) != 0) {
    log_line("cannot find envd beside envd-init or in ../../bin");
    return -1;
  }
  pid_t pid = fork();
  if (pid != 0) {
    if (pid < 0) log_errno("cannot fork envd");
    return pid;
  }
  // The child: signals as a fresh process has them, its own session, spared by the OOM killer.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (adj >= 0) {
    if (write(adj, "-1000", 5) != 5) log_errno("cannot protect envd from the OOM killer");
    close(adj);
  }
  // As the unit's LimitNOFILE: every command, watch and stream holds a descriptor.
  struct rlimit files = {.rlim_cur = 1048576, .rlim_max = 1048576};
  if (setrlimit(RLIMIT_NOFILE, &files) != 0) log_errno("cannot raise envd's descriptor limit");
  setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 0);
  setenv("MALLOC_MMAP_THRESHOLD_", "131072", 0); // as the unit sets it (docs/operations.md)
  load_settings();
  execl(path, "envd", (char *)NULL);
  log_errno("cannot run %s", path);
  _exit(127);
}
