import { constants } from 'node:fs';
import { readdir, rmdir, unlink } from 'node:fs/promises';
import { HttpError } from '../errors.js';
import type { Owner } from './paths.js';
import { lstatAt, openFd, openParent, toHttp, UserDir, type Walked } from './user-path.js';

const { O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_RDONLY } = constants;

/** How many entries of one directory a recursive removal works on at once. */
const REMOVE_CONCURRENCY = 16;

/**
 * `rm -r` of `name` in `dir`, never following anything: each directory is
 * opened O_NOFOLLOW and its entries removed relative to that fd, so swapping
 * a directory for a symlink meanwhile steers nothing (the swapped-in link is
 * what gets removed). False when nothing was there.
 */
export async function removeTreeAt(dir: UserDir, name: string): Promise<boolean> {
  const stats = await lstatAt(dir, name);
  if (!stats) return false;
  try {
    if (stats.isDirectory()) await removeDirectoryAt(dir, name);
    else await unlink(dir.at(name));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return true;
    // A directory swapped in where a file was (EISDIR/EPERM from unlink): remove that instead.
    if ((error as NodeJS.ErrnoException).code === 'EISDIR') return removeTreeAt(dir, name);
    throw toHttp(error, dir.child(name));
  }
  return true;
}

async function removeDirectoryAt(parent: UserDir, name: string): Promise<void> {
  let inner: UserDir;
  try {
    inner = new UserDir(await openFd(parent.at(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK), parent.child(name));
  } catch (error) {
    // Swapped for a symlink or a file since the lstat: remove that name, follow nothing.
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') return void (await unlink(parent.at(name)));
    throw error;
  }
  try {
    // Again until empty: a user may add entries while it is being removed.
    for (let round = 0; round < 3; round++) {
      const names = await readdir(inner.self);
      if (names.length === 0) break;
      for (let i = 0; i < names.length; i += REMOVE_CONCURRENCY) {
        await Promise.all(names.slice(i, i + REMOVE_CONCURRENCY).map((entry) => removeTreeAt(inner, entry)));
      }
    }
  } finally {
    await inner.close();
  }
  await rmdir(parent.at(name));
}

/** `rm -r` of a path (its parents resolved by the walk); false when nothing was there. */
export async function removeTree(path: string, owner?: Owner): Promise<boolean> {
  let parent: Walked & { name: string };
  try {
    parent = await openParent(path, { owner });
  } catch (error) {
    if (error instanceof HttpError && error.status === 404) return false;
    throw error;
  }
  try {
    return await removeTreeAt(parent.dir, parent.name);
  } finally {
    await parent.dir.close();
  }
}

