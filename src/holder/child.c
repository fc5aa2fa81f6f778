/* child.c — the command's own process between fork and exec (child.h). */
#define _GNU_SOURCE
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "options.h"
#include "util.h"

void run_child(const struct child_setup *setup) {
  int in_fd = setup->in_fd, out_fd = setup->out_fd, err_fd = setup->err_fd;
  setsid();
  if (opt.pty) {
    int t = open(setup->slave_name, O_RDWR); /* a session leader without a terminal acquires this one */
    if (t < 0) t = out_fd;                   /* the slave the holder opened: TIOCSCTTY makes it ours all the same */
    (void)ioctl(t, TIOCSCTTY, 0);
    in_fd = out_fd = err_fd = t;
  } else if (in_fd < 0) {
    in_fd = open("/dev/null", O_RDONLY);
  }
  /* All holder fds are >= 3 (start makes sure of it), so these dup2s never clobber each other. */
  dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) (void)sigaction(sig, &dfl, NULL); /* fails harmlessly for KILL, STOP, libc's own */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  umask(setup->umask);
  /*
   * envd (and so the holder) runs with OOMScoreAdjust=-1000, which children
   * inherit: the command goes back to the default, so the OOM killer takes user
   * processes first, never envd or the holders that keep their output. Raising
   * the score needs no privilege; a failure (no /proc) changes nothing else.
   */
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    (void)!write(oom, "0", 1);
    close(oom);
  }
  /* Everything of the holder's is O_CLOEXEC already; this is belt and braces. It also closes the start pipe. */
  close_fds_from(3);
  execvp(opt.argv[0], opt.argv);
  char msg[512];
  int len = snprintf(msg, sizeof msg, "envd-holder: cannot run %s: %s\n", opt.argv[0], strerror(errno));
  if (len > (int)sizeof msg - 1) {
    len = (int)sizeof msg - 1;
    msg[len - 1] = '\n';
  }
  (void)write_all(2, msg, (size_t)len);
  _exit(127);
}
