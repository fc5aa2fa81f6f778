import { lstat, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { badRequest, errnoToHttpError } from '../errors.js';
import { makeDirectories } from './atomic-write.js';
import { describeEntry, type EntryInfo } from './entry-info.js';
import { readOwnerNames } from './owner-names.js';
import type { Owner } from './paths.js';

/** rename(2) with `to`'s parents created (owned by `owner`); answers with what is now at `to`. */
export async function moveEntry(from: string, to: string, owner: Owner | undefined): Promise<EntryInfo> {
  // The root can be neither moved nor replaced (rename(2) says EBUSY): a bad request, not envd's failure.
  if (from === '/') throw badRequest('from: / cannot be moved');
  if (to === '/') throw badRequest('to: / cannot be replaced');
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
