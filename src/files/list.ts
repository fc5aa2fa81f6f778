import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { HttpError, errnoToHttpError } from '../errors.js';
import { describeEntry, type EntryInfo } from './entry-info.js';
import { readOwnerNames } from './owner-names.js';
import type { Owner } from './paths.js';
import { openDirectory, openSubdirectory, type UserDir } from './user-path.js';

/** A listing stops with 413 past this many entries: the answer is built in memory, so it must be bounded. */
export const LIST_ENTRY_LIMIT = 100_000;

const tooMany = (path: string) => new HttpError(413, `${path}: more than ${LIST_ENTRY_LIMIT} entries; list with a smaller depth or a deeper path`);

/**
 * The directory's contents down to `depth` levels (1 = direct children),
 * sorted by path. Symlinks are described, never followed, so a link to `/`
 * or a cycle cannot widen the walk. Entries that vanish during the walk are
 * skipped.
 *
 * The tree is a user's: the listed directory is reached by user-path.ts's
 * walk (a symlink on the way is followed only where root or `owner` alone
 * could have put it), and every subdirectory is opened O_NOFOLLOW relative
 * to its parent's descriptor, each entry described relative to it. A user
 * who swaps a subdirectory for a symlink to a directory of root's while it
 * is listed steers nothing: the link is what is listed.
 */
export async function listDirectory(path: string, depth: number, owner?: Owner): Promise<EntryInfo[]> {
  const { dir: root } = await openDirectory(path, { owner });
  const names = await readOwnerNames();
  const entries: EntryInfo[] = [];

  /** `dir` is open; `shown` is the path its entries are listed under (the one asked for, not where links led). */
  const walk = async (dir: UserDir, shown: string, level: number): Promise<void> => {
    let found: string[];
    try {
      found = await readdir(dir.self);
    } catch (error) {
      // A subdirectory made unreadable mid-walk is skipped; the root's errors are the caller's.
      if (level === 1) throw errnoToHttpError(error, shown);
      return;
    }
    // Too many names is known before any is described: 300,000 entries took 5 s and 184 MiB to reach the 413 one by one.
    if (entries.length + found.length > LIST_ENTRY_LIMIT) throw tooMany(path);
    const subdirectories: string[] = [];
    for (const name of found) {
      const child = join(shown, name);
      const stats = await lstat(dir.at(name)).catch(() => undefined);
      if (!stats) continue;
      // readlink can still lose a race with a removal; such an entry is skipped like a vanished one.
      const entry = await describeEntry(child, names, stats, dir.at(name)).catch(() => undefined);
      if (entry) entries.push(entry);
      if (stats.isDirectory() && level < depth) subdirectories.push(name);
    }
    for (const name of subdirectories) {
      // Gone or swapped for a symlink since its lstat: left out, never followed.
      const sub = await openSubdirectory(dir, name).catch(() => undefined);
      if (!sub) continue;
      try {
        await walk(sub, join(shown, name), level + 1);
      } finally {
        await sub.close();
      }
    }
  };
  try {
    await walk(root, path, 1);
  } finally {
    await root.close();
  }
  return entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
