import { link, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { badRequest, errnoToHttpError } from '../errors.js';
import { prepareTarget, tempPathFor, writeTemp } from './atomic-write.js';
import type { Owner } from './paths.js';

/** How many temporary files a batch writes at once. */
const STAGE_CONCURRENCY = 32;

export interface BatchEntry {
  path: string;
  bytes: Buffer;
}

/** A written temporary file waiting to replace its target. */
export interface Staged {
  target: string;
  temp: string;
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
 */
export async function renameAllOrNone(staged: Staged[]): Promise<void> {
  const done: { target: string; backup: string | undefined }[] = [];
  const backups: string[] = [];
  try {
    for (const { target, temp } of staged) {
      const backup = tempPathFor(target);
      const hasOld = await link(target, backup).then(
        () => true,
        (error: NodeJS.ErrnoException) => {
          if (error.code === 'ENOENT') return false;
          throw errnoToHttpError(error, target);
        },
      );
      if (hasOld) backups.push(backup);
      try {
        await rename(temp, target);
      } catch (error) {
        throw errnoToHttpError(error, target);
      }
      done.push({ target, backup: hasOld ? backup : undefined });
    }
  } catch (error) {
    // Undo in reverse order. A failure here is reported with the original error;
    // there is nothing better to do with the target than leave what is there.
    for (const { target, backup } of done.reverse()) {
      if (backup) await rename(backup, target).catch(() => {});
      else await rm(target, { force: true }).catch(() => {});
    }
    throw error;
  } finally {
    await Promise.all([...staged.map((s) => s.temp), ...backups].map((path) => rm(path, { force: true })));
  }
}

/**
 * Validates and writes every entry to a temporary file, then renames them all
 * into place. Any failure before the renames removes every temporary file and
 * leaves every target as it was.
 */
export async function writeBatch(entries: BatchEntry[], owner: Owner | undefined): Promise<{ path: string; size: number }[]> {
  rejectDuplicates(entries.map((e) => e.path));
  rejectNested(entries.map((e) => e.path));
  const modes: number[] = [];
  for (const entry of entries) modes.push(await prepareTarget(entry.path, owner));
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
      try {
        const { temp, size } = await writeTemp(entry.path, entry.bytes, owner, modes[index]!);
        slots[index] = { target: entry.path, temp, size };
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(STAGE_CONCURRENCY, entries.length) }, stageNext));
  const staged = slots.filter((slot): slot is Staged => slot !== undefined);
  if (failure) {
    await Promise.all(staged.map(({ temp }) => rm(temp, { force: true })));
    throw failure.error;
  }
  await renameAllOrNone(staged);
  return staged.map(({ target, size }) => ({ path: target, size }));
}
