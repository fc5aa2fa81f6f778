/* start.c — a holder's start (start.h). */
#define _GNU_SOURCE
#include "start.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "child.h"
#include "fail.h"
#include "holder.h"
#include "system.h"
#include "util.h"

/* Writes a small file with temp + rename, so a reader sees all of it or none. */
static int write_file_atomically(const char *dir, const char *name, const char *text) {
  char path[PATH_MAX], tmp[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) { errno = ENAMETOOLONG; return -1; }
  if (snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name) >= (int)sizeof tmp) { errno = ENAMETOOLONG; return -1; }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  if (write_all(fd, text, strlen(text)) < 0) { int e = errno; close(fd); unlink(tmp); errno = e; return -1; }
  close(fd);
  if (rename(tmp, path) < 0) { int e = errno; unlink(tmp); errno = e; return -1; }
  return 0;
}

/*
 * The pty: master (non-blocking, the one output source and the stdin sink) and its slave, held open until the fork.
 * Where /dev/pts is not mounted yet (an image booted without an init that does it) the holder, root, mounts it.
 */
static void open_terminal(struct holder *h, struct child_setup *setup, char *slave_name, size_t slave_size) {
  struct command *command = &h->command;
  const struct options *opt = &h->opt;
  /* Before the master: without devpts at /dev/pts, /dev/ptmx falls back to the kernel's first instance, whose slaves are nowhere here. */
  if (mount_devpts() < 0) fail("terminal unavailable: /dev/pts is not mounted and cannot be: %s (%s)", strerror(errno), errno_name(errno));
  command->pty_fd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (command->pty_fd < 0) fail("terminal unavailable: cannot open /dev/ptmx: %s (%s)", strerror(errno), errno_name(errno));
  if (grantpt(command->pty_fd) < 0 || unlockpt(command->pty_fd) < 0) fail("terminal unavailable: grantpt/unlockpt: %s", strerror(errno));
  const char *name = ptsname(command->pty_fd);
  if (!name || strlen(name) >= slave_size) fail("ptsname: %s", strerror(errno));
  strcpy(slave_name, name);
  struct winsize ws = { .ws_row = opt->rows, .ws_col = opt->cols };
  if (ioctl(command->pty_fd, TIOCSWINSZ, &ws) < 0) fail("TIOCSWINSZ: %s", strerror(errno));
  /* Held open until the fork: the master never sees a hangup (EIO) before the child has the slave. */
  setup->out_fd = open(slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (setup->out_fd < 0) fail("terminal unavailable: cannot open %s: %s", slave_name, strerror(errno));
  /* The user's terminal, as login makes it: theirs, writable by the group devpts gave it (tty), no one else. */
  if (opt->switch_user && (fchown(setup->out_fd, opt->uid, (gid_t)-1) < 0 || fchmod(setup->out_fd, 0620) < 0))
    fail("cannot give %s to uid %u: %s", slave_name, (unsigned)opt->uid, strerror(errno));
  if (set_nonblocking(command->pty_fd) < 0) fail("fcntl O_NONBLOCK: %s", strerror(errno));
  command->sources[0] = (struct source){ .fd = command->pty_fd, .stream = STREAM_STDOUT };
  command->source_count = 1;
  command->stdin_fd = command->pty_fd;
}

/* Pipes for stdout and stderr (and stdin): only the holder's ends are non-blocking, the command sees ordinary pipes. */
static void open_pipes(struct holder *h, struct child_setup *setup) {
  struct command *command = &h->command;
  const struct options *opt = &h->opt;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) fail("pipe: %s", strerror(errno));
  setup->out_fd = out[1];
  setup->err_fd = err[1];
  if (set_nonblocking(out[0]) < 0 || set_nonblocking(err[0]) < 0) fail("fcntl O_NONBLOCK: %s", strerror(errno));
  command->sources[0] = (struct source){ .fd = out[0], .stream = STREAM_STDOUT };
  command->sources[1] = (struct source){ .fd = err[0], .stream = STREAM_STDERR };
  command->source_count = 2;
  if (opt->stdin) {
    int in[2];
    if (pipe2(in, O_CLOEXEC) < 0) fail("pipe: %s", strerror(errno));
    setup->in_fd = in[0];
    command->stdin_fd = in[1];
    if (set_nonblocking(command->stdin_fd) < 0) fail("fcntl O_NONBLOCK: %s", strerror(errno));
  }
}

void start(struct holder *h) {
  struct command *command = &h->command;
  const struct options *opt = &h->opt;
  /* Whatever envd's runtime let leak into us (fds without O_CLOEXEC) must not pin its pipes: only 0-2 are ours. */
  close_fds_from(3);
  /* With fds 0-2 always open, every fd the holder creates is >= 3 and the child's dup2s are safe. */
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) fail("cannot open /dev/null: %s", strerror(errno));

  /* envd may be gone when the holder writes to the socket: EPIPE, not death. SIGHUP: a pty hangup is not ours. */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  /* An inherited SIG_IGN would make the kernel reap the shell itself, and its exit status would be lost. */
  signal(SIGCHLD, SIG_DFL);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL); /* before the fork, so no SIGCHLD is lost; the child unblocks */
  command->signal_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (command->signal_fd < 0) fail("signalfd: %s", strerror(errno));

  /* Files and the socket are envd's only: 0600. The command gets envd's umask back. */
  struct child_setup setup = { .in_fd = -1, .out_fd = -1, .err_fd = -1, .slave_name = "", .umask = umask(077) };

  open_kept_output(&h->kept, opt);
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/status.tmp", opt->dir) >= (int)sizeof path) fail("--dir is too long");
  command->status_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (command->status_fd < 0) fail("cannot create %s: %s", path, strerror(errno));
  /* Its first page is taken now: the memory tier may fill the state tmpfs to the last page (best effort). */
  (void)fallocate(command->status_fd, FALLOC_FL_KEEP_SIZE, 0, 4096);

  listen_socket(&h->live, opt->dir, opt->hold_output_ms);

  char slave_name[128] = "";
  if (opt->pty) open_terminal(h, &setup, slave_name, sizeof slave_name);
  else open_pipes(h, &setup);
  setup.slave_name = slave_name;

  /*
   * The start pipe: the child closes its end once it leads its own session, and
   * `ready` waits for that, so envd never signals a process group that does not
   * exist yet (a kill right after `ready` would otherwise miss the command).
   */
  int started[2];
  if (pipe2(started, O_CLOEXEC) < 0) fail("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) fail("fork: %s", strerror(errno));
  if (pid == 0) run_child(&setup, opt);
  command->shell_pid = pid;
  fail_kills(pid);
  if (setup.in_fd >= 0) close(setup.in_fd);
  close(setup.out_fd);
  if (setup.err_fd >= 0) close(setup.err_fd);
  close(started[1]);
  char byte;
  while (read(started[0], &byte, 1) < 0 && errno == EINTR) {}
  close(started[0]);

  /* The child cannot be reaped yet (SIGCHLD is only read in the loop), so its /proc entry is there. */
  unsigned long long shell_start, holder_start;
  if (read_start_time(command->shell_pid, &shell_start) < 0 || read_start_time(getpid(), &holder_start) < 0)
    fail("cannot read start times from /proc: %s", strerror(errno));
  char line[128];
  snprintf(line, sizeof line, "%d %llu %d %llu\n", (int)command->shell_pid, shell_start, (int)getpid(), holder_start);
  if (write_file_atomically(opt->dir, "pid", line) < 0) fail("cannot write %s/pid: %s", opt->dir, strerror(errno));

  /* The pid record again, so envd need not read the file it was just written to. */
  snprintf(line, sizeof line, "ready %d %llu %d %llu\n", (int)command->shell_pid, shell_start, (int)getpid(), holder_start);
  (void)write_all(STDOUT_FILENO, line, strlen(line)); /* envd gone already: the command runs on regardless */
  /* Nothing may tie the holder to envd any more: its pipes to us are let go. */
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    for (int fd = 0; fd < 3; fd++) dup2(null_fd, fd);
    close(null_fd);
  }
}
