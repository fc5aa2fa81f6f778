/* forward.c — `--forward`: the loopback forward's splice relay (forward.h). */
#define _GNU_SOURCE
#include "forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "splice-pump.h"
#include "steer.h"
#include "util.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define CONTROL_KEY UINT64_MAX
#define LINE_MAX_BYTES 256
#define EVENTS 256
/* Two sockets per connection, pipes while bytes wait, and room for envd's own few. */
#define WANTED_FDS (FORWARD_MAX_CONNECTIONS * 4 + 64)

struct connection {
  unsigned long long id;
  unsigned generation;
  int used, connecting;
  int client, upstream;
  struct direction up, down; /* client → upstream, upstream → client */
};

struct relay {
  int epoll, pidfd;
  struct pump pump;
  struct connection slots[FORWARD_MAX_CONNECTIONS];
  int free_slots[FORWARD_MAX_CONNECTIONS];
  int free_count;
  char line[LINE_MAX_BYTES];
  size_t line_used;
};

static struct relay relay;

static void say(const char *what, unsigned long long id, int err) {
  char text[64];
  int n = err ? snprintf(text, sizeof text, "%s %llu %s\n", what, id, errno_name(err)) : snprintf(text, sizeof text, "%s %llu\n", what, id);
  if (write_all(1, text, (size_t)n) != 0) exit(1); /* envd is gone */
}

static uint64_t key_of(int slot) { return ((uint64_t)relay.slots[slot].generation << 32) | (uint64_t)slot; }

/* An abort on one side is an abort on the other: a reset, not an end the peer would take for a complete answer. */
static void reset_close(int fd) {
  struct linger now = {.l_onoff = 1, .l_linger = 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
  close(fd);
}

static void finish(int slot, int reset) {
  struct connection *c = &relay.slots[slot];
  direction_release(&relay.pump, &c->up);
  direction_release(&relay.pump, &c->down);
  if (reset) {
    reset_close(c->client);
    reset_close(c->upstream);
  } else {
    close(c->client);
    close(c->upstream);
  }
  c->used = 0;
  c->generation++;
  relay.free_slots[relay.free_count++] = slot;
  say("closed", c->id, 0);
}

static void run(int slot) {
  struct connection *c = &relay.slots[slot];
  if (c->connecting) return;
  int up = direction_move(&relay.pump, &c->up);
  int down = up == DIRECTION_FAILED ? DIRECTION_FAILED : direction_move(&relay.pump, &c->down);
  if (up == DIRECTION_FAILED || down == DIRECTION_FAILED) finish(slot, 1);
  else if (up == DIRECTION_DONE && down == DIRECTION_DONE) finish(slot, 0);
}

static void connected(int slot) {
  struct connection *c = &relay.slots[slot];
  /* The event may be the client's (its first bytes): the connect has ended only once the upstream is writable. */
  struct pollfd ready = {.fd = c->upstream, .events = POLLOUT};
  if (poll(&ready, 1, 0) == 0) return;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(c->upstream, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return finish(slot, 1);
  c->connecting = 0;
  run(slot);
}

/* The upstream connection to ADDRESS:PORT, started (non-blocking). The fd, or -1 with errno. */
static int connect_upstream(const char *address, unsigned port) {
  struct sockaddr_storage to;
  socklen_t to_len;
  memset(&to, 0, sizeof to);
  struct sockaddr_in *v4 = (struct sockaddr_in *)&to;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&to;
  if (inet_pton(AF_INET, address, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    to_len = sizeof *v4;
  } else if (inet_pton(AF_INET6, address, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    to_len = sizeof *v6;
  } else {
    errno = EINVAL;
    return -1;
  }
  int fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int on = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  if (connect(fd, (struct sockaddr *)&to, to_len) != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

/* `take ID FD INODE ADDRESS PORT`: a duplicate of envd's fd, if it is still the socket envd named. */
static void take(const char *line) {
  unsigned long long id, inode;
  int fd;
  unsigned port;
  char address[64];
  if (sscanf(line, "take %llu %d %llu %63s %u", &id, &fd, &inode, address, &port) != 5) return;
  if (relay.free_count == 0) return say("refused", id, EMFILE);
  int client = (int)syscall(SYS_pidfd_getfd, relay.pidfd, fd, 0);
  if (client < 0) return say("refused", id, errno);
  struct stat st;
  if (fstat(client, &st) != 0 || !S_ISSOCK(st.st_mode) || (unsigned long long)st.st_ino != inode) {
    close(client);
    return say("refused", id, ESTALE);
  }
  (void)set_nonblocking(client); /* shared with envd's, where it is already */
  int upstream = connect_upstream(address, port);
  if (upstream < 0) {
    reset_close(client);
    say("taken", id, 0);
    return say("closed", id, 0);
  }
  int slot = relay.free_slots[--relay.free_count];
  struct connection *c = &relay.slots[slot];
  *c = (struct connection){.id = id, .generation = c->generation, .used = 1, .connecting = 1, .client = client, .upstream = upstream};
  direction_init(&c->up, client, upstream);
  direction_init(&c->down, upstream, client);
  say("taken", id, 0);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = key_of(slot)};
  if (epoll_ctl(relay.epoll, EPOLL_CTL_ADD, client, &ev) != 0 || epoll_ctl(relay.epoll, EPOLL_CTL_ADD, upstream, &ev) != 0) return finish(slot, 1);
}

/* `steer ID PID FD INODE ADDRESS PORT`: fd FD of PID, if still the listener of inode INODE, gets ADDRESS:PORT's new connections in the kernel (steer.h). */
static void steer(const char *line) {
  unsigned long long id, inode;
  int pid, fd;
  unsigned port;
  char address[64];
  if (sscanf(line, "steer %llu %d %d %llu %63s %u", &id, &pid, &fd, &inode, address, &port) != 6) return;
  int owner = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  int listener = owner < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, owner, fd, 0);
  int err = errno;
  if (owner >= 0) close(owner);
  if (listener < 0) return say("unsteered", id, err);
  struct stat st;
  if (fstat(listener, &st) != 0 || !S_ISSOCK(st.st_mode) || (unsigned long long)st.st_ino != inode) {
    close(listener);
    return say("unsteered", id, ESTALE);
  }
  int steered = steer_insert(address, port, listener);
  err = errno;
  /* The map keeps the socket itself, not this descriptor: the user's close() of the listener still ends it (and its key). */
  close(listener);
  say(steered == 0 ? "steered" : "unsteered", id, steered == 0 ? 0 : err);
}

/* `unsteer ADDRESS PORT`: new connections there reach envd's listener again (the relay), or nothing once it closed. */
static void unsteer(const char *line) {
  unsigned port;
  char address[64];
  if (sscanf(line, "unsteer %63s %u", address, &port) == 2) steer_delete(address, port);
}

static void command(const char *line) {
  if (strncmp(line, "take ", 5) == 0) take(line);
  else if (strncmp(line, "steer ", 6) == 0) steer(line);
  else if (strncmp(line, "unsteer ", 8) == 0) unsteer(line);
}

/* Reads envd's lines; 0 at its end. */
static int read_control(void) {
  for (;;) {
    ssize_t n = read(0, relay.line + relay.line_used, sizeof relay.line - relay.line_used);
    if (n == 0) return 0;
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 1 : 0;
    relay.line_used += (size_t)n;
    char *start = relay.line, *end;
    while ((end = memchr(start, '\n', relay.line_used - (size_t)(start - relay.line)))) {
      *end = '\0';
      command(start);
      start = end + 1;
    }
    relay.line_used -= (size_t)(start - relay.line);
    memmove(relay.line, start, relay.line_used);
    if (relay.line_used == sizeof relay.line) relay.line_used = 0; /* no line is this long: drop it */
  }
}

static void run_starved(void) {
  for (int slot = 0; slot < FORWARD_MAX_CONNECTIONS; slot++) {
    struct connection *c = &relay.slots[slot];
    if (c->used && (c->up.starved || c->down.starved)) run(slot);
  }
}

static void raise_fd_limit(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= WANTED_FDS) return;
  limit.rlim_cur = limit.rlim_max < WANTED_FDS ? limit.rlim_max : WANTED_FDS;
  (void)setrlimit(RLIMIT_NOFILE, &limit);
}

int forward_main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: envd-holder --forward ENVD_PID BUFFER_BYTES\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  relay.pidfd = (int)syscall(SYS_pidfd_open, (pid_t)atoi(argv[2]), 0);
  relay.epoll = epoll_create1(EPOLL_CLOEXEC);
  if (relay.pidfd < 0 || relay.epoll < 0) {
    fprintf(stderr, "envd-holder --forward: %s (%s)\n", strerror(errno), errno_name(errno));
    return 1;
  }
  pump_init(&relay.pump, (size_t)strtoull(argv[3], NULL, 10));
  for (int slot = FORWARD_MAX_CONNECTIONS - 1; slot >= 0; slot--) relay.free_slots[relay.free_count++] = slot;
  (void)set_nonblocking(0);
  struct epoll_event control = {.events = EPOLLIN, .data.u64 = CONTROL_KEY};
  if (epoll_ctl(relay.epoll, EPOLL_CTL_ADD, 0, &control) != 0) return 1;
  struct epoll_event events[EVENTS];
  for (;;) {
    int n = epoll_wait(relay.epoll, events, EVENTS, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 1;
    for (int i = 0; i < n; i++) {
      uint64_t key = events[i].data.u64;
      if (key == CONTROL_KEY) {
        if (!read_control()) return 0;
        continue;
      }
      int slot = (int)(key & 0xffffffffu);
      struct connection *c = &relay.slots[slot];
      if (!c->used || c->generation != (unsigned)(key >> 32)) continue; /* ended earlier in this batch */
      if (c->connecting) connected(slot);
      else run(slot);
    }
    if (pump_unstarved(&relay.pump)) run_starved();
  }
}
