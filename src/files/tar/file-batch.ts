import { constants } from 'node:os';

/**
 * The tar writer's batched file system calls (src/native/file-batch.c, in the
 * addon envd loads at start): a directory's files opened and fstat-ed in one
 * thread-pool job, a piece's small files read and closed in another, instead of
 * four node:fs round trips a file, whose futex hand-offs were most of a
 * download's cost. The same calls, with the same flags, still in the pool.
 * Where the addon cannot be loaded, write.ts uses node:fs as before.
 */
export interface FileBatchCalls {
  /** 6 numbers a name: fd (or -errno, or NOT_REGULAR), mode, uid, gid, size, mtime (ms). */
  openEntries(dirfd: number, names: string[]): Promise<Float64Array>;
  /** `plan`: 4 numbers a file (fd, start, size, end). Bytes read a file, or -errno; every fd closed. */
  readFiles(buffer: Buffer, plan: Float64Array): Promise<Float64Array>;
}

/** openEntries' answer for an entry that is no regular file (already closed). */
export const NOT_REGULAR = -1000;
const ENTRY_FIELDS = 6;

let calls: FileBatchCalls | undefined;

/** Set once at start (main.ts) with the addon's functions; undefined for node:fs. */
export function useFileBatches(found: FileBatchCalls | undefined): void {
  calls = found;
}

export const fileBatches = (): FileBatchCalls | undefined => calls;

/** What the tar header of a file needs from its fstat. */
export interface FileStats {
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtimeMs: number;
}

/** An errno as node:fs would have thrown it (code, errno, syscall). */
export function errnoError(errno: number, syscall: string, name: string): NodeJS.ErrnoException {
  const code = Object.entries(constants.errno).find(([, value]) => value === errno)?.[0] ?? 'EIO';
  return Object.assign(new Error(`${code}: ${syscall} '${name}'`), { code, errno: -errno, syscall });
}

/** openEntries' answer for entry `i`: the open file, 'other' (not a regular file), or the error. */
export function entryAt(result: Float64Array, i: number, name: string): { fd: number; stats: FileStats } | 'other' | NodeJS.ErrnoException {
  const field = (k: number): number => result[i * ENTRY_FIELDS + k] ?? 0;
  const fd = field(0);
  if (fd === NOT_REGULAR) return 'other';
  if (fd < 0) return errnoError(-fd, 'open', name);
  return { fd, stats: { mode: field(1), uid: field(2), gid: field(3), size: field(4), mtimeMs: field(5) } };
}
