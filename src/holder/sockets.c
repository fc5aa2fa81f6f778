/* sockets.c — `--watch-sockets`: listening sockets by sock_diag netlink (sockets.h). */
#define _GNU_SOURCE
#include "sockets.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* The kernel's state bits (include/net/tcp_states.h): a TCP listener; a UDP socket bound but not connected is "closed". */
#define TCPF_LISTEN (1u << 10)
#define TCPF_CLOSE (1u << 7)
/* Polling may take at most 1 % of a core (POLL_CPU_SHARE in src/ports/port-table.ts), and waits at most this long. */
#define CPU_SHARE_DIVISOR 100
#define MAX_WAIT_MS 1000
#define MAX_SOCKETS_LIMIT 65536
/* "udp " + the longest IPv6 text + port, inode, uid and spaces, with room to spare. */
#define LINE_BYTES 128

struct set {
  char *text;
  size_t used, capacity;
  unsigned lines, max_lines;
};

static const struct dump {
  const char *name;
  unsigned char family, protocol;
  uint32_t states;
} DUMPS[] = {
  {"tcp", AF_INET, IPPROTO_TCP, TCPF_LISTEN},
  {"tcp", AF_INET6, IPPROTO_TCP, TCPF_LISTEN},
  {"udp", AF_INET, IPPROTO_UDP, TCPF_CLOSE},
  {"udp", AF_INET6, IPPROTO_UDP, TCPF_CLOSE},
};

static int failed(const char *call) {
  fprintf(stderr, "envd-holder --watch-sockets: %s: %s (%s)\n", call, strerror(errno), errno_name(errno));
  return 1;
}

/* One socket as a line of the set; a UDP socket on port 0 is created but not bound, so not listed (as in /proc/net). */
static void add_socket(struct set *set, const struct dump *dump, const struct inet_diag_msg *msg) {
  unsigned port = ntohs(msg->id.idiag_sport);
  if (port == 0 || set->lines >= set->max_lines) return;
  char address[INET6_ADDRSTRLEN];
  if (!inet_ntop(msg->idiag_family, msg->id.idiag_src, address, sizeof address)) return;
  int n = snprintf(set->text + set->used, set->capacity - set->used, "%s %s %u %u %u\n", dump->name, address, port, msg->idiag_inode, msg->idiag_uid);
  if (n < 0 || (size_t)n >= set->capacity - set->used) return;
  set->used += (size_t)n;
  set->lines++;
}

/*
 * One dump request and its answer up to NLMSG_DONE. Only the listening hash
 * is walked for TCP when LISTEN is the only state asked for: that is why this
 * is cheap where /proc/net/tcp6 walks every bucket of the established hash.
 * The answer is read to its end even past the set's limit, so the next dump
 * starts on a clean socket. 0, or -1 with errno.
 */
static int dump_one(int fd, const struct dump *dump, struct set *set) {
  struct {
    struct nlmsghdr header;
    struct inet_diag_req_v2 request;
  } ask = {
    .header = {.nlmsg_len = sizeof ask, .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
    .request = {.sdiag_family = dump->family, .sdiag_protocol = dump->protocol, .idiag_states = dump->states},
  };
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(fd, &ask, sizeof ask, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) return -1;
  /* uint32_t: netlink messages are 4-byte aligned. */
  static uint32_t buffer[8192];
  for (;;) {
    struct sockaddr_nl from;
    socklen_t from_len = sizeof from;
    ssize_t got = recvfrom(fd, buffer, sizeof buffer, 0, (struct sockaddr *)&from, &from_len);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) return errno = EPROTO, -1;
    /* Only the kernel (port 0) answers a dump: anything else is no part of it. */
    if (from.nl_pid != 0) continue;
    size_t left = (size_t)got;
    for (struct nlmsghdr *h = (struct nlmsghdr *)buffer; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return 0;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *error = NLMSG_DATA(h);
        return errno = error->error < 0 ? -error->error : EPROTO, -1;
      }
      if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) add_socket(set, dump, NLMSG_DATA(h));
    }
  }
}

static int dump_all(int fd, struct set *set) {
  set->used = 0;
  set->lines = 0;
  for (size_t i = 0; i < sizeof DUMPS / sizeof DUMPS[0]; i++)
    if (dump_one(fd, &DUMPS[i], set) < 0) return -1;
  set->text[set->used++] = '.';
  set->text[set->used++] = '\n';
  return 0;
}

/*
 * The CPU this process has used, in microseconds: what the 1 % share is of.
 * Not the wall clock, which counts the time a loaded machine kept the dump
 * waiting for a CPU, and whose milliseconds are too coarse for a dump of
 * ~0.1 ms (one tick over a millisecond's edge would stretch the wait 100x).
 */
static uint64_t cpu_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static long parse_positive(const char *text, long max) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  return errno || end == text || *end || v < 1 || v > max ? -1 : v;
}

int watch_sockets_main(int argc, char **argv) {
  long interval = argc == 4 ? parse_positive(argv[2], MAX_WAIT_MS) : -1;
  long max = argc == 4 ? parse_positive(argv[3], MAX_SOCKETS_LIMIT) : -1;
  if (interval < 0 || max < 0) {
    fprintf(stderr, "usage: envd-holder --watch-sockets INTERVAL_MS(1-%d) MAX_SOCKETS(1-%d)\n", MAX_WAIT_MS, MAX_SOCKETS_LIMIT);
    return 2;
  }
  /* Two sets, the last one written and the one just read: a set is written only when it changed, so a quiet guest costs envd nothing. */
  struct set sets[2];
  for (int i = 0; i < 2; i++) {
    sets[i] = (struct set){.capacity = (size_t)max * LINE_BYTES + 2, .max_lines = (unsigned)max};
    sets[i].text = malloc(sets[i].capacity);
    if (!sets[i].text) return failed("malloc");
  }
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return failed("socket(NETLINK_SOCK_DIAG)");
  struct set *last = &sets[0], *now = &sets[1];
  last->used = 0;
  for (;;) {
    uint64_t started = cpu_us();
    if (dump_all(fd, now) < 0) return failed("sock_diag dump");
    if (now->used != last->used || memcmp(now->text, last->text, now->used) != 0) {
      /* EPIPE: envd is gone or stopped reading; nothing is left to do. */
      if (write_all(STDOUT_FILENO, now->text, now->used) < 0) return errno == EPIPE ? 0 : failed("write");
      struct set *swap = last;
      last = now;
      now = swap;
    }
    uint64_t wait = (cpu_us() - started) * CPU_SHARE_DIVISOR / 1000u;
    if (wait < (uint64_t)interval) wait = (uint64_t)interval;
    if (wait > MAX_WAIT_MS) wait = MAX_WAIT_MS;
    /*
     * The wait is a poll on stdin, a pipe from envd that nothing is written
     * to: when envd exits, however it dies, the pipe hangs up and the watch
     * ends with it.
     */
    struct pollfd in = {.fd = STDIN_FILENO, .events = POLLIN};
    int ready = poll(&in, 1, (int)wait);
    if (ready < 0 && errno != EINTR) return failed("poll");
    if (ready > 0) return 0;
  }
}
