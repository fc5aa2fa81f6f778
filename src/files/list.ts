import { lstat, opendir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { HttpError, badRequest, errnoToHttpError } from '../errors.js';
import { describeEntry, type EntryInfo } from './entry-info.js';
import { readOwnerNames } from './owner-names.js';

/** A listing stops with 413 past this many entries: the answer is built in memory, so it must be bounded. */
export const LIST_ENTRY_LIMIT = 100_000;

/**
 * The directory's contents down to `depth` levels (1 = direct children),
 * sorted by path. Symlinks are described, never followed, so a link to `/`
 * or a cycle cannot widen the walk. Entries that vanish during the walk are
 * skipped.
 */
export async function listDirectory(path: string, depth: number): Promise<EntryInfo[]> {
  // The listed path itself may be a symlink to a directory; its contents are what the caller means.
  const root = await stat(path).catch((error) => {
    throw errnoToHttpError(error, path);
  });
  if (!root.isDirectory()) throw badRequest(`${path}: not a directory`);
  const names = await readOwnerNames();
  const entries: EntryInfo[] = [];

  const walk = async (dir: string, level: number): Promise<void> => {
    let handle;
    try {
      handle = await opendir(dir);
    } catch (error) {
      // A subdirectory removed or made unreadable mid-walk is skipped; the root's errors are the caller's.
      if (level === 1) throw errnoToHttpError(error, dir);
      return;
    }
    const subdirectories: string[] = [];
    // The Dir closes itself when the loop ends or throws.
    for await (const dirent of handle) {
      const child = join(dir, dirent.name);
      const stats = await lstat(child).catch(() => undefined);
      if (!stats) continue;
      if (entries.length >= LIST_ENTRY_LIMIT) {
        throw new HttpError(413, `${path}: more than ${LIST_ENTRY_LIMIT} entries; list with a smaller depth or a deeper path`);
      }
      // readlink can still lose a race with a removal; such an entry is skipped like a vanished one.
      const entry = await describeEntry(child, names, stats).catch(() => undefined);
      if (entry) entries.push(entry);
      if (stats.isDirectory() && level < depth) subdirectories.push(child);
    }
    for (const sub of subdirectories) await walk(sub, level + 1);
  };
  await walk(path, 1);
  return entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
