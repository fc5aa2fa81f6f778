import { normalize, sep } from 'node:path';
import { badRequest, HttpError } from '../errors.js';
import type { TarHeader } from './tar/format.js';

/** The longest entry name or link target envd takes (the kernel's PATH_MAX, its NUL included). */
export const MAX_NAME_BYTES = 4095;
/**
 * What the extraction holds about an archive's names until its end: each
 * directory entry's name, mode and mtime (applied last), and each symlink's
 * name and target (made last). Counted as their bytes plus HELD_RECORD_BYTES
 * each; past this the archive is a 413. Files' names are not held. 60,000
 * directories of 3.7 KB names held 230 MiB unbounded; RSS grows ~4x what is
 * held while such an archive is read (the decoding's garbage included),
 * so ~64 MiB at most (test/files/archive-memory.test.ts measures it on
 * dist/envd). A node_modules tree of 100,000 directories holds ~14 MiB.
 */
export const MAX_HELD_NAME_BYTES = 16 * 1024 * 1024;
/** What one held record costs beyond its names (the object, the map's slot). */
export const HELD_RECORD_BYTES = 64;

/** The 400 an archive entry gets, naming it. */
export function refusal(name: string): (why: string) => HttpError {
  return (why) => badRequest(`archive entry ${JSON.stringify(name.slice(0, 200))}: ${why}; nothing was written`);
}

/**
 * An entry's name, relative and normalised, checked before anything is made:
 * no NUL, no name or link target past MAX_NAME_BYTES, not absolute, not out
 * of the tree by `..`. Undefined for the tree itself (`.`).
 */
export function checkEntryName(header: TarHeader, refuse: (why: string) => Error): string | undefined {
  const name = header.name;
  if (name.includes('\0')) throw refuse('a NUL byte in its name');
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) throw refuse(`a name of ${Buffer.byteLength(name)} bytes (at most ${MAX_NAME_BYTES})`);
  if (Buffer.byteLength(header.linkname) > MAX_NAME_BYTES) throw refuse(`a link target of ${Buffer.byteLength(header.linkname)} bytes (at most ${MAX_NAME_BYTES})`);
  if (name.startsWith('/')) throw refuse('an absolute path');
  const relativeName = normalize(name).replace(/\/+$/, '');
  if (relativeName === '..' || relativeName.startsWith(`..${sep}`)) throw refuse('it leaves the directory (..)');
  if (relativeName === '.' || relativeName === '') return undefined;
  return relativeName;
}

/** The names an extraction holds until its end (directories, symlinks), counted against MAX_HELD_NAME_BYTES. */
export class HeldNames {
  private held = 0;

  /** Counts a record held until the end. */
  hold(name: string, target: string): void {
    this.held += Buffer.byteLength(name) + Buffer.byteLength(target) + HELD_RECORD_BYTES;
    if (this.held > MAX_HELD_NAME_BYTES) {
      throw new HttpError(413, `archive entry ${JSON.stringify(name.slice(0, 200))}: the archive's directories and symlinks hold more than ${MAX_HELD_NAME_BYTES} bytes of names (each counts its names and ${HELD_RECORD_BYTES} bytes); nothing was written`);
    }
  }

  /** A held symlink's target replaced by a later entry of the same name. */
  replace(earlier: string, later: string): void {
    this.held += Buffer.byteLength(later) - Buffer.byteLength(earlier);
  }
}

export function depth(name: string): number {
  let slashes = 0;
  for (let at = name.indexOf(sep); at !== -1; at = name.indexOf(sep, at + 1)) slashes++;
  return slashes;
}

const FLAGS: Record<string, string> = { '3': 'character device', '4': 'block device', '6': 'fifo' };

export function describeFlag(flag: string): string {
  return FLAGS[flag] ?? `entry of type ${JSON.stringify(flag)}`;
}

/**
 * What writing an entry ran into, as the client's error: the disk full is a
 * 507; any other refusal of the file system (a name too long, a file where
 * the archive wants a directory, a loop) is the archive's, a 400 naming the entry.
 */
export function entryError(name: string, error: unknown): unknown {
  if (error instanceof HttpError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new HttpError(507, `archive entry ${JSON.stringify(name)}: the disk is full (${code}); nothing was written`);
  if (code !== undefined && /^E[A-Z]+$/.test(code)) return badRequest(`archive entry ${JSON.stringify(name)}: cannot be written (${code}); nothing was written`);
  return error;
}
