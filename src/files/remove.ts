import { lstat, rm } from 'node:fs/promises';
import { badRequest, errnoToHttpError } from '../errors.js';

/** `rm -r` of a file, a symlink (not its target) or a tree; false when nothing was there. */
export async function removeEntry(path: string): Promise<{ removed: boolean }> {
  if (path === '/') throw badRequest('path: refusing to remove /');
  try {
    await lstat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { removed: false };
    throw errnoToHttpError(error, path);
  }
  try {
    await rm(path, { recursive: true, force: true });
  } catch (error) {
    throw errnoToHttpError(error, path);
  }
  return { removed: true };
}
