import { existsSync } from 'node:fs';
import { getAsset, isSea } from 'node:sea';
import { besideTheBundle, stateBinaryPath, writeStateBinary } from '../holder/binary.js';
import type { FileBatchCalls } from '../files/tar/file-batch.js';
import type { Logger } from '../logger.js';

/** The first 12 hex of the addon's sha256, computed by build.mjs (esbuild `define`). Undefined when running from sources. */
declare const ENVD_MALLOC_TRIM_HASH: string | undefined;

/** The SEA asset's name, and the addon's file name beside the bundle (build.mjs builds dist/envd-malloc-trim.node). */
const ADDON = 'envd-malloc-trim.node';

/**
 * A function that gives glibc's free memory back to the kernel: malloc_trim(0)
 * through src/native/malloc-trim.c. The addon is loaded here, at start (the
 * single executable writes it out to `<stateDir>/bin` first, as it does the
 * holder), so a problem shows in the first lines of the log. Where it cannot be
 * loaded (a bundle copied without it, a Node built on another C library) envd
 * says so once and the function does nothing: trimming only gives memory back
 * sooner than its reuse would. `addon` says where the addon is (tests); by
 * default it is found as described.
 */
export function mallocTrimmer(stateDir: string, log: Logger, addon = (): string => addonPath(stateDir)): () => void {
  try {
    const trim = loadAddon(addon());
    return () => void trim();
  } catch (error) {
    log.warn({ err: error }, "cannot give malloc's free memory back (malloc_trim): it stays until envd reuses it");
    return () => {};
  }
}

function loadAddon(path: string): () => boolean {
  const trim = loadExports(path).trim;
  if (typeof trim !== 'function') throw new Error(`${ADDON} has no trim()`);
  return trim;
}

/**
 * A function that mixes bytes into OpenSSL's generator (crypto.randomBytes) and
 * reseeds it from the kernel: reseed() of src/native/random-reseed.c, for /init's
 * `entropy` in a fork. Returns false where the addon cannot be loaded (said once).
 */
export function randomReseeder(stateDir: string, log: Logger, addon = (): string => addonPath(stateDir)): (bytes: Uint8Array) => boolean {
  try {
    const reseed = loadExports(addon()).reseed;
    if (typeof reseed !== 'function') throw new Error(`${ADDON} has no reseed()`);
    return (bytes) => reseed(bytes);
  } catch (error) {
    log.warn({ err: error }, "cannot reseed envd's own random generator: forks of one snapshot share it until OpenSSL reseeds by itself");
    return () => false;
  }
}

/**
 * The tar writer's batched file calls (src/native/file-batch.c, tar/file-batch.ts),
 * or undefined where the addon cannot be loaded (said once): archives are then
 * written through node:fs, the same calls in more thread-pool round trips.
 */
export function fileBatchCalls(stateDir: string, log: Logger, addon = (): string => addonPath(stateDir)): FileBatchCalls | undefined {
  try {
    const { openEntries, readFiles } = loadExports(addon());
    if (typeof openEntries !== 'function' || typeof readFiles !== 'function') throw new Error(`${ADDON} has no openEntries() and readFiles()`);
    // Checked to be functions above; their signatures are file-batch.c's (tar/file-batch.ts).
    return { openEntries, readFiles } as FileBatchCalls;
  } catch (error) {
    log.warn({ err: error }, 'archive downloads read files through node:fs: slower, the same result');
    return undefined;
  }
}

/** The addon's exports, as loose as an unknown shared object's; each user checks the function it takes. */
export function loadExports(path: string): Record<string, unknown> & { trim?: () => boolean; reseed?: (bytes: Uint8Array) => boolean } {
  const addon = { exports: {} as Record<string, unknown> & { trim?: () => boolean; reseed?: (bytes: Uint8Array) => boolean } };
  process.dlopen(addon, path);
  return addon.exports;
}

export function addonPath(stateDir: string): string {
  if (isSea()) {
    const name = `envd-malloc-trim-${typeof ENVD_MALLOC_TRIM_HASH === 'string' ? ENVD_MALLOC_TRIM_HASH : 'unhashed'}.node`;
    const written = stateBinaryPath(stateDir, name);
    return existsSync(written) ? written : writeStateBinary(stateDir, name, new Uint8Array(getAsset(ADDON)));
  }
  return besideTheBundle(ADDON);
}
