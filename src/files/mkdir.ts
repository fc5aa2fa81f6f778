import { conflict } from '../errors.js';
import type { Owner } from './paths.js';
import { lstatAt, openDirectory, openParent } from './user-path.js';

/**
 * `mkdir -p`, one component at a time (user-path.ts): never loops, whatever
 * the file system (Node's recursive mkdir spins forever on /proc paths), and
 * follows no symlink another user can change. created is false when a
 * directory (or a symlink to one that may be followed) is already there;
 * 409 over anything else.
 */
export async function makeDirectory(path: string, owner: Owner | undefined): Promise<{ path: string; created: boolean }> {
  if (path === '/') return { path, created: false };
  const parent = await openParent(path, { owner, create: true });
  try {
    const existing = await lstatAt(parent.dir, parent.name);
    if (existing && !existing.isDirectory() && !existing.isSymbolicLink()) throw conflict(`${path}: already exists and is not a directory`);
  } finally {
    await parent.dir.close();
  }
  const { dir, created } = await openDirectory(path, { owner, create: true });
  await dir.close();
  // undefined: someone else created it meanwhile; it is there, just not ours.
  return { path, created: (parent.created ?? created) !== undefined };
}
