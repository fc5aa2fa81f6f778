/* fail.c — see fail.h. */
#define _GNU_SOURCE
#include "fail.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

/* What a failure must leave nothing of: only fail.c reads these. */
static pid_t kill_pid = -1;
static const char *unlink_path;

void fail_kills(pid_t pid) { kill_pid = pid; }
void fail_unlinks(const char *path) { unlink_path = path; }

void fail(const char *fmt, ...) {
  int saved = errno;
  char line[1024];
  int len = snprintf(line, sizeof line, "error ");
  va_list ap;
  va_start(ap, fmt);
  errno = saved;
  len += vsnprintf(line + len, sizeof line - (size_t)len - 1, fmt, ap);
  va_end(ap);
  if (len > (int)sizeof line - 2) len = (int)sizeof line - 2;
  line[len++] = '\n';
  (void)write_all(STDOUT_FILENO, line, (size_t)len);
  /* Leave nothing behind that could look like a live command. */
  if (kill_pid > 0) {
    kill(-kill_pid, SIGKILL); /* it leads its own group by now (ready waits for that) */
    kill(kill_pid, SIGKILL);
    while (waitpid(kill_pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (unlink_path) unlink(unlink_path);
  exit(1);
}
