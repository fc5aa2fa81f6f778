import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';

/** sha256 of bytes in memory, hex. */
export function sha256Of(bytes: Buffer | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Each hash reads through one buffer it reuses: a fresh buffer per read left up to 64 MiB of garbage for V8 to find (as downloads did). */
const READ_BYTES = 1024 * 1024;

/**
 * sha256 of a file's bytes, hex, read in 1 MiB reads into one buffer that is
 * reused (flat memory, no garbage per read). After an upload the file is still
 * in the page cache: this costs a read from memory, not a second trip to the disk.
 */
export async function sha256OfFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  const buffer = Buffer.allocUnsafeSlow(READ_BYTES);
  const file = await open(path, 'r');
  try {
    for (;;) {
      const { bytesRead } = await file.read(buffer, 0, READ_BYTES, null);
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
    }
  } finally {
    await file.close();
  }
  return hash.digest('hex');
}
