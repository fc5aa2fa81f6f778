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

#include "fail.h"
#include "wire.h"

#define USAGE_BYTES (USAGE_SLOTS * 16)
enum { TIER_MEMORY = 0, TIER_SPOOL = 1 };

/* The offsets file: u64 written and kept, per stream. */
#define OFFSETS_BYTES 32

uint64_t log_end(const struct kept *k) { return k->tier_bytes[TIER_MEMORY] + k->tier_bytes[TIER_SPOOL]; }

int kept_truncated(const struct kept *k, int stream) { return k->truncated[stream]; }

static void store_slot(struct kept *k) {
  __atomic_store_n(&k->slots[k->opt->slot * 2], k->tier_bytes[TIER_MEMORY], __ATOMIC_RELAXED);
  __atomic_store_n(&k->slots[k->opt->slot * 2 + 1], k->tier_bytes[TIER_SPOOL], __ATOMIC_RELAXED);
}

/* What all commands hold in one tier; other holders may add a chunk each meanwhile, which the budget tolerates. */
static uint64_t sum_slots(const struct kept *k, int which) {
  uint64_t total = 0;
  for (unsigned i = 0; i < USAGE_SLOTS; i++) total += __atomic_load_n(&k->slots[i * 2 + which], __ATOMIC_RELAXED);
  return total;
}

void open_kept_output(struct kept *k, const struct options *opt) {
  *k = (struct kept){ .opt = opt, .tier = TIER_MEMORY, .seg_fd = -1, .seg_tier = -1, .segments_fd = -1 };
  int ufd = open(opt->usage, O_RDWR | O_CLOEXEC);
  if (ufd < 0) fail("cannot open %s: %s", opt->usage, strerror(errno));
  struct stat st;
  if (fstat(ufd, &st) < 0 || st.st_size < USAGE_BYTES) fail("%s must be at least %d bytes", opt->usage, USAGE_BYTES);
  void *map = mmap(NULL, USAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ufd, 0);
  if (map == MAP_FAILED) fail("cannot map %s: %s", opt->usage, strerror(errno));
  close(ufd);
  k->slots = map;
  store_slot(k); /* this command holds nothing yet */

  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/segments", opt->dir) >= (int)sizeof path) fail("--dir is too long");
  k->segments_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (k->segments_fd < 0) fail("cannot create %s: %s", path, strerror(errno));
  /*
   * The memory tier may fill the state fs (a tmpfs) to the last page. The
   * segments list must still be writable then, so its first page is taken now
   * (best effort: a fs without fallocate just does not get it).
   */
  (void)fallocate(k->segments_fd, FALLOC_FL_KEEP_SIZE, 0, 4096);

  if (snprintf(path, sizeof path, "%s/offsets", opt->dir) >= (int)sizeof path) fail("--dir is too long");
  int ofd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (ofd < 0) fail("cannot create %s: %s", path, strerror(errno));
  /* Its page is taken now, like the list's: a full state tmpfs must not make the mapping fault (SIGBUS). */
  if (fallocate(ofd, 0, 0, OFFSETS_BYTES) < 0 && ftruncate(ofd, OFFSETS_BYTES) < 0) fail("cannot size %s: %s", path, strerror(errno));
  void *omap = mmap(NULL, OFFSETS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ofd, 0);
  if (omap == MAP_FAILED) fail("cannot map %s: %s", path, strerror(errno));
  close(ofd);
  k->offsets = omap;
}

void count_output(struct kept *k, int stream, size_t n) {
  __atomic_store_n(&k->offsets[stream - 1], k->offsets[stream - 1] + n, __ATOMIC_RELAXED);
}

uint64_t output_offset(const struct kept *k, int stream) { return k->offsets[stream - 1]; }

static void count_kept(struct kept *k, int stream, size_t n) {
  k->kept[stream] += n;
  __atomic_store_n(&k->offsets[1 + stream], k->kept[stream], __ATOMIC_RELAXED);
}

/* Creates segment n of a tier and lists it in `segments` before any byte goes in, so a reader never misses one. */
static int open_segment(struct kept *k, int which) {
  char path[PATH_MAX + 1];
  int len = which == TIER_MEMORY ? snprintf(path, sizeof path - 1, "%s/log.%u", k->opt->dir, k->seg_count)
                                 : snprintf(path, sizeof path - 1, "%s/%s.%u", k->opt->spool_dir, k->opt->cmd_id, k->seg_count);
  if (len < 0 || len >= (int)sizeof path - 1) return -1;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  path[len] = '\n';
  ssize_t w;
  do w = pwrite(k->segments_fd, path, (size_t)len + 1, (off_t)k->segments_len); while (w < 0 && errno == EINTR);
  path[len] = 0;
  if (w != len + 1) {
    /* A half line would name a wrong file: take it back and give the segment up. */
    if (w > 0) (void)ftruncate(k->segments_fd, (off_t)k->segments_len);
    close(fd);
    unlink(path);
    return -1;
  }
  k->segments_len += (uint64_t)len + 1;
  if (k->seg_fd >= 0) close(k->seg_fd); /* tiers only move down: the old segment is complete */
  k->seg_fd = fd;
  k->seg_tier = which;
  k->seg_len = 0;
  k->seg_count++;
  return 0;
}

/* Appends one frame (header filled) with one write; on any failure the segment is cut back to its last whole frame. */
static int append_frame(struct kept *k, int which, const unsigned char *frame, size_t frame_len) {
  if (k->seg_fd < 0 || k->seg_tier != which) {
    if (open_segment(k, which) < 0) return -1;
  }
  ssize_t w;
  do w = pwrite(k->seg_fd, frame, frame_len, (off_t)k->seg_len); while (w < 0 && errno == EINTR);
  if (w != (ssize_t)frame_len) {
    if (w > 0 && ftruncate(k->seg_fd, (off_t)k->seg_len) < 0) {
      /* Cannot happen on tmpfs or a local fs, but a torn frame must never be followed by more: give the segment up. */
      close(k->seg_fd);
      k->seg_fd = -1;
      if (which == TIER_SPOOL) k->spool_broken = 1;
    }
    return -1;
  }
  k->seg_len += frame_len;
  k->tier_bytes[which] += frame_len;
  store_slot(k);
  return 0;
}

void keep_chunk(struct kept *k, int stream, unsigned char *data, size_t n) {
  if (k->truncated[stream]) return; /* a truncated stream keeps nothing more: what is kept stays a prefix */
  unsigned char *frame = data - FRAME_HEADER;
  size_t keep = n;
  if (k->kept[stream] + n > k->opt->cap) {
    keep = (size_t)(k->opt->cap - k->kept[stream]);
    /* Never end inside a UTF-8 character: back up while the first dropped byte continues one. */
    while (keep > 0 && (data[keep] & 0xC0) == 0x80) keep--;
    k->truncated[stream] = 1;
  }
  if (keep == 0) return;
  size_t frame_len = FRAME_HEADER + keep;
  frame[0] = (unsigned char)stream;
  put_u32(frame + 1, (uint32_t)keep);
  if (k->tier == TIER_MEMORY) {
    if (sum_slots(k, TIER_MEMORY) + frame_len <= k->opt->memory_budget && append_frame(k, TIER_MEMORY, frame, frame_len) == 0) {
      count_kept(k, stream, keep);
      return;
    }
    /* Over the memory budget, or the memory tier's fs is full: this frame tries the spool, and so do all later ones. */
    k->tier = TIER_SPOOL;
  }
  if (!k->spool_broken && sum_slots(k, TIER_SPOOL) + frame_len <= k->opt->spool_budget && append_frame(k, TIER_SPOOL, frame, frame_len) == 0) {
    count_kept(k, stream, keep);
    return;
  }
  k->truncated[stream] = 1; /* dropped: the command goes on regardless */
}

void close_kept_output(struct kept *k) {
  if (k->seg_fd >= 0) close(k->seg_fd);
  k->seg_fd = -1;
  close(k->segments_fd);
  k->segments_fd = -1;
}
