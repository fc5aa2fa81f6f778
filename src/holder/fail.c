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

#include "command.h"
#include "live.h"
#include "util.h"

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
  if (command.shell_pid > 0) {
    kill(-command.shell_pid, SIGKILL); /* it leads its own group by now (ready waits for that) */
    kill(command.shell_pid, SIGKILL);
    while (waitpid(command.shell_pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  remove_socket();
  exit(1);
}
