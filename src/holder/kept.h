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

/* A frame's header in front of its bytes: u8 stream | u32 LE length. */
#define FRAME_HEADER 5

/*
 * Maps the usage table, creates the (empty) list of segments and the offsets
 * file (<dir>/offsets: u64 LE bytes the command wrote to stdout, to stderr,
 * then bytes kept of each: what envd resumes a stream and serves /output
 * from, even across its restarts); fails the holder on error.
 */
void open_kept_output(void);
/* Counts n more bytes the command wrote to `stream` (kept or not). */
void count_output(int stream, size_t n);
/* Bytes the command has written to a stream so far. */
uint64_t output_offset(int stream);
/*
 * Keeps what it may of a chunk of `stream` (at `data`, with FRAME_HEADER
 * writable bytes in front of it): the per-stream cap, then the memory tier,
 * the spool, or nothing. The command never blocks or fails for it.
 */
void keep_chunk(int stream, unsigned char *data, size_t n);
/* Bytes of all segments written so far, headers included: the log offset. */
uint64_t log_end(void);
/* Whether a stream's kept output stopped short (cap, budget, write failure). */
int kept_truncated(int stream);
/* Closes the segment being written and the list: the output is complete. */
void close_kept_output(void);

#endif
