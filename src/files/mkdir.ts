import { stat } from 'node:fs/promises';
import { conflict, errnoToHttpError } from '../errors.js';
import { makeDirectories } from './atomic-write.js';
import type { Owner } from './paths.js';

/** `mkdir -p`: created is false when a directory (or a symlink to one) is already there; 409 over anything else. */
export async function makeDirectory(path: string, owner: Owner | undefined): Promise<{ path: string; created: boolean }> {
  const existing = await stat(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw errnoToHttpError(error, path);
  });
  if (existing?.isDirectory()) return { path, created: false };
  if (existing) throw conflict(`${path}: already exists and is not a directory`);
  const first = await makeDirectories(path, owner);
  // undefined: someone else created it between our stat and mkdir; it is there, just not ours.
  return { path, created: first !== undefined };
}
