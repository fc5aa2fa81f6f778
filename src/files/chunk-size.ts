/**
 * How much a raw upload may queue for its file at a time. Node's 64 KiB (read) and 16 KiB (write) defaults mean one thread-pool
 * round trip per small chunk; 1 MiB lets writes go out together and cut the
 * download's round trips (bench: +25-40 % MB/s), at 1 MiB of memory per transfer.
 */
export const STREAM_CHUNK_BYTES = 1024 * 1024;

/**
 * How much a download reads at a time: a client that stops reading pins the
 * one chunk it has not taken (the response's pending write; there is no
 * read-ahead), and issue 36's budget for a stalled client is 1 MiB in all,
 * its connection included (measured: chunk + ~75 KiB).
 */
export const DOWNLOAD_CHUNK_BYTES = 768 * 1024;
