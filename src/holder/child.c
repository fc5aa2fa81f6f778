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
#include <grp.h>
#include <termios.h>
#include <unistd.h>

#include "options.h"
#include "util.h"

/* The command's setup failed: say what on its stderr (`fd`), exit with the status for it. */
static void fail_child(int fd, int status, const char *what, const char *detail) __attribute__((noreturn));
static void fail_child(int fd, int status, const char *what, const char *detail) {
  int err = errno;
  char msg[640];
  int len = snprintf(msg, sizeof msg, "envd-holder: %s%s: %s (%s)\n", what, detail, strerror(err), errno_name(err));
  if (len > (int)sizeof msg - 1) {
    len = (int)sizeof msg - 1;
    msg[len - 1] = '\n';
  }
  (void)write_all(fd, msg, (size_t)len);
  _exit(status);
}

/* Makes fd `from` the process's fd `to` (from != to; both are >= 3 before this, see start). */
static void install_fd(int from, int to, int err_fd) {
  if (dup2(from, to) < 0) fail_child(err_fd, CHILD_EXIT_STDIO, "cannot set up fd ", to == 0 ? "0" : to == 1 ? "1" : "2");
}

void run_child(const struct child_setup *setup, const struct options *opt) {
  int in_fd = setup->in_fd, out_fd = setup->out_fd, err_fd = opt->pty ? setup->out_fd : setup->err_fd;
  /* Never fails in a fresh fork (only a group leader cannot), but a command in envd's session must not run. */
  if (setsid() < 0) fail_child(err_fd, CHILD_EXIT_SESSION, "setsid", "");
  if (opt->pty) {
    int t = open(setup->slave_name, O_RDWR); /* a session leader without a terminal acquires this one */
    if (t < 0) t = out_fd;                   /* the slave the holder opened: TIOCSCTTY makes it ours all the same */
    if (ioctl(t, TIOCSCTTY, 0) < 0) fail_child(t, CHILD_EXIT_TERMINAL, "cannot make ", setup->slave_name);
    in_fd = out_fd = err_fd = t;
  } else if (in_fd < 0) {
    in_fd = open("/dev/null", O_RDONLY);
    if (in_fd < 0) fail_child(err_fd, CHILD_EXIT_STDIO, "cannot open /dev/null", "");
  }
  /* All holder fds are >= 3 (start makes sure of it), so these dup2s never clobber each other. */
  install_fd(in_fd, 0, err_fd);
  install_fd(out_fd, 1, err_fd);
  install_fd(err_fd, 2, err_fd);
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
  /*
   * Into the command's own cgroup (its limits, and cgroup.kill for the whole
   * tree) before anything of the user's runs; the holder itself stays outside,
   * so that killing the cgroup never takes the one who reports the exit.
   */
  if (opt->cgroup) {
    char procs[4096];
    int fd = -1;
    if ((size_t)snprintf(procs, sizeof procs, "%s/cgroup.procs", opt->cgroup) < sizeof procs) fd = open(procs, O_WRONLY | O_CREAT | O_CLOEXEC, 0644); /* O_CREAT: a test's plain-file layout; cgroupfs has it */
    if (fd < 0 || write(fd, "0", 1) != 1) fail_child(2, CHILD_EXIT_CGROUP, "cannot join the command's cgroup ", opt->cgroup);
    close(fd);
  }
  /*
   * The user last, once the terminal, stdio and the OOM score are set up as root (after setuid /proc/self is
   * root's again, the process no longer being dumpable): groups, then gid, then uid, after which none can change.
   */
  if (opt->switch_user) {
    if (setgroups(opt->group_count, opt->groups) < 0) fail_child(2, CHILD_EXIT_USER, "cannot set the supplementary groups", "");
    if (setgid(opt->gid) < 0) fail_child(2, CHILD_EXIT_USER, "cannot set the group id", "");
    if (setuid(opt->uid) < 0) fail_child(2, CHILD_EXIT_USER, "cannot set the user id", "");
  }
  /* Everything of the holder's is O_CLOEXEC already; this is belt and braces. It also closes the start pipe. */
  close_fds_from(3);
  execvp(opt->argv[0], opt->argv);
  fail_child(2, errno == ENOENT ? CHILD_EXIT_NOT_FOUND : CHILD_EXIT_NOT_RUN, "cannot run ", opt->argv[0]);
}
