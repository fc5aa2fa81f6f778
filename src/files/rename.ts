import { lstat, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { errnoToHttpError } from '../errors.js';
import { makeDirectories } from './atomic-write.js';
import { describeEntry, type EntryInfo } from './entry-info.js';
import { readOwnerNames } from './owner-names.js';
import type { Owner } from './paths.js';

/** rename(2) with `to`'s parents created (owned by `owner`); answers with what is now at `to`. */
export async function moveEntry(from: string, to: string, owner: Owner | undefined): Promise<EntryInfo> {
  await lstat(from).catch((error) => {
    throw errnoToHttpError(error, from);
  });
  await makeDirectories(dirname(to), owner);
  try {
    await rename(from, to);
  } catch (error) {
    throw errnoToHttpError(error, to);
  }
  return describeEntry(to, await readOwnerNames());
}
