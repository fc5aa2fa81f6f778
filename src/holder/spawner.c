/* spawner.c — `envd-holder --spawner` (spawner.h). */
#define _GNU_SOURCE
#include "spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#define SPAWNER_MAX_PENDING 256              /* holders between fork and their first line; more wait in the pipe */
#define SPAWNER_MAX_REQUEST (16 * 1024 * 1024) /* above envd's 10 MiB JSON bodies: a command line that long is exec's to refuse (E2BIG) */
#define SPAWNER_LINE 1024

struct spawner_child {
  int fd;     /* read end of the child's stdout; -1: free */
  uint32_t id;
  pid_t pid;
  size_t len; /* bytes of its first line read so far */
  char line[SPAWNER_LINE];
};

static struct spawner_child spawner_children[SPAWNER_MAX_PENDING];
static int spawner_out = -1;
/* The holder's own main, run in the forked child (no exec: see spawner_run_child). */
static int (*spawner_holder_main)(int argc, char **argv);
/* The spawner's "--spawner" argument, relabelled in each child so `ps` tells holders from the spawner. */
static char *spawner_label;

static void spawner_reply(const char *text, size_t len) {
  while (len > 0) {
    ssize_t n = write(spawner_out, text, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0); /* envd is gone: nobody to start holders for */
    text += n;
    len -= (size_t)n;
  }
}

/* The child's first line (or what it said before EOF) goes to envd; then its pipe is let go. */
static void spawner_answer(struct spawner_child *c) {
  char out[SPAWNER_LINE + 48];
  size_t text = strcspn(c->line, "\n");
  if (text > c->len) text = c->len;
  int n = snprintf(out, sizeof out, "%u %d %.*s\n", c->id, (int)c->pid, (int)text, c->line);
  spawner_reply(out, (size_t)n);
  close(c->fd);
  c->fd = -1;
}

/*
 * In the child: a clean process state (envd's spawn gave the holder the same),
 * then the holder's main, without an exec: this binary is the holder, and an
 * exec cost ~1.8 ms per command on a 2-CPU guest. The child's memory is a copy
 * of this small process; the holder's state starts zeroed, as it was never
 * touched here. Its environment is the command's, as an exec would have made it.
 *
 * Running on after fork without exec is safe because the spawner is
 * single-threaded: no other thread can hold a libc lock (malloc's, stdio's)
 * at the fork, so the child may call anything, not only async-signal-safe
 * functions. A thread added to the spawner would break this.
 */
static void spawner_run_child(int out_fd, char *cwd, char **argv, char **envp) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) (void)sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(null_fd, 2) < 0) _exit(127);
  char msg[512];
  if (chdir(cwd) < 0) {
    int n = snprintf(msg, sizeof msg, "error cannot enter %s: %s\n", cwd, strerror(errno));
    (void)!write(1, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    _exit(127);
  }
  memcpy(spawner_label, "--holder", sizeof "--holder"); /* fits: "--spawner" is longer */
  environ = envp;
  int argc = 0;
  while (argv[argc]) argc++;
  exit(spawner_holder_main(argc, argv));
}

/* Splits a request into cwd and NULL-terminated argv and envp (one calloc, *argv); 0, or -1 if malformed. */
static int spawner_parse(unsigned char *p, uint32_t len, uint32_t *id, char **cwd, char ***argv, char ***envp) {
  if (len < 12) return -1;
  uint32_t argc, envc;
  memcpy(id, p, 4);
  memcpy(&argc, p + 4, 4);
  memcpy(&envc, p + 8, 4);
  /* Each string takes at least its NUL: this bounds the vector by the request. */
  if (argc == 0 || (uint64_t)argc + envc + 1 > len - 12) return -1;
  char **vec = calloc((size_t)argc + envc + 2, sizeof *vec);
  if (!vec) return -1;
  char *s = (char *)p + 12, *end = (char *)p + len;
  for (uint32_t i = 0; i < 1 + argc + envc; i++) {
    char *nul = memchr(s, 0, (size_t)(end - s));
    if (!nul) {
      free(vec);
      return -1;
    }
    if (i == 0) *cwd = s;
    else if (i <= argc) vec[i - 1] = s;
    else vec[i] = s; /* env strings after argv's NULL */
    s = nul + 1;
  }
  *argv = vec;
  *envp = vec + argc + 1;
  return 0;
}

static struct spawner_child *spawner_free_child(void) {
  for (int i = 0; i < SPAWNER_MAX_PENDING; i++)
    if (spawner_children[i].fd < 0) return &spawner_children[i];
  return NULL;
}

/* One request (a free child slot exists): fork the holder with a fresh pipe as its stdout, watched until its first line. */
static void spawner_start(unsigned char *request, uint32_t len) {
  uint32_t id = 0;
  char *cwd = NULL, **argv = NULL, **envp = NULL;
  char out[64];
  if (spawner_parse(request, len, &id, &cwd, &argv, &envp) < 0) {
    int n = snprintf(out, sizeof out, "%u 0 spawn-errno %d\n", id, EINVAL);
    spawner_reply(out, (size_t)n);
    return;
  }
  struct spawner_child *c = spawner_free_child(); /* the caller made sure there is one */
  int p[2];
  int err = 0;
  pid_t pid = -1;
  if (pipe2(p, O_CLOEXEC) < 0) {
    err = errno;
  } else {
    pid = fork();
    if (pid == 0) spawner_run_child(p[1], cwd, argv, envp);
    if (pid < 0) err = errno;
    close(p[1]);
    if (pid < 0) close(p[0]);
  }
  free(argv);
  if (err) {
    int n = snprintf(out, sizeof out, "%u 0 spawn-errno %d\n", id, err);
    spawner_reply(out, (size_t)n);
    return;
  }
  if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
    /* Its line could not be waited for without blocking every other request: the holder goes, envd hears why. */
    err = errno;
    kill(pid, SIGKILL);
    close(p[0]);
    int n = snprintf(out, sizeof out, "%u 0 spawn-errno %d\n", id, err);
    spawner_reply(out, (size_t)n);
    return;
  }
  *c = (struct spawner_child){ .fd = p[0], .id = id, .pid = pid, .len = 0 };
}

static void spawner_read_child(struct spawner_child *c) {
  ssize_t n = read(c->fd, c->line + c->len, sizeof c->line - 1 - c->len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n > 0) c->len += (size_t)n;
  /* A whole line, EOF, an error, or a line too long to keep: answer with what there is. */
  if (n <= 0 || memchr(c->line, '\n', c->len) || c->len == sizeof c->line - 1) spawner_answer(c);
}

int spawner_main(int argc, char **argv, int (*holder_main)(int, char **)) {
  spawner_holder_main = holder_main;
  spawner_label = argv[1];
  if (argc != 2) {
    fprintf(stderr, "usage: envd-holder --spawner (requests on stdin, replies on stdout; see spawner.h)\n");
    return 2;
  }
  /* Our channels to envd move above 2 and close on exec; 0-2 become /dev/null, so no holder inherits them. */
  int in = fcntl(0, F_DUPFD_CLOEXEC, 3);
  spawner_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  int null_fd = open("/dev/null", O_RDWR);
  if (in < 0 || spawner_out < 0 || null_fd < 0) return 1;
  for (int fd = 0; fd < 3; fd++) dup2(null_fd, fd);
  close(null_fd);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_IGN); /* holders are reaped by the kernel; the child resets it before the holder runs */
  for (int i = 0; i < SPAWNER_MAX_PENDING; i++) spawner_children[i].fd = -1;

  unsigned char *buf = NULL;
  size_t have = 0, cap = 0, at = 0;
  int in_open = 1;
  struct pollfd fds[1 + SPAWNER_MAX_PENDING];
  struct spawner_child *polled[1 + SPAWNER_MAX_PENDING];
  for (;;) {
    /* Whole requests already read start while a child slot is free; the rest wait (in buf, then envd's pipe). */
    uint32_t len;
    while (have - at >= 4 && (memcpy(&len, buf + at, 4), have - at - 4 >= len) && spawner_free_child()) {
      spawner_start(buf + at + 4, len);
      at += 4 + (size_t)len;
    }
    if (at > 0) {
      memmove(buf, buf + at, have - at);
      have -= at;
      at = 0;
    }

    int n = 0;
    for (int i = 0; i < SPAWNER_MAX_PENDING; i++) {
      if (spawner_children[i].fd < 0) continue;
      fds[n] = (struct pollfd){ .fd = spawner_children[i].fd, .events = POLLIN };
      polled[n++] = &spawner_children[i];
    }
    int whole = have >= 4 && (memcpy(&len, buf, 4), have - 4 >= len);
    int reading = in_open && !whole;
    if (reading) fds[n++] = (struct pollfd){ .fd = in, .events = POLLIN };
    if (n == 0) break; /* envd is gone and every holder has answered */
    if (poll(fds, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (int i = 0; i < n - reading; i++)
      if (fds[i].revents) spawner_read_child(polled[i]);
    if (!reading || !fds[n - 1].revents) continue;

    if (have >= 4) {
      memcpy(&len, buf, 4);
      if (len > SPAWNER_MAX_REQUEST) return 1; /* not envd: nothing sane to answer */
    }
    if (cap - have < 65536) {
      cap = cap ? cap * 2 : 65536;
      unsigned char *grown = realloc(buf, cap);
      if (!grown) return 1;
      buf = grown;
    }
    ssize_t got = read(in, buf + have, cap - have);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      in_open = 0;
      continue;
    }
    have += (size_t)got;
  }
  return 0;
}
