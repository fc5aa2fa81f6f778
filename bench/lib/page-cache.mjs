// Starting envd as a guest does: its files read from disk, not from the pages the build just wrote.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ENVD_JS, ENVD_SEA } from './envd-process.mjs';

/**
 * Drops the files' pages from the page cache (sync, then posix_fadvise
 * DONTNEED through dd): a file the build has just written sits there in large
 * folios, and a process mapping it counts whole folios, so a fresh dist/envd
 * read 18 MiB high (78 instead of 60). A guest reads its image from disk, as
 * the starts after this do.
 */
export function dropFromPageCache(files) {
  for (const file of files.filter((f) => existsSync(f))) {
    execFileSync('sync', [file]);
    execFileSync('dd', [`if=${file}`, 'iflag=nocache', 'count=0', 'status=none']);
  }
}

/** dist/envd, the runtime it runs (src/launcher/launcher.c) and the bundle: what envd maps. */
export function envdFiles() {
  const runtime = join(dirname(ENVD_SEA), 'runtime');
  const runtimeFiles = existsSync(runtime) ? [join(runtime, 'envd-node'), ...readdirSync(join(runtime, 'lib')).map((name) => join(runtime, 'lib', name))] : [];
  return [ENVD_SEA, ...runtimeFiles, ENVD_JS];
}
