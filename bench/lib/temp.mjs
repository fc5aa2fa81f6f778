// Temporary directories for the file figures, removed at the end of each
// figure and, as a last resort, when the bench process exits for any reason.
import { randomFillSync } from 'node:crypto';
import { mkdtempSync, openSync, rmSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made = new Set();
process.once('exit', () => made.forEach(removeTempDir));
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    made.forEach(removeTempDir);
    process.exit(130);
  });
}

/** A fresh directory under $TMPDIR, or under `base` (a tmpfs such as /dev/shm). */
export function makeTempDir(label, base = tmpdir()) {
  const dir = mkdtempSync(join(base, `envd-bench-${label}-`));
  made.add(dir);
  return dir;
}

export function removeTempDir(dir) {
  rmSync(dir, { recursive: true, force: true });
  made.delete(dir);
}

/** Writes `bytes` of random data to `path` (incompressible, so no layer can cheat), 1 MiB at a time. */
export function writeRandomFile(path, bytes) {
  const chunk = Buffer.alloc(1024 * 1024);
  const fd = openSync(path, 'w');
  try {
    for (let left = bytes; left > 0; left -= chunk.length) {
      randomFillSync(chunk);
      writeSync(fd, chunk, 0, Math.min(left, chunk.length));
    }
  } finally {
    closeSync(fd);
  }
}
