import { link, rename, unlink } from 'node:fs/promises';
import { dirname, posix } from 'node:path';
import { badRequest, conflict, errnoToHttpError } from '../errors.js';
import { NEW_FILE_MODE, tempNameFor, writeTemp } from './atomic-write.js';
import type { Owner } from './paths.js';
import { lstatAt, openDirectory, type UserDir } from './user-path.js';

/** How many temporary files a batch writes at once. */
const STAGE_CONCURRENCY = 32;

export interface BatchEntry {
  path: string;
  bytes: Buffer;
}

/** A written temporary file waiting to replace its target. */
export interface Staged {
  /** The target's path, for answers and messages. */
  target: string;
  /** The target's directory, open; `name` and `temp` are names in it. */
  dir: UserDir;
  name: string;
  temp: string;
  /** The temporary file's inode: renamed only while `temp` still holds it. */
  ino: number;
  size: number;
}

/** Throws 400 naming the first path that appears twice (paths are already normalised). */
export function rejectDuplicates(paths: string[]): void {
  const seen = new Set<string>();
  paths.forEach((path, index) => {
    if (seen.has(path)) throw badRequest(`files[${index}].path: ${path} appears more than once in the batch`);
    seen.add(path);
  });
}

/**
 * Throws 400 when one entry's path lies inside another's (`/d/a` and
 * `/d/a/b`): one of them would have to be a file and a directory at once.
 * Checked before anything is created, so nothing is left behind, not even the
 * directory the inner entry would have needed.
 */
export function rejectNested(paths: string[]): void {
  const index = new Map(paths.map((path, i) => [path, i]));
  paths.forEach((path, i) => {
    for (let parent = dirname(path); parent !== '/'; parent = dirname(parent)) {
      const outer = index.get(parent);
      if (outer !== undefined) throw badRequest(`files[${i}].path: ${path} is inside files[${outer}].path ${parent}, which the batch writes as a file`);
    }
  });
}

/**
 * Renames every staged file over its target, all or none. Before a target is
 * replaced, its current inode gets a second name (a hard link beside it), so
 * that when a later rename fails each earlier target can be put back with a
 * rename of its own: the old file returns with its bytes, inode, owner and
 * mode. A target that did not exist is removed again. Temporary files and
 * backups are removed in every outcome.
 *
 * Every link, rename and removal is relative to the target directory's open
 * descriptor (user-path.ts), never by path: a user who swaps that directory
 * for a symlink to someone else's between the staging and the renames only
 * moves the batch's files into the directory it moved away. A temporary file
 * that no longer holds envd's inode (the user put another file in its place)
 * is a 409, never moved over a target.
 */
export async function renameAllOrNone(staged: Staged[]): Promise<void> {
  const done: { staged: Staged; backup: string | undefined }[] = [];
  const backups: { dir: UserDir; name: string }[] = [];
  try {
    for (const entry of staged) {
      const { dir, name, temp, target } = entry;
      const backup = tempNameFor(name);
      const hasOld = await link(dir.at(name), dir.at(backup)).then(
        () => true,
        (error: NodeJS.ErrnoException) => {
          if (error.code === 'ENOENT') return false;
          throw errnoToHttpError(error, target);
        },
      );
      if (hasOld) backups.push({ dir, name: backup });
      if ((await lstatAt(dir, temp))?.ino !== entry.ino) throw replaced(target);
      try {
        await rename(dir.at(temp), dir.at(name));
      } catch (error) {
        throw errnoToHttpError(error, target);
      }
      done.push({ staged: entry, backup: hasOld ? backup : undefined });
    }
  } catch (error) {
    // Undo in reverse order. A failure here is reported with the original error;
    // there is nothing better to do with the target than leave what is there.
    for (const { staged: { dir, name }, backup } of done.reverse()) {
      if (backup) await rename(dir.at(backup), dir.at(name)).catch(() => {});
      else await unlink(dir.at(name)).catch(() => {});
    }
    throw error;
  } finally {
    await Promise.all([...staged.map(({ dir, temp }) => ({ dir, name: temp })), ...backups].map(({ dir, name }) => unlink(dir.at(name)).catch(() => {})));
  }
}

const replaced = (target: string) => conflict(`${target}: its temporary file was replaced by another process while the batch was written; nothing was changed`);

/**
 * Each entry's directory, opened (and made) once per distinct directory, and
 * the mode its file gets (an existing file keeps its own). A target that is a
 * directory is a 400. The caller closes the directories.
 */
async function openTargets(entries: BatchEntry[], owner: Owner | undefined, dirs: Map<string, UserDir>): Promise<{ dir: UserDir; name: string; mode: number }[]> {
  const targets = [];
  for (const { path } of entries) {
    if (path === '/') throw badRequest('/: is a directory');
    const parent = posix.dirname(path);
    let dir = dirs.get(parent);
    if (!dir) {
      dir = (await openDirectory(parent, { owner, create: true })).dir;
      dirs.set(parent, dir);
    }
    const name = posix.basename(path);
    const existing = await lstatAt(dir, name);
    if (existing?.isDirectory()) throw badRequest(`${path}: is a directory`);
    targets.push({ dir, name, mode: existing?.isFile() ? existing.mode & 0o7777 : NEW_FILE_MODE });
  }
  return targets;
}

/**
 * Validates and writes every entry to a temporary file, then renames them all
 * into place. Any failure before the renames removes every temporary file and
 * leaves every target as it was.
 */
export async function writeBatch(entries: BatchEntry[], owner: Owner | undefined): Promise<{ path: string; size: number }[]> {
  rejectDuplicates(entries.map((e) => e.path));
  rejectNested(entries.map((e) => e.path));
  const dirs = new Map<string, UserDir>();
  try {
    const targets = await openTargets(entries, owner, dirs);
    // Staged a few dozen at a time: each is a write and an fsync, and the disk
    // takes many at once far faster than one after another (bench: batch).
    // On any failure the others in flight finish first, so that every
    // temporary file that exists is known and removed.
    const slots: (Staged | undefined)[] = new Array(entries.length);
    let failure: { error: unknown } | undefined;
    let next = 0;
    const stageNext = async (): Promise<void> => {
      while (!failure && next < entries.length) {
        const index = next++;
        const entry = entries[index]!;
        const { dir, name, mode } = targets[index]!;
        try {
          const filled = await writeTemp(entry.path, entry.bytes, owner, mode, undefined, dir);
          slots[index] = { target: entry.path, dir, name, temp: filled.name, ino: filled.ino, size: filled.size };
        } catch (error) {
          failure ??= { error };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(STAGE_CONCURRENCY, entries.length) }, stageNext));
    const staged = slots.filter((slot): slot is Staged => slot !== undefined);
    if (failure) {
      await Promise.all(staged.map(({ dir, temp }) => unlink(dir.at(temp)).catch(() => {})));
      throw failure.error;
    }
    await renameAllOrNone(staged);
    return staged.map(({ target, size }) => ({ path: target, size }));
  } finally {
    for (const dir of dirs.values()) await dir.close();
  }
}
