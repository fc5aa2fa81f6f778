/*
 * envd-holder: the per-command holder (docs/holder-protocol.md is the spec).
 *
 * One small process per command sits between envd and the command, like
 * conmon or containerd-shim: it owns the command's pipes (or pty master), so
 * they outlive envd; writes the kept output to segment files within global
 * budgets, so it lives outside envd's heap; records the exit status; and
 * serves a live channel on a unix socket that a (re)started envd connects to.
 *
 * Shape: single-threaded, one poll(2) loop, no signal handlers (SIGCHLD comes
 * through a signalfd, SIGPIPE and SIGHUP are ignored), so EINTR is rare but
 * still retried. Memory is fixed: one read buffer, one client input buffer
 * and one bounded ring of unsent client output, all static. Nothing grows
 * with the command's output; no malloc is ever called by this file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "direct.h"
#include "json-text.h"
#include "receive.h"
#include "spawner.h"

/* The usage file and the wire are little endian; the holder stores native u64s into the usage file. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "envd-holder assumes a little-endian machine");

#define PROTOCOL_VERSION 3
#define CHUNK 65536                      /* one read(2) from the command */
#define MAX_IN_PAYLOAD 65536             /* largest payload envd may send */
#define LIVE_HIGH (256 * 1024)           /* unsent bytes above which output is no longer read (LIVE on) */
#define DATA_HEADER 14                   /* type, length, stream, logEnd */
#define TEXT_MAX 65536                   /* largest TEXT payload after its stream and logEnd: envd reads 64 KiB at a time */
/*
 * The ring holds LIVE_HIGH plus what one read becomes (read only while at or
 * below LIVE_HIGH) plus small replies. A read becomes one DATA; as TEXT it
 * may grow 6 times (control characters as \u00xx), so TEXT reads are cut to
 * what the ring can take (read_source) rather than the ring sized for 6 x
 * CHUNK: a ring that wraps touches all of its pages.
 */
#define RING_CAP (LIVE_HIGH + DATA_HEADER + CHUNK + 4096)
#define GRACE_MS 200                     /* how long output may stay open once the shell is reaped */
#define ACCEPT_PAUSE_MS 100              /* back-off after accept fails for lack of fds or memory */
#define USAGE_SLOTS 4096
#define USAGE_BYTES (USAGE_SLOTS * 16)
#define STREAM_STDOUT 1
#define STREAM_STDERR 2

enum { MSG_LIVE_ON = 0x01, MSG_LIVE_OFF = 0x02, MSG_STDIN = 0x03, MSG_STDIN_EOF = 0x04, MSG_RESIZE = 0x05,
       MSG_DIRECT_ON = 0x06, MSG_DIRECT_GO = 0x07, MSG_DIRECT_OFF = 0x08, MSG_DIRECT_PING = 0x09 };
enum { MSG_HELLO = 0x80, MSG_SYNC = 0x81, MSG_DATA = 0x82, MSG_ACK = 0x83, MSG_REAPED = 0x84, MSG_EXIT = 0x85, MSG_TEXT = 0x86,
       MSG_DIRECT_READY = 0x87, MSG_DIRECT_ENDED = 0x88 };
enum { LIVE_FLAG_TEXT = 0x01 };
/*
 * What a LIVE client gets: nothing (LIVE off), DATA, or TEXT; or, while its stream client's socket is lent
 * (direct.h), nothing yet (DIRECT_WAIT: envd still writes what it has) and then events on that socket
 * (DIRECT). One state, so LIVE_OFF cannot leave TEXT or the socket on.
 */
enum { SEND_NOTHING = 0, SEND_DATA, SEND_TEXT, SEND_DIRECT_WAIT, SEND_DIRECT };
enum { DIRECT_ENDED_OFF = 0, DIRECT_ENDED_REFUSED = 1, DIRECT_ENDED_FAILED = 2 };
enum { ACK_OK = 0, ACK_NO_STDIN = 1, ACK_STDIN_CLOSED = 2, ACK_NOT_PTY = 3 };
enum { TIER_MEMORY = 0, TIER_SPOOL = 1 };

/* ---- options ---- */
static const char *opt_dir, *opt_usage, *opt_spool_dir;
static unsigned opt_slot;
static uint64_t opt_memory_budget, opt_spool_budget, opt_cap;
static int opt_stdin, opt_pty;
static unsigned short opt_cols, opt_rows;
static char **opt_argv;
static const char *cmd_id; /* last component of --dir: names the spool segments */

/* ---- process state ---- */
static pid_t shell_pid = -1;
static int reaped, exit_code = -1, exit_signal = 0;
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int sock_created;
static int listen_fd = -1, signal_fd = -1;

/* Output sources: two pipes, or the pty master as the one stdout source. */
struct source { int fd; int stream; int eof; };
static struct source sources[2];
static int source_count;
static int pty_fd = -1;   /* the master: output source and stdin sink at once */
static int stdin_fd = -1; /* pipe write end, or pty_fd */
static int stdin_closed;

/* ---- kept output ---- */
static uint64_t *slots; /* the mmap'd usage file: [slot*2] memory bytes, [slot*2+1] spool bytes */
static int tier = TIER_MEMORY;
static int seg_fd = -1, seg_tier = -1;
static uint64_t seg_len;
static unsigned seg_count;    /* n of the next segment, across both tiers */
static uint64_t tier_bytes[2]; /* this command's totals per tier */
static uint64_t kept[3];       /* kept bytes of the command's output, by stream */
static int truncated[3];
static int segments_fd = -1;
static uint64_t segments_len;
static int status_fd = -1; /* status.tmp, its space taken at start */

/* ---- live client ---- */
static int client_fd = -1, live; /* SEND_NOTHING, SEND_DATA or SEND_TEXT */
/* For TEXT: each stream's decoder, and its last bytes to seed the decoder when LIVE goes on. */
static struct utf8_state text_state[3];
static unsigned char tail[3][3];
static size_t tail_len[3];
static unsigned char tbuf[9 + TEXT_MAX];
static unsigned char ring[RING_CAP];
static size_t ring_head, ring_len;
static unsigned char inbuf[5 + MAX_IN_PAYLOAD]; /* one whole message always fits after compaction */
static size_t in_start, in_len;
/* A STDIN (or a pty's ^D) being written: its bytes stay in inbuf, which is not touched until it completes. */
static int pend_active;
static uint32_t pend_id;
static const unsigned char *pend_ptr;
static size_t pend_left;

/* The read buffer keeps 5 bytes in front of the data, so a frame goes to its segment with one write. */
static unsigned char rbuf[5 + CHUNK];

static uint64_t log_end(void) { return tier_bytes[0] + tier_bytes[1]; }

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void put_u16(unsigned char *p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }
static void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static void put_u64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff; }
static uint32_t get_u32(const unsigned char *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get_u64(const unsigned char *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static uint16_t get_u16(const unsigned char *p) { return p[0] | (uint16_t)(p[1] << 8); }

/* For blocking fds (files, the final flush): a partial write is continued, EINTR retried. */
static int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* ---- startup failures: one "error" line for envd, then exit 1 ---- */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
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
  if (shell_pid > 0) {
    kill(-shell_pid, SIGKILL); /* it leads its own group by now (ready waits for that) */
    kill(shell_pid, SIGKILL);
    while (waitpid(shell_pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (sock_created) unlink(sock_path);
  exit(1);
}

/* ---- arguments ---- */

static uint64_t parse_u64(const char *name, const char *text) {
  if (!text || *text < '0' || *text > '9') fail("%s needs a non-negative integer", name);
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end) fail("%s: bad number %s", name, text);
  return v;
}

static void parse_args(int argc, char **argv) {
  int have_slot = 0, have_mem = 0, have_spool = 0, have_cap = 0;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--") == 0) { i++; break; }
    if (strcmp(a, "--stdin") == 0) { opt_stdin = 1; continue; }
    if (!v) fail("%s needs a value", a);
    if (strcmp(a, "--dir") == 0) opt_dir = v;
    else if (strcmp(a, "--usage") == 0) opt_usage = v;
    else if (strcmp(a, "--spool-dir") == 0) opt_spool_dir = v;
    else if (strcmp(a, "--slot") == 0) { uint64_t s = parse_u64(a, v); if (s >= USAGE_SLOTS) fail("--slot must be below %d", USAGE_SLOTS); opt_slot = (unsigned)s; have_slot = 1; }
    else if (strcmp(a, "--memory-budget") == 0) { opt_memory_budget = parse_u64(a, v); have_mem = 1; }
    else if (strcmp(a, "--spool-budget") == 0) { opt_spool_budget = parse_u64(a, v); have_spool = 1; }
    else if (strcmp(a, "--cap") == 0) { opt_cap = parse_u64(a, v); have_cap = 1; }
    else if (strcmp(a, "--pty") == 0) {
      char *x;
      errno = 0;
      unsigned long c = strtoul(v, &x, 10), r = 0;
      int ok = x != v && *x == 'x';
      if (ok) { char *end; r = strtoul(x + 1, &end, 10); ok = end != x + 1 && !*end; }
      if (!ok || errno || c < 1 || c > 65535 || r < 1 || r > 65535) fail("--pty needs <cols>x<rows>, got %s", v);
      opt_pty = 1; opt_cols = (unsigned short)c; opt_rows = (unsigned short)r;
    } else fail("unknown option %s", a);
    i++;
  }
  if (!opt_dir || !opt_usage || !opt_spool_dir || !have_slot || !have_mem || !have_spool || !have_cap)
    fail("usage: envd-holder --dir D --usage F --slot N --memory-budget B --spool-dir D --spool-budget B --cap B [--stdin] [--pty CxR] -- FILE [ARGS...]");
  /* Segment paths are listed as absolute paths, and the holder's cwd is the command's. */
  if (opt_dir[0] != '/' || opt_spool_dir[0] != '/') fail("--dir and --spool-dir must be absolute paths");
  if (i >= argc) fail("no command after --");
  opt_argv = argv + i;
  const char *slash = strrchr(opt_dir, '/');
  cmd_id = slash + 1;
  if (!*cmd_id) fail("--dir must not end with /");
}

/* ---- files ---- */

/* Writes a small file with temp + rename, so a reader sees all of it or none. */
static int write_file_atomically(const char *name, const char *text) {
  char path[PATH_MAX], tmp[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", opt_dir, name) >= (int)sizeof path) { errno = ENAMETOOLONG; return -1; }
  if (snprintf(tmp, sizeof tmp, "%s/%s.tmp", opt_dir, name) >= (int)sizeof tmp) { errno = ENAMETOOLONG; return -1; }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  if (write_all(fd, text, strlen(text)) < 0) { int e = errno; close(fd); unlink(tmp); errno = e; return -1; }
  close(fd);
  if (rename(tmp, path) < 0) { int e = errno; unlink(tmp); errno = e; return -1; }
  return 0;
}

/* Field 22 of /proc/<pid>/stat: with the pid it names one process for good (pids are reused, start times are not). */
static int read_start_time(pid_t pid, unsigned long long *out) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n;
  do n = read(fd, buf, sizeof buf - 1); while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  /* The command name may contain spaces and ')': fields are counted after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p++;
  for (int field = 2; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  *out = strtoull(p, NULL, 10);
  return 0;
}

static void store_slot(void) {
  __atomic_store_n(&slots[opt_slot * 2], tier_bytes[TIER_MEMORY], __ATOMIC_RELAXED);
  __atomic_store_n(&slots[opt_slot * 2 + 1], tier_bytes[TIER_SPOOL], __ATOMIC_RELAXED);
}

/* What all commands hold in one tier; other holders may add a chunk each meanwhile, which the budget tolerates. */
static uint64_t sum_slots(int which) {
  uint64_t total = 0;
  for (unsigned i = 0; i < USAGE_SLOTS; i++) total += __atomic_load_n(&slots[i * 2 + which], __ATOMIC_RELAXED);
  return total;
}

/* Creates segment n of a tier and lists it in `segments` before any byte goes in, so a reader never misses one. */
static int open_segment(int which) {
  char path[PATH_MAX + 1];
  int len = which == TIER_MEMORY ? snprintf(path, sizeof path - 1, "%s/log.%u", opt_dir, seg_count)
                                 : snprintf(path, sizeof path - 1, "%s/%s.%u", opt_spool_dir, cmd_id, seg_count);
  if (len < 0 || len >= (int)sizeof path - 1) return -1;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  path[len] = '\n';
  ssize_t w;
  do w = pwrite(segments_fd, path, (size_t)len + 1, (off_t)segments_len); while (w < 0 && errno == EINTR);
  path[len] = 0;
  if (w != len + 1) {
    /* A half line would name a wrong file: take it back and give the segment up. */
    if (w > 0) (void)ftruncate(segments_fd, (off_t)segments_len);
    close(fd);
    unlink(path);
    return -1;
  }
  segments_len += (uint64_t)len + 1;
  if (seg_fd >= 0) close(seg_fd); /* tiers only move down: the old segment is complete */
  seg_fd = fd;
  seg_tier = which;
  seg_len = 0;
  seg_count++;
  return 0;
}

/* Appends one frame (header filled) with one write; on any failure the segment is cut back to its last whole frame. */
static int append_frame(int which, const unsigned char *frame, size_t frame_len) {
  if (seg_fd < 0 || seg_tier != which) {
    if (open_segment(which) < 0) return -1;
  }
  ssize_t w;
  do w = pwrite(seg_fd, frame, frame_len, (off_t)seg_len); while (w < 0 && errno == EINTR);
  if (w != (ssize_t)frame_len) {
    if (w > 0 && ftruncate(seg_fd, (off_t)seg_len) < 0) {
      /* Cannot happen on tmpfs or a local fs, but a torn frame must never be followed by more: give the segment up. */
      close(seg_fd);
      seg_fd = -1;
      if (which == TIER_SPOOL) opt_spool_budget = 0;
    }
    return -1;
  }
  seg_len += frame_len;
  tier_bytes[which] += frame_len;
  store_slot();
  return 0;
}

/*
 * Keeps what it may of a chunk (at `data`, with 5 writable bytes in front of
 * it for the frame header): per-stream cap, then the memory tier, the spool,
 * or nothing.
 */
static void keep_chunk(int stream, unsigned char *data, size_t n) {
  if (truncated[stream]) return; /* a truncated stream keeps nothing more: what is kept stays a prefix */
  unsigned char *frame = data - 5;
  size_t keep = n;
  if (kept[stream] + n > opt_cap) {
    keep = (size_t)(opt_cap - kept[stream]);
    /* Never end inside a UTF-8 character: back up while the first dropped byte continues one. */
    while (keep > 0 && (data[keep] & 0xC0) == 0x80) keep--;
    truncated[stream] = 1;
  }
  if (keep == 0) return;
  size_t frame_len = 5 + keep;
  frame[0] = (unsigned char)stream;
  put_u32(frame + 1, (uint32_t)keep);
  if (tier == TIER_MEMORY) {
    if (sum_slots(TIER_MEMORY) + frame_len <= opt_memory_budget && append_frame(TIER_MEMORY, frame, frame_len) == 0) {
      kept[stream] += keep;
      return;
    }
    /* Over the memory budget, or the memory tier's fs is full: this frame tries the spool, and so do all later ones. */
    tier = TIER_SPOOL;
  }
  if (sum_slots(TIER_SPOOL) + frame_len <= opt_spool_budget && append_frame(TIER_SPOOL, frame, frame_len) == 0) {
    kept[stream] += keep;
    return;
  }
  truncated[stream] = 1; /* dropped: the command goes on regardless */
}

/* ---- the live client ---- */

static void close_client(void) {
  if (client_fd < 0) return;
  close(client_fd);
  client_fd = -1;
  live = SEND_NOTHING;
  direct_close(); /* a lent socket goes with envd: its client must see the end when envd's copy closes */
  ring_head = ring_len = 0; /* its unsent bytes go with it */
  in_start = in_len = 0;
  pend_active = 0; /* the rest of a half-written STDIN is dropped: nobody is left to ACK it */
}

static void ring_copy(const void *src, size_t n) {
  size_t tail = (ring_head + ring_len) % RING_CAP;
  size_t first = n < RING_CAP - tail ? n : RING_CAP - tail;
  memcpy(ring + tail, src, first);
  memcpy(ring, (const unsigned char *)src + first, n - first);
  ring_len += n;
}

/* Queues one message. The flow control keeps the ring below RING_CAP; a client that still overflows it is dropped. */
static void queue(int type, const void *a, size_t alen, const void *b, size_t blen) {
  if (client_fd < 0) return;
  if (5 + alen + blen > RING_CAP - ring_len) { close_client(); return; }
  unsigned char head[5];
  head[0] = (unsigned char)type;
  put_u32(head + 1, (uint32_t)(alen + blen));
  ring_copy(head, 5);
  if (alen) ring_copy(a, alen);
  if (blen) ring_copy(b, blen);
}

static void queue_ack(uint32_t id, int status) {
  unsigned char p[5];
  put_u32(p, id);
  p[4] = (unsigned char)status;
  queue(MSG_ACK, p, sizeof p, NULL, 0);
}

static void queue_hello(void) {
  unsigned char p[25];
  put_u16(p, PROTOCOL_VERSION);
  put_u32(p + 2, (uint32_t)shell_pid);
  p[6] = (unsigned char)reaped;
  put_u32(p + 7, (uint32_t)exit_code);
  put_u32(p + 11, (uint32_t)exit_signal);
  p[15] = (unsigned char)truncated[STREAM_STDOUT];
  p[16] = (unsigned char)truncated[STREAM_STDERR];
  put_u64(p + 17, log_end());
  queue(MSG_HELLO, p, sizeof p, NULL, 0);
}

/* Gives the lent socket back (envd may write to it from DIRECT_ENDED on); later output goes to envd as TEXT. */
static void queue_direct_ended(int reason) {
  unsigned char p[9];
  put_u64(p, log_end());
  p[8] = (unsigned char)reason;
  queue(MSG_DIRECT_ENDED, p, sizeof p, NULL, 0);
}

static void end_direct(int reason) {
  direct_close();
  live = SEND_TEXT;
  queue_direct_ended(reason);
}

/* Continues the pending event; the socket goes back once it is out if envd asked for it, or at once on an error. */
static void write_direct(void) {
  int r = direct_flush();
  if (r < 0) end_direct(DIRECT_ENDED_FAILED);
  else if (r > 0 && direct.closing) end_direct(DIRECT_ENDED_OFF);
}

/* Sends what the socket takes now; never waits (the socket is non-blocking). */
static void flush_client(void) {
  while (client_fd >= 0 && ring_len > 0) {
    struct iovec iov[2];
    size_t first = ring_len < RING_CAP - ring_head ? ring_len : RING_CAP - ring_head;
    iov[0].iov_base = ring + ring_head;
    iov[0].iov_len = first;
    iov[1].iov_base = ring;
    iov[1].iov_len = ring_len - first;
    ssize_t w = writev(client_fd, iov, iov[1].iov_len ? 2 : 1);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_client(); /* EPIPE, ECONNRESET: SIGPIPE is ignored, so this is all a vanished envd costs */
      return;
    }
    ring_head = (ring_head + (size_t)w) % RING_CAP;
    ring_len -= (size_t)w;
  }
  /* Restart at the front when empty, so a client that keeps up only ever touches the first pages. */
  if (ring_len == 0) ring_head = 0;
}

/* Continues the pending stdin write; ACKs when all is written or the command's stdin is gone. */
static void write_pending(void) {
  while (pend_left > 0) {
    ssize_t w = write(stdin_fd, pend_ptr, pend_left);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return; /* the command does not read: wait for POLLOUT */
      /* EPIPE (nobody reads the pipe) or EIO (nobody holds the pty): the bytes have nowhere to go. */
      if (!opt_pty) {
        close(stdin_fd);
        stdin_fd = -1;
        stdin_closed = 1;
      }
      pend_active = 0;
      queue_ack(pend_id, ACK_STDIN_CLOSED);
      return;
    }
    pend_ptr += w;
    pend_left -= (size_t)w;
  }
  pend_active = 0;
  queue_ack(pend_id, ACK_OK);
}

static void start_write(uint32_t id, const unsigned char *bytes, size_t n) {
  pend_active = 1;
  pend_id = id;
  pend_ptr = bytes;
  pend_left = n;
  write_pending();
}

/* Handles one message; returns -1 when the client must be closed for it. */
static int handle_message(int type, const unsigned char *p, uint32_t len) {
  static const unsigned char veof = 0x04; /* ^D, the default VEOF */
  switch (type) {
  case MSG_LIVE_ON: {
    /* No payload (protocol 1), or one byte of flags: TEXT instead of DATA. */
    if (len > 1 || (len == 1 && (p[0] & ~LIVE_FLAG_TEXT))) return -1;
    direct_close();
    live = len == 1 && (p[0] & LIVE_FLAG_TEXT) ? SEND_TEXT : SEND_DATA;
    if (live == SEND_TEXT)
      for (int st = STREAM_STDOUT; st <= STREAM_STDERR; st++) utf8_seed(&text_state[st], tail[st], tail_len[st]);
    unsigned char s[8];
    put_u64(s, log_end());
    queue(MSG_SYNC, s, sizeof s, NULL, 0);
    return 0;
  }
  case MSG_LIVE_OFF:
    if (len != 0) return -1;
    live = SEND_NOTHING;
    direct_close(); /* nobody follows the output any more: envd has forgotten the lent socket too */
    return 0;
  case MSG_DIRECT_ON: {
    /*
     * envd's pid, the fd of the client's socket in envd, that socket's inode, flags (bit 0: chunked). Only a
     * caught-up TEXT client is lent one. Not allowed: envd stops asking; gone: that client is leaving.
     */
    if (len != 17) return -1;
    int fd = -1;
    int taken = live != SEND_TEXT ? DIRECT_GONE : direct_take((pid_t)get_u32(p), (int)get_u32(p + 4), get_u64(p + 8), &fd);
    if (taken != DIRECT_TAKEN) {
      queue_direct_ended(taken == DIRECT_NOT_ALLOWED ? DIRECT_ENDED_REFUSED : DIRECT_ENDED_FAILED);
      return 0;
    }
    direct.fd = fd;
    direct.chunked = p[16] & 1;
    direct.left = 0;
    /* No output is read until GO: envd first writes the TEXT sent before READY. */
    live = SEND_DIRECT_WAIT;
    queue(MSG_DIRECT_READY, NULL, 0, NULL, 0);
    return 0;
  }
  case MSG_DIRECT_GO:
    if (len != 0) return -1;
    if (live == SEND_DIRECT_WAIT) live = SEND_DIRECT;
    return 0;
  case MSG_DIRECT_OFF:
    /* Late (the socket already went back after an error) is not an error: that DIRECT_ENDED answers it. */
    if (len != 0) return -1;
    if (live == SEND_DIRECT && direct.left > 0) direct.closing = 1;
    else if (live == SEND_DIRECT || live == SEND_DIRECT_WAIT) end_direct(DIRECT_ENDED_OFF);
    return 0;
  case MSG_DIRECT_PING:
    /* envd's keep-alive, which it cannot write itself now; output on its way keeps the connection alive anyway. */
    if (len != 0) return -1;
    if (live == SEND_DIRECT && direct.left == 0) {
      direct_frame(0, 0);
      write_direct();
    }
    return 0;
  case MSG_STDIN: {
    if (len < 4) return -1;
    uint32_t id = get_u32(p);
    if (stdin_fd < 0 && !stdin_closed) queue_ack(id, ACK_NO_STDIN);
    else if (stdin_closed) queue_ack(id, ACK_STDIN_CLOSED);
    else start_write(id, p + 4, len - 4);
    return 0;
  }
  case MSG_STDIN_EOF: {
    if (len != 4) return -1;
    uint32_t id = get_u32(p);
    if (stdin_fd < 0 && !stdin_closed) queue_ack(id, ACK_NO_STDIN);
    else if (opt_pty) start_write(id, &veof, 1); /* a terminal stays writable after ^D */
    else if (stdin_closed) queue_ack(id, ACK_OK);
    else {
      close(stdin_fd);
      stdin_fd = -1;
      stdin_closed = 1;
      queue_ack(id, ACK_OK);
    }
    return 0;
  }
  case MSG_RESIZE: {
    if (len != 8) return -1;
    uint32_t id = get_u32(p);
    if (!opt_pty) { queue_ack(id, ACK_NOT_PTY); return 0; }
    struct winsize ws = { .ws_row = get_u16(p + 6), .ws_col = get_u16(p + 4) };
    /* The kernel sends SIGWINCH to the terminal's foreground group; on a master this cannot fail short of EBADF. */
    (void)ioctl(pty_fd, TIOCSWINSZ, &ws);
    queue_ack(id, ACK_OK);
    return 0;
  }
  default:
    return -1;
  }
}

/* Handles the whole messages buffered, stopping while a stdin write is pending or the client is behind. */
static void process_messages(void) {
  while (client_fd >= 0 && !pend_active && ring_len <= LIVE_HIGH) {
    size_t avail = in_len - in_start;
    if (avail < 5) return;
    const unsigned char *m = inbuf + in_start;
    uint32_t len = get_u32(m + 1);
    if (len > MAX_IN_PAYLOAD) { close_client(); return; }
    if (avail < 5 + (size_t)len) return;
    /* Consumed before it runs: a pending write keeps pointing into inbuf, which is not compacted until it ends. */
    in_start += 5 + (size_t)len;
    if (handle_message(m[0], m + 5, len) < 0) { close_client(); return; }
  }
}

static void read_client(void) {
  if (in_start > 0) {
    memmove(inbuf, inbuf + in_start, in_len - in_start);
    in_len -= in_start;
    in_start = 0;
  }
  /* Full of whole messages not yet handled (the client was behind): handle them first, read later. */
  if (in_len == sizeof inbuf) return;
  ssize_t n = read(client_fd, inbuf + in_len, sizeof inbuf - in_len);
  if (n > 0) in_len += (size_t)n;
  else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) close_client();
}

static void accept_client(uint64_t *accept_resume) {
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return;
    /* EMFILE/ENFILE/ENOMEM: the connection stays queued; retry later instead of spinning on a readable socket. */
    *accept_resume = now_ms() + ACCEPT_PAUSE_MS;
    return;
  }
  close_client(); /* one client at a time: the newest wins */
  client_fd = fd;
  queue_hello();
}

/* ---- the command ---- */

/* The last 3 bytes of a stream: enough to tell a character still incomplete at its end. */
static void remember_tail(int stream, const unsigned char *data, size_t n) {
  unsigned char *t = tail[stream];
  for (size_t i = n > 3 ? n - 3 : 0; i < n; i++) {
    if (tail_len[stream] == 3) {
      t[0] = t[1];
      t[1] = t[2];
      tail_len[stream] = 2;
    }
    t[tail_len[stream]++] = data[i];
  }
}

static void queue_text(int stream, size_t len) {
  tbuf[0] = (unsigned char)stream;
  put_u64(tbuf + 1, log_end());
  queue(MSG_TEXT, tbuf, 9 + len, NULL, 0);
}

/*
 * A chunk for a LIVE TEXT client: decoded and escaped in pieces of at most
 * TEXT_MAX, each piece kept as its own frame before its TEXT goes out, so
 * every TEXT's logEnd is a frame boundary a replay can stop at.
 */
static void keep_and_send_text(int stream, size_t n) {
  unsigned char *data = rbuf + 5;
  size_t at = 0;
  while (at < n) {
    size_t used;
    size_t len = json_text(&text_state[stream], data + at, n - at, tbuf + 9, TEXT_MAX, &used);
    /* The header goes into the 5 bytes in front of the piece: bytes already escaped, or rbuf's own. */
    keep_chunk(stream, data + at, used);
    queue_text(stream, len);
    at += used;
  }
}

/* A chunk for the lent socket: one read is always one event (its text fits), kept before it goes out. */
static void keep_and_write_direct(int stream, size_t n) {
  size_t used;
  size_t len = json_text(&text_state[stream], rbuf + 5, n, direct_text(), DIRECT_TEXT_CAP, &used);
  keep_chunk(stream, rbuf + 5, used);
  direct_frame(stream, len);
  write_direct();
}

/* How much to read: a CHUNK, or for TEXT 1/16 less (typical text, a few escapes per line, then goes out as one
   message) and no more than the ring can take at 6 bytes of text per byte (>= 10 KiB at LIVE_HIGH). */
static size_t read_size(void) {
  if (live == SEND_DIRECT) return DIRECT_READ;
  if (live != SEND_TEXT) return CHUNK;
  size_t room = RING_CAP - ring_len, headers = 8 * DATA_HEADER;
  size_t fits = room > headers ? (room - headers) / JSON_TEXT_MAX_GROWTH : 0;
  return fits < CHUNK - CHUNK / 16 ? fits : CHUNK - CHUNK / 16;
}

static void read_source(struct source *s) {
  size_t want = read_size();
  if (want == 0) return; /* not reached: sources are polled only while ring_len <= LIVE_HIGH */
  ssize_t n = read(s->fd, rbuf + 5, want);
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n <= 0) {
    /* A character left incomplete by the end of the stream is one U+FFFD, as a decoder's end() gives. */
    if (client_fd >= 0 && (live == SEND_TEXT || live == SEND_DIRECT) && text_state[s->stream].needed) {
      utf8_reset(&text_state[s->stream]);
      if (live == SEND_TEXT) {
        queue_text(s->stream, put_replacement(tbuf + 9));
      } else {
        direct_frame(s->stream, put_replacement(direct_text()));
        write_direct();
      }
    }
    /* EOF; EIO is how a pty master says no process holds the slave any more. */
    s->eof = 1;
    if (s->fd != pty_fd) close(s->fd);
    s->fd = -1;
    return;
  }
  remember_tail(s->stream, rbuf + 5, (size_t)n);
  if (client_fd >= 0 && live == SEND_TEXT) {
    keep_and_send_text(s->stream, (size_t)n);
    return;
  }
  if (client_fd >= 0 && live == SEND_DIRECT) {
    keep_and_write_direct(s->stream, (size_t)n);
    return;
  }
  keep_chunk(s->stream, rbuf + 5, (size_t)n);
  if (client_fd >= 0 && live == SEND_DATA) {
    unsigned char h[9];
    h[0] = (unsigned char)s->stream;
    put_u64(h + 1, log_end());
    queue(MSG_DATA, h, sizeof h, rbuf + 5, (size_t)n);
  }
}

/*
 * Back-pressure: with LIVE on and the client behind, the command's output waits in its pipe; so it does
 * while a lent socket is not yet to be written (DIRECT_WAIT) or has not taken the last event.
 */
static int output_held(void) {
  if (client_fd < 0) return 0;
  if (live == SEND_DIRECT_WAIT || (live == SEND_DIRECT && direct.left > 0)) return 1;
  return live && ring_len > LIVE_HIGH;
}

static void reap(void) {
  struct signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {}
  int status;
  pid_t r;
  do r = waitpid(shell_pid, &status, WNOHANG); while (r < 0 && errno == EINTR);
  if (r == 0) return;
  reaped = 1;
  if (r < 0) { exit_code = -1; exit_signal = 0; } /* ECHILD: cannot happen, we are its only reaper */
  else if (WIFSIGNALED(status)) { exit_code = -1; exit_signal = WTERMSIG(status); }
  else { exit_code = WEXITSTATUS(status); exit_signal = 0; }
  unsigned char p[8];
  put_u32(p, (uint32_t)exit_code);
  put_u32(p + 4, (uint32_t)exit_signal);
  queue(MSG_REAPED, p, sizeof p, NULL, 0);
}

static void close_fds_from(int first) {
  if (close_range((unsigned)first, ~0U, 0) == 0) return;
  /* Kernels before 5.9 have no close_range. */
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (long)rl.rlim_cur : 65536;
  for (long fd = first; fd < max; fd++) close((int)fd);
}

/* In the child between fork and exec: the command gets a clean process state and only fds 0, 1, 2. */
static void run_child(int in_fd, int out_fd, int err_fd, const char *slave_name, mode_t umask_before) {
  setsid();
  if (opt_pty) {
    int t = open(slave_name, O_RDWR); /* a session leader without a terminal acquires this one */
    if (t < 0) t = out_fd;            /* the slave the holder opened: TIOCSCTTY makes it ours all the same */
    (void)ioctl(t, TIOCSCTTY, 0);
    in_fd = out_fd = err_fd = t;
  } else if (in_fd < 0) {
    in_fd = open("/dev/null", O_RDONLY);
  }
  /* All holder fds are >= 3 (main makes sure of it), so these dup2s never clobber each other. */
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
  umask(umask_before);
  /*
   * envd (and so the holder) runs with OOMScoreAdjust=-1000, which children
   * inherit: the command goes back to the default, so the OOM killer takes user
   * processes first, never envd or the holders that keep their output. Raising
   * the score needs no privilege; a failure (no /proc) changes nothing else.
   */
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    (void)write(oom, "0", 1);
    close(oom);
  }
  /* Everything of the holder's is O_CLOEXEC already; this is belt and braces. It also closes the start pipe. */
  close_fds_from(3);
  execvp(opt_argv[0], opt_argv);
  char msg[512];
  int len = snprintf(msg, sizeof msg, "envd-holder: cannot run %s: %s\n", opt_argv[0], strerror(errno));
  if (len > (int)sizeof msg - 1) { len = (int)sizeof msg - 1; msg[len - 1] = '\n'; }
  (void)write_all(2, msg, (size_t)len);
  _exit(127);
}

static void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Creates the socket, the pipes or pty, and the command; returns once `ready` is written. */
static void start(void) {
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
  signal_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) fail("signalfd: %s", strerror(errno));

  /* Files and the socket are envd's only: 0600. The command gets envd's umask back. */
  mode_t umask_before = umask(077);

  int ufd = open(opt_usage, O_RDWR | O_CLOEXEC);
  if (ufd < 0) fail("cannot open %s: %s", opt_usage, strerror(errno));
  struct stat st;
  if (fstat(ufd, &st) < 0 || st.st_size < USAGE_BYTES) fail("%s must be at least %d bytes", opt_usage, USAGE_BYTES);
  void *map = mmap(NULL, USAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ufd, 0);
  if (map == MAP_FAILED) fail("cannot map %s: %s", opt_usage, strerror(errno));
  close(ufd);
  slots = map;
  store_slot(); /* this command holds nothing yet */

  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/segments", opt_dir) >= (int)sizeof path) fail("--dir is too long");
  segments_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (segments_fd < 0) fail("cannot create %s: %s", path, strerror(errno));
  /*
   * The memory tier may fill the state fs (a tmpfs) to the last page. The
   * segments list and the status must still be writable then, so their first
   * page is taken now (best effort: a fs without fallocate just does not get it).
   */
  (void)fallocate(segments_fd, FALLOC_FL_KEEP_SIZE, 0, 4096);
  if (snprintf(path, sizeof path, "%s/status.tmp", opt_dir) >= (int)sizeof path) fail("--dir is too long");
  status_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (status_fd < 0) fail("cannot create %s: %s", path, strerror(errno));
  (void)fallocate(status_fd, FALLOC_FL_KEEP_SIZE, 0, 4096);

  if (snprintf(sock_path, sizeof sock_path, "%s/sock", opt_dir) >= (int)sizeof sock_path)
    fail("socket path %s/sock is longer than %zu bytes", opt_dir, sizeof sock_path - 1);
  listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd < 0) fail("socket: %s", strerror(errno));
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, sock_path, strlen(sock_path));
  if (bind(listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0) fail("cannot bind %s: %s", sock_path, strerror(errno));
  sock_created = 1;
  if (listen(listen_fd, 4) < 0) fail("listen: %s", strerror(errno));

  int child_in = -1, child_out = -1, child_err = -1;
  char slave_name[128] = "";
  if (opt_pty) {
    pty_fd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (pty_fd < 0) fail("posix_openpt: %s", strerror(errno));
    if (grantpt(pty_fd) < 0 || unlockpt(pty_fd) < 0) fail("grantpt/unlockpt: %s", strerror(errno));
    const char *name = ptsname(pty_fd);
    if (!name || strlen(name) >= sizeof slave_name) fail("ptsname: %s", strerror(errno));
    strcpy(slave_name, name);
    struct winsize ws = { .ws_row = opt_rows, .ws_col = opt_cols };
    if (ioctl(pty_fd, TIOCSWINSZ, &ws) < 0) fail("TIOCSWINSZ: %s", strerror(errno));
    /* Held open until the fork: the master never sees a hangup (EIO) before the child has the slave. */
    child_out = open(slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (child_out < 0) fail("cannot open %s: %s", slave_name, strerror(errno));
    set_nonblocking(pty_fd);
    sources[0] = (struct source){ pty_fd, STREAM_STDOUT, 0 };
    source_count = 1;
    stdin_fd = pty_fd;
  } else {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) fail("pipe: %s", strerror(errno));
    child_out = out[1];
    child_err = err[1];
    /* Only the holder's ends are non-blocking: the command sees ordinary blocking pipes. */
    set_nonblocking(out[0]);
    set_nonblocking(err[0]);
    sources[0] = (struct source){ out[0], STREAM_STDOUT, 0 };
    sources[1] = (struct source){ err[0], STREAM_STDERR, 0 };
    source_count = 2;
    if (opt_stdin) {
      int in[2];
      if (pipe2(in, O_CLOEXEC) < 0) fail("pipe: %s", strerror(errno));
      child_in = in[0];
      stdin_fd = in[1];
      set_nonblocking(stdin_fd);
    }
  }

  /*
   * The start pipe: the child closes its end once it leads its own session, and
   * `ready` waits for that, so envd never signals a process group that does not
   * exist yet (a kill right after `ready` would otherwise miss the command).
   */
  int started[2];
  if (pipe2(started, O_CLOEXEC) < 0) fail("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) fail("fork: %s", strerror(errno));
  if (pid == 0) run_child(child_in, child_out, child_err, slave_name, umask_before);
  shell_pid = pid;
  if (child_in >= 0) close(child_in);
  close(child_out);
  if (child_err >= 0) close(child_err);
  close(started[1]);
  char byte;
  while (read(started[0], &byte, 1) < 0 && errno == EINTR) {}
  close(started[0]);

  /* The child cannot be reaped yet (SIGCHLD is only read in the loop), so its /proc entry is there. */
  unsigned long long shell_start, holder_start;
  if (read_start_time(shell_pid, &shell_start) < 0 || read_start_time(getpid(), &holder_start) < 0)
    fail("cannot read start times from /proc: %s", strerror(errno));
  char line[128];
  snprintf(line, sizeof line, "%d %llu %d %llu\n", (int)shell_pid, shell_start, (int)getpid(), holder_start);
  if (write_file_atomically("pid", line) < 0) fail("cannot write %s/pid: %s", opt_dir, strerror(errno));

  /* The pid record again, so envd need not read the file it was just written to. */
  snprintf(line, sizeof line, "ready %d %llu %d %llu\n", (int)shell_pid, shell_start, (int)getpid(), holder_start);
  (void)write_all(STDOUT_FILENO, line, strlen(line)); /* envd gone already: the command runs on regardless */
  /* Nothing may tie the holder to envd any more: its pipes to us are let go. */
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    for (int fd = 0; fd < 3; fd++) dup2(null_fd, fd);
    close(null_fd);
  }
}

/* Into the status.tmp opened at start (its page already taken, so a full state fs cannot stop it), then renamed. */
static void write_status(const char *line) {
  char tmp[PATH_MAX], path[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/status.tmp", opt_dir);
  snprintf(path, sizeof path, "%s/status", opt_dir);
  ssize_t w;
  do w = pwrite(status_fd, line, strlen(line), 0); while (w < 0 && errno == EINTR);
  close(status_fd);
  if (w == (ssize_t)strlen(line)) rename(tmp, path);
  else unlink(tmp); /* no status: envd then sees a lost command, which is what it is */
}

/* Output complete: status first (envd trusts it), then the socket goes, then EXIT to whoever listens. */
static void finish(void) __attribute__((noreturn));
static void finish(void) {
  for (int i = 0; i < source_count; i++)
    if (sources[i].fd >= 0 && sources[i].fd != pty_fd) close(sources[i].fd);
  if (pty_fd >= 0) close(pty_fd);
  else if (stdin_fd >= 0) close(stdin_fd);
  if (seg_fd >= 0) close(seg_fd);
  close(segments_fd);
  char line[128];
  snprintf(line, sizeof line, "%d %d %d %d %llu\n", exit_code, exit_signal, truncated[STREAM_STDOUT],
           truncated[STREAM_STDERR], (unsigned long long)log_end());
  write_status(line);
  unlink(sock_path);
  close(listen_fd);
  if (client_fd < 0) exit(0);
  /* All output is on the lent socket (the main loop finished its last event): it goes back before EXIT. */
  if (live == SEND_DIRECT || live == SEND_DIRECT_WAIT) end_direct(DIRECT_ENDED_OFF);
  unsigned char p[18];
  put_u32(p, (uint32_t)exit_code);
  put_u32(p + 4, (uint32_t)exit_signal);
  p[8] = (unsigned char)truncated[STREAM_STDOUT];
  p[9] = (unsigned char)truncated[STREAM_STDERR];
  put_u64(p + 10, log_end());
  queue(MSG_EXIT, p, sizeof p, NULL, 0);
  if (client_fd < 0) exit(0);
  /* Nothing else to do: wait for the client to take the rest, or to go. */
  fcntl(client_fd, F_SETFL, fcntl(client_fd, F_GETFL) & ~O_NONBLOCK);
  flush_client();
  exit(0);
}

/* One command's holder: from the command line of an exec, or from a request in a spawner's child. */
static int holder_main(int argc, char **argv) {
  parse_args(argc, argv);
  start();

  uint64_t grace_used = 0, last = now_ms(), accept_resume = 0;
  int polled_sources = 0;
  for (;;) {
    uint64_t t = now_ms();
    /* Grace runs only while the outputs were being polled: a stalled live client does not use it up. */
    if (polled_sources) grace_used += t - last;
    last = t;

    int open_sources = 0;
    for (int i = 0; i < source_count; i++) open_sources += !sources[i].eof;
    /* A half-written event on the lent socket is finished first: EXIT must follow all output there. */
    int direct_pending = client_fd >= 0 && live == SEND_DIRECT && direct.left > 0;
    if (reaped && (open_sources == 0 || grace_used >= GRACE_MS) && !direct_pending) break;

    /* Flush first: what it frees may let buffered messages be handled before deciding whether to read more. */
    if (client_fd >= 0 && ring_len > 0) flush_client();
    process_messages();

    struct pollfd fds[7];
    int nfds = 0, i_listen = -1, i_signal = -1, i_client = -1, i_stdin = -1, i_direct = -1, i_src[2] = { -1, -1 };
    int timeout = -1;
    if (accept_resume && t >= accept_resume) accept_resume = 0;
    if (!accept_resume) { i_listen = nfds; fds[nfds++] = (struct pollfd){ listen_fd, POLLIN, 0 }; }
    else timeout = (int)(accept_resume - t);
    if (!reaped) { i_signal = nfds; fds[nfds++] = (struct pollfd){ signal_fd, POLLIN, 0 }; }
    int reading = !output_held();
    polled_sources = 0;
    for (int i = 0; i < source_count; i++) {
      if (sources[i].eof || !reading) continue;
      i_src[i] = nfds;
      fds[nfds++] = (struct pollfd){ sources[i].fd, POLLIN, 0 };
      polled_sources = reaped;
    }
    if (polled_sources) {
      int left = (int)(GRACE_MS - grace_used);
      if (timeout < 0 || left < timeout) timeout = left;
    }
    if (pend_active) { i_stdin = nfds; fds[nfds++] = (struct pollfd){ stdin_fd, POLLOUT, 0 }; }
    if (direct_pending) { i_direct = nfds; fds[nfds++] = (struct pollfd){ direct.fd, POLLOUT, 0 }; }
    if (client_fd >= 0) {
      short events = 0;
      if (!pend_active && ring_len <= LIVE_HIGH) events |= POLLIN;
      if (ring_len > 0) events |= POLLOUT;
      i_client = nfds;
      fds[nfds++] = (struct pollfd){ client_fd, events, 0 };
    }

    if (poll(fds, (nfds_t)nfds, timeout) < 0) {
      if (errno == EINTR) continue;
      /* Cannot happen with valid fds; avoid a hot loop if it ever does. */
      struct timespec ts = { 0, 10 * 1000 * 1000 };
      nanosleep(&ts, NULL);
      continue;
    }

    for (int i = 0; i < source_count; i++) {
      if (i_src[i] < 0 || !fds[i_src[i]].revents) continue;
      /* Re-checked per source: two chunks in one round must not push the ring past its bound. */
      if (output_held()) break;
      read_source(&sources[i]);
    }
    /* After the output of the same round, so what the shell printed last usually precedes REAPED (not a promise). */
    if (i_signal >= 0 && fds[i_signal].revents) reap();
    if (i_stdin >= 0 && fds[i_stdin].revents && pend_active) write_pending();
    /* Re-checked: a message handled above may have given the socket back already. */
    if (i_direct >= 0 && fds[i_direct].revents && live == SEND_DIRECT && direct.left > 0) write_direct();
    if (i_client >= 0 && client_fd >= 0) {
      short re = fds[i_client].revents;
      if (re & POLLOUT) flush_client();
      if (client_fd >= 0 && (re & POLLIN)) read_client();
      else if (client_fd >= 0 && (re & (POLLHUP | POLLERR | POLLNVAL))) close_client();
    }
    if (i_listen >= 0 && fds[i_listen].revents) accept_client(&accept_resume);
  }
  finish();
}

int main(int argc, char **argv) {
  /* A second job for the same binary: the body of a large upload (receive.h). */
  if (argc > 1 && strcmp(argv[1], "--receive") == 0) return receive_main(argc, argv);
  /* A third: starting holders for envd, so envd never forks per command (spawner.h). */
  if (argc > 1 && strcmp(argv[1], "--spawner") == 0) return spawner_main(argc, argv, holder_main);
  return holder_main(argc, argv);
}

