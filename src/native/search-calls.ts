import type { Logger } from '../logger.js';
import { addonPath, loadExports } from './malloc-trim.js';

/**
 * The search's native calls, through the addon envd already loads:
 * openat(2) for the walk (src/native/open-at.c), a newline count and a
 * literal's search (byte-search.c), batches of files on the thread pool (search-batch.c). Both opens take a child of a directory descriptor with
 * O_NOFOLLOW|O_NONBLOCK and check the opened inode's type and the reader's
 * permission bits (`reader`: [uid, gid...], null for no check).
 */
export interface SearchCalls {
  /** A directory the reader may list: its descriptor, or -errno. */
  openDirAt(dirfd: number, name: string | Buffer, reader: Int32Array | null): number;
  /** A regular file the reader may read, its first bytes read into `buffer` (none when empty or over `maxBytes` > 0): 0 with `out` = [size, fd or -1 once closed, bytes read], or -errno. */
  openFileAt(dirfd: number, name: string | Buffer, reader: Int32Array | null, buffer: Buffer, maxBytes: number, out: Float64Array): number;
  /**
   * The next part of a directory's entries (src/native/list-dir.c), about `maxBytes` of names
   * at most: type letter ('d', 'f', 'o') and name, joined by '/', and a '/' after the last when
   * more follow (call again with `fromStart` false); all of it sorted by the names' bytes when it
   * fits one call. A Buffer when some name is not UTF-8; -errno when it cannot be read.
   */
  listDir(dirfd: number, fromStart: boolean, maxBytes: number): string | Buffer | number;
  /** lstat of a child (fstatat without following): 0 with `out` = [mode, uid, gid, size, mtime in ms], or -errno. */
  statAt(dirfd: number, name: string | Buffer, out: Float64Array): number;
  /**
   * One thread-pool job over a batch of files (src/native/search-batch.c): each opened as
   * openFileAt does, then checked for the needle before its first NUL byte (without a needle:
   * a NUL in the first `firstBytes`). Resolves with 4 numbers a file: verdict or -errno,
   * the descriptor of a candidate left open (-1 otherwise), fstat's size, where a small
   * candidate's bytes are in `arena` (-1: not there). `stop[0] = 1` ends it early.
   */
  scanFiles(dirfds: Int32Array, names: Buffer, reader: Int32Array | null, needle: Buffer | null, firstBytes: number, maxBytes: number, stop: Int32Array, arena: Buffer): Promise<Float64Array>;
  countNewlines(bytes: Uint8Array): number;
  /** Where `needle` first occurs in `bytes`, or -1 (as Buffer.indexOf, 2-3 times faster). */
  findNeedle(bytes: Uint8Array, needle: Uint8Array): number;
}

/**
 * The addon's search calls, or undefined where it cannot be loaded (said
 * once): search and find then open children by /proc/self/fd paths, and count lines and
 * find literals in JavaScript, slower but with the same rules. `addon` says where the addon is (tests).
 */
export function loadSearchCalls(stateDir: string, log: Logger, addon = (): string => addonPath(stateDir)): SearchCalls | undefined {
  try {
    const exports = loadExports(addon());
    for (const name of ['openFileAt', 'openDirAt', 'listDir', 'statAt', 'scanFiles', 'countNewlines', 'findNeedle']) if (typeof exports[name] !== 'function') throw new Error(`the addon has no ${name}()`);
    return exports as unknown as SearchCalls;
  } catch (error) {
    log.warn({ err: error }, 'search and find cannot use their native calls (the addon did not load): they open paths under /proc/self/fd instead, more slowly');
    return undefined;
  }
}
