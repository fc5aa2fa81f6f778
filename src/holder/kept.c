/* kept.c — the command's kept output (kept.h). */
#define _GNU_SOURCE
#include "kept.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "command.h"
#include "fail.h"
#include "options.h"
#include "wire.h"

#define USAGE_BYTES (USAGE_SLOTS * 16)
enum { TIER_MEMORY = 0, TIER_SPOOL = 1 };

static uint64_t *slots; /* the mmap'd usage file: [slot*2] memory bytes, [slot*2+1] spool bytes */
static int tier = TIER_MEMORY;
static int seg_fd = -1, seg_tier = -1;
static uint64_t seg_len;
static unsigned seg_count;     /* n of the next segment, across both tiers */
static uint64_t tier_bytes[2]; /* this command's totals per tier */
static uint64_t kept[3];       /* kept bytes of the command's output, by stream */
static int truncated[3];
static int spool_broken;       /* a spool segment could not be cut back after a torn write: no more spooling */
static int segments_fd = -1;
static uint64_t segments_len;
/* The offsets file, mapped: [0] stdout written, [1] stderr written, [2] stdout kept, [3] stderr kept. */
#define OFFSETS_BYTES 32
static uint64_t *offsets;

uint64_t log_end(void) { return tier_bytes[TIER_MEMORY] + tier_bytes[TIER_SPOOL]; }

int kept_truncated(int stream) { return truncated[stream]; }

static void store_slot(void) {
  __atomic_store_n(&slots[opt.slot * 2], tier_bytes[TIER_MEMORY], __ATOMIC_RELAXED);
  __atomic_store_n(&slots[opt.slot * 2 + 1], tier_bytes[TIER_SPOOL], __ATOMIC_RELAXED);
}

/* What all commands hold in one tier; other holders may add a chunk each meanwhile, which the budget tolerates. */
static uint64_t sum_slots(int which) {
  uint64_t total = 0;
  for (unsigned i = 0; i < USAGE_SLOTS; i++) total += __atomic_load_n(&slots[i * 2 + which], __ATOMIC_RELAXED);
  return total;
}

void open_kept_output(void) {
  int ufd = open(opt.usage, O_RDWR | O_CLOEXEC);
  if (ufd < 0) fail("cannot open %s: %s", opt.usage, strerror(errno));
  struct stat st;
  if (fstat(ufd, &st) < 0 || st.st_size < USAGE_BYTES) fail("%s must be at least %d bytes", opt.usage, USAGE_BYTES);
  void *map = mmap(NULL, USAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ufd, 0);
  if (map == MAP_FAILED) fail("cannot map %s: %s", opt.usage, strerror(errno));
  close(ufd);
  slots = map;
  store_slot(); /* this command holds nothing yet */

  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/segments", opt.dir) >= (int)sizeof path) fail("--dir is too long");
  segments_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (segments_fd < 0) fail("cannot create %s: %s", path, strerror(errno));
  /*
   * The memory tier may fill the state fs (a tmpfs) to the last page. The
   * segments list must still be writable then, so its first page is taken now
   * (best effort: a fs without fallocate just does not get it).
   */
  (void)fallocate(segments_fd, FALLOC_FL_KEEP_SIZE, 0, 4096);

  if (snprintf(path, sizeof path, "%s/offsets", opt.dir) >= (int)sizeof path) fail("--dir is too long");
  int ofd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (ofd < 0) fail("cannot create %s: %s", path, strerror(errno));
  /* Its page is taken now, like the list's: a full state tmpfs must not make the mapping fault (SIGBUS). */
  if (fallocate(ofd, 0, 0, OFFSETS_BYTES) < 0 && ftruncate(ofd, OFFSETS_BYTES) < 0) fail("cannot size %s: %s", path, strerror(errno));
  void *omap = mmap(NULL, OFFSETS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ofd, 0);
  if (omap == MAP_FAILED) fail("cannot map %s: %s", path, strerror(errno));
  close(ofd);
  offsets = omap;
}

void count_output(int stream, size_t n) {
  __atomic_store_n(&offsets[stream - 1], offsets[stream - 1] + n, __ATOMIC_RELAXED);
}

uint64_t output_offset(int stream) { return offsets[stream - 1]; }

static void count_kept(int stream, size_t n) {
  kept[stream] += n;
  __atomic_store_n(&offsets[1 + stream], kept[stream], __ATOMIC_RELAXED);
}

/* Creates segment n of a tier and lists it in `segments` before any byte goes in, so a reader never misses one. */
static int open_segment(int which) {
  char path[PATH_MAX + 1];
  int len = which == TIER_MEMORY ? snprintf(path, sizeof path - 1, "%s/log.%u", opt.dir, seg_count)
                                 : snprintf(path, sizeof path - 1, "%s/%s.%u", opt.spool_dir, opt.cmd_id, seg_count);
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
      if (which == TIER_SPOOL) spool_broken = 1;
    }
    return -1;
  }
  seg_len += frame_len;
  tier_bytes[which] += frame_len;
  store_slot();
  return 0;
}

void keep_chunk(int stream, unsigned char *data, size_t n) {
  if (truncated[stream]) return; /* a truncated stream keeps nothing more: what is kept stays a prefix */
  unsigned char *frame = data - FRAME_HEADER;
  size_t keep = n;
  if (kept[stream] + n > opt.cap) {
    keep = (size_t)(opt.cap - kept[stream]);
    /* Never end inside a UTF-8 character: back up while the first dropped byte continues one. */
    while (keep > 0 && (data[keep] & 0xC0) == 0x80) keep--;
    truncated[stream] = 1;
  }
  if (keep == 0) return;
  size_t frame_len = FRAME_HEADER + keep;
  frame[0] = (unsigned char)stream;
  put_u32(frame + 1, (uint32_t)keep);
  if (tier == TIER_MEMORY) {
    if (sum_slots(TIER_MEMORY) + frame_len <= opt.memory_budget && append_frame(TIER_MEMORY, frame, frame_len) == 0) {
      count_kept(stream, keep);
      return;
    }
    /* Over the memory budget, or the memory tier's fs is full: this frame tries the spool, and so do all later ones. */
    tier = TIER_SPOOL;
  }
  if (!spool_broken && sum_slots(TIER_SPOOL) + frame_len <= opt.spool_budget && append_frame(TIER_SPOOL, frame, frame_len) == 0) {
    count_kept(stream, keep);
    return;
  }
  truncated[stream] = 1; /* dropped: the command goes on regardless */
}

void close_kept_output(void) {
  if (seg_fd >= 0) close(seg_fd);
  seg_fd = -1;
  close(segments_fd);
  segments_fd = -1;
}
