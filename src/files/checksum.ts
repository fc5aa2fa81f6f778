import { createHash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';

/** sha256 of bytes in memory, hex. */
export function sha256Of(bytes: Buffer | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Each hash reads through one buffer it reuses: a fresh buffer per read left up to 64 MiB of garbage for V8 to find (as downloads did). */
const READ_BYTES = 1024 * 1024;

/**
 * How long a hash of a growing file waits before it reads again when it has
 * caught up with the writer: 2 ms, doubled while the file stays as it was (a
 * slow or stalled client) up to 64 ms, so that it does not poll 500 times a second.
 */
const CAUGHT_UP_WAIT_MS = { first: 2, max: 64 };

/**
 * sha256 of a file's bytes, hex, read in 1 MiB reads into one buffer that is
 * reused (flat memory, no garbage per read). After an upload the file is still
 * in the page cache: this costs a read from memory, not a second trip to the disk.
 *
 * With `appendedUntil`, another process is still appending to the file (an
 * upload's receiver): the hash follows it as it grows and ends at the end of
 * the file once `appendedUntil` has settled. The bytes below a file's size
 * are already what was written, so the hash is of exactly those, computed
 * while the kernel moves the rest instead of after it.
 */
export async function sha256OfFile(path: string, appendedUntil?: Promise<unknown>): Promise<string> {
  const file = await open(path, 'r');
  try {
    return await sha256OfHandle(file, appendedUntil);
  } finally {
    await file.close();
  }
}

/**
 * `sha256OfFile` of an open file (one user-path.ts's openRegular checked: a
 * regular file, so the reads end). With `signal`, stops when it is aborted
 * (the client left): a large file is not hashed for nobody.
 */
export async function sha256OfHandle(file: FileHandle, appendedUntil?: Promise<unknown>, signal?: AbortSignal): Promise<string> {
  const hash = createHash('sha256');
  const buffer = Buffer.allocUnsafeSlow(READ_BYTES);
  // Settles when the writer is done, however it ended (its failure is its caller's to answer).
  const writerDone = appendedUntil?.then(
    () => {},
    () => {},
  );
  let appending = writerDone !== undefined;
  void writerDone?.then(() => (appending = false));
  let wait = CAUGHT_UP_WAIT_MS.first;
  for (;;) {
    signal?.throwIfAborted();
    // Read before asking whether the writer is done: an empty read after it was done is the end.
    const writerWasDone = !appending;
    const { bytesRead } = await file.read(buffer, 0, READ_BYTES, null);
    if (bytesRead > 0) {
      hash.update(buffer.subarray(0, bytesRead));
      wait = CAUGHT_UP_WAIT_MS.first;
    } else if (writerWasDone) break;
    else {
      // The writer's end cuts the wait short: the rest is read at once.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, wait))), writerDone]);
      clearTimeout(timer);
      wait = Math.min(wait * 2, CAUGHT_UP_WAIT_MS.max);
    }
  }
  return hash.digest('hex');
}
