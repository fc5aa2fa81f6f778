/*
 * kept.h — the command's kept output (docs/holder-protocol.md, "Files", "Log
 * format" and "Keeping output"): frames appended to segment files, first in
 * the memory tier (the state dir's tmpfs) up to the global memory budget, then
 * in the spool on disk up to the spool budget, then dropped with the stream
 * marked truncated. The budgets are shared with every other holder through
 * the usage table, a mmap'd file of one slot per command.
 */
#ifndef ENVD_KEPT_H
#define ENVD_KEPT_H

#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "sizes.h" /* FRAME_HEADER */

/* The kept output's state: the shared usage table, the segment being written, what each stream kept. */
struct kept {
  const struct options *opt;
  uint64_t *slots;   /* the mmap'd usage file: [slot*2] memory bytes, [slot*2+1] spool bytes */
  int tier;          /* TIER_MEMORY, then TIER_SPOOL once the memory tier is full */
  int seg_fd, seg_tier;
  uint64_t seg_len;
  unsigned seg_count;     /* n of the next segment, across both tiers */
  uint64_t tier_bytes[2]; /* this command's totals per tier */
  uint64_t kept[3];       /* kept bytes of the command's output, by stream */
  int truncated[3];
  int spool_broken; /* a spool segment could not be cut back after a torn write: no more spooling */
  int segments_fd;
  uint64_t segments_len;
  uint64_t *offsets; /* the offsets file, mapped: [0] stdout written, [1] stderr written, [2] stdout kept, [3] stderr kept */
};

/*
 * Maps the usage table, creates the (empty) list of segments and the offsets
 * file (<dir>/offsets: u64 LE bytes the command wrote to stdout, to stderr,
 * then bytes kept of each: what envd resumes a stream and serves /output
 * from, even across its restarts); fails the holder on error.
 */
void open_kept_output(struct kept *k, const struct options *opt);
/* Counts n more bytes the command wrote to `stream` (kept or not). */
void count_output(struct kept *k, int stream, size_t n);
/* Bytes the command has written to a stream so far. */
uint64_t output_offset(const struct kept *k, int stream);
/*
 * Keeps what it may of a chunk of `stream` (at `data`, with FRAME_HEADER
 * writable bytes in front of it): the per-stream cap, then the memory tier,
 * the spool, or nothing. The command never blocks or fails for it.
 */
void keep_chunk(struct kept *k, int stream, unsigned char *data, size_t n);
/* Bytes of all segments written so far, headers included: the log offset. */
uint64_t log_end(const struct kept *k);
/* Whether a stream's kept output stopped short (cap, budget, write failure). */
int kept_truncated(const struct kept *k, int stream);
/* Closes the segment being written and the list: the output is complete. */
void close_kept_output(struct kept *k);

#endif
