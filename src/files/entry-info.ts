import type { Stats } from 'node:fs';
import { lstat, readlink } from 'node:fs/promises';
import { basename } from 'node:path';
import { errnoToHttpError, HttpError, notFound } from '../errors.js';
import { readOwnerNames, type OwnerNames } from './owner-names.js';
import type { Owner } from './paths.js';
import { lstatAt, openParent } from './user-path.js';

export interface EntryInfo {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink';
  size: number;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modified_at: string;
  symlink_target?: string;
}

/** What an entry info shows of an inode: fs's Stats, or find's from the addon's statAt (user-access.ts). */
export type EntryStats = Pick<Stats, 'mode' | 'size' | 'uid' | 'gid' | 'mtime' | 'isFile' | 'isDirectory' | 'isSymbolicLink' | 'isCharacterDevice' | 'isBlockDevice' | 'isFIFO' | 'isSocket'>;

/**
 * `type` has three values in the contract; sockets, fifos and devices are
 * reported as "file" (the `permissions` string's first letter tells them apart).
 */
function typeOf(stats: EntryStats): EntryInfo['type'] {
  if (stats.isSymbolicLink()) return 'symlink';
  if (stats.isDirectory()) return 'dir';
  return 'file';
}

function typeLetter(stats: EntryStats): string {
  if (stats.isDirectory()) return 'd';
  if (stats.isSymbolicLink()) return 'l';
  if (stats.isCharacterDevice()) return 'c';
  if (stats.isBlockDevice()) return 'b';
  if (stats.isFIFO()) return 'p';
  if (stats.isSocket()) return 's';
  return '-';
}

/** `ls -l` style: `drwxr-xr-x`, with setuid/setgid/sticky shown as s/S, s/S, t/T. */
export function formatPermissions(stats: EntryStats): string {
  const m = stats.mode;
  const triplet = (shift: number, special: number, on: string, off: string) => {
    const x = (m >> shift) & 1;
    const exec = m & special ? (x ? on : off) : x ? 'x' : '-';
    return ((m >> (shift + 2)) & 1 ? 'r' : '-') + ((m >> (shift + 1)) & 1 ? 'w' : '-') + exec;
  };
  return typeLetter(stats) + triplet(6, 0o4000, 's', 'S') + triplet(3, 0o2000, 's', 'S') + triplet(0, 0o1000, 't', 'T');
}

/**
 * Describes what is at `path` without following a final symlink. `at` is
 * where fs finds it when that is not `path` itself: a dirfd-relative
 * spelling (user-path.ts) in a directory a user can change.
 */
export async function describeEntry(path: string, names: OwnerNames, stats?: EntryStats, at = path): Promise<EntryInfo> {
  try {
    stats ??= await lstat(at);
    const entry = describeStats(path, names, stats);
    if (stats.isSymbolicLink()) entry.symlink_target = await readlink(at);
    return entry;
  } catch (error) {
    throw errnoToHttpError(error, path);
  }
}

/** The entry info of `stats`, found at `path`, without a symlink's target. */
export function describeStats(path: string, names: OwnerNames, stats: EntryStats): EntryInfo {
  return {
    name: basename(path) || '/',
    path,
    type: typeOf(stats),
    size: stats.isDirectory() ? 0 : stats.size,
    mode: stats.mode & 0o7777,
    permissions: formatPermissions(stats),
    owner: names.user(stats.uid),
    group: names.group(stats.gid),
    modified_at: stats.mtime.toISOString(),
  };
}

/**
 * What `info` describes: the entry at `path`, its parents reached by the walk
 * and the entry itself (a symlink's text included) read relative to its open
 * directory, so a parent swapped meanwhile shows nothing of where it leads.
 */
export async function describePath(path: string, owner: Owner | undefined): Promise<EntryInfo> {
  const names = await readOwnerNames();
  if (path === '/') return describeEntry(path, names);
  const parent = await openParent(path, { owner }).catch((error: unknown) => {
    throw error instanceof HttpError && error.status === 404 ? notFound(`${path}: no such file or directory (ENOENT)`) : error;
  });
  try {
    const stats = await lstatAt(parent.dir, parent.name);
    if (!stats) throw notFound(`${path}: no such file or directory (ENOENT)`);
    return await describeEntry(path, names, stats, parent.dir.at(parent.name));
  } finally {
    await parent.dir.close();
  }
}
