import { constants } from 'node:fs';
import { lstat, open, readdir, rename, rmdir, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { conflict, HttpError } from '../errors.js';
import { pathOfDescriptor } from './archive-anchor.js';

/**
 * `mode=merge`, all or nothing: `checkMerge` walks the extracted tree
 * against the existing one before anything moves, and refuses (409, naming
 * the entry) a directory where the target has a file or symlink, and a file
 * or symlink where it has a non-empty directory (GNU tar refuses that too: a
 * sandbox could otherwise wipe a developer's `.git` through `envd cp`). Then
 * `moveInto` renames each entry in: a whole new subtree in one rename, an
 * existing file or symlink replaced, an empty directory given way.
 *
 * The target's directories are opened one at a time without following
 * (O_NOFOLLOW), and named through their descriptors: a symlink a user puts
 * in place of one is never followed, it is a conflict. Directories that
 * exist keep their own mode, owner and mtime.
 */
export async function checkMerge(extracted: string, target: string, shown: string, directories: Map<string, unknown>): Promise<void> {
  await walk(extracted, target, shown, '', async (name, entry, existing, inTarget) => {
    if (!existing) return false;
    if (entry.isDirectory()) {
      if (!existing.isDirectory()) throw refuse(name, `a directory where ${join(shown, name)} is a ${kindOf(existing)}`);
      directories.delete(name);
      return true;
    }
    if (existing.isDirectory() && (await readdir(inTarget)).length > 0) throw refuse(name, `a ${kindOf(entry)} where ${join(shown, name)} is a non-empty directory`);
    return false;
  });
}

/** Moves what checkMerge accepted into place; what changed meanwhile (a user's own work) is a 409. */
export async function moveInto(extracted: string, target: string, shown: string): Promise<void> {
  try {
    await walk(extracted, target, shown, '', async (name, entry, existing, inTarget, inExtracted) => {
      if (existing?.isDirectory() && entry.isDirectory()) return true;
      if (existing?.isDirectory()) await rmdir(inTarget);
      await rename(inExtracted, inTarget);
      return false;
    });
  } catch (error) {
    if (error instanceof HttpError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR' || code === 'EISDIR' || code === 'ELOOP') {
      throw conflict(`path: ${shown} changed while the archive was merged into it (${code}); part of the archive may be in place`);
    }
    throw error;
  }
}

/** What to do with one entry of the extracted tree; true: descend into it (both are directories). */
type Visit = (name: string, entry: Awaited<ReturnType<typeof lstat>>, existing: Awaited<ReturnType<typeof lstat>> | undefined, inTarget: string, inExtracted: string) => Promise<boolean>;

async function walk(extracted: string, target: string, shown: string, prefix: string, visit: Visit): Promise<void> {
  let handle: FileHandle;
  try {
    handle = await open(target, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') throw conflict(`path: ${join(shown, prefix)} is not a directory (a symlink is not followed)`);
    throw error;
  }
  try {
    const base = pathOfDescriptor(handle, target);
    for (const name of await readdir(extracted)) {
      const inExtracted = join(extracted, name);
      const inTarget = join(base, name);
      const [entry, existing] = await Promise.all([lstat(inExtracted), lstat(inTarget).catch(absent)]);
      const relative = prefix ? `${prefix}/${name}` : name;
      if (await visit(relative, entry, existing, inTarget, inExtracted)) await walk(inExtracted, inTarget, shown, relative, visit);
    }
  } finally {
    await handle.close();
  }
}

function absent(error: NodeJS.ErrnoException): undefined {
  if (error.code === 'ENOENT') return undefined;
  throw error;
}

function refuse(name: string, why: string): HttpError {
  return conflict(`archive entry ${JSON.stringify(name)}: ${why}; mode=merge never replaces it, and nothing was written`);
}

function kindOf(info: Awaited<ReturnType<typeof lstat>>): string {
  if (info.isDirectory()) return 'directory';
  if (info.isSymbolicLink()) return 'symlink';
  return info.isFile() ? 'file' : 'special file';
}
