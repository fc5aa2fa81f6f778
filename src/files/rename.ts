import { badRequest, errnoToHttpError } from '../errors.js';
import { describeEntry, type EntryInfo } from './entry-info.js';
import { readOwnerNames } from './owner-names.js';
import type { Owner } from './paths.js';
import { lstatAt, openParent, renameAt } from './user-path.js';

/**
 * rename(2) with `to`'s parents created (owned by `owner`); answers with what is now at `to`.
 * Both parents are reached by user-path.ts's walk and the rename is relative to their
 * descriptors, so a symlink another user swaps into either path steers nothing.
 */
export async function moveEntry(from: string, to: string, owner: Owner | undefined): Promise<EntryInfo> {
  // The root can be neither moved nor replaced (rename(2) says EBUSY): a bad request, not envd's failure.
  if (from === '/') throw badRequest('from: / cannot be moved');
  if (to === '/') throw badRequest('to: / cannot be replaced');
  const source = await openParent(from, { owner });
  try {
    const found = await lstatAt(source.dir, source.name);
    if (!found) throw errnoToHttpError(Object.assign(new Error(`ENOENT: ${from}`), { code: 'ENOENT' }), from);
    const target = await openParent(to, { owner, create: true });
    try {
      await renameAt(source.dir, source.name, target.dir, target.name).catch((error: unknown) => {
        throw errnoToHttpError(error, to);
      });
      // Described where it went, relative to the same directory (not by path, which the user may have changed since).
      return await describeEntry(to, await readOwnerNames(), undefined, target.dir.at(target.name));
    } finally {
      await target.dir.close();
    }
  } finally {
    await source.dir.close();
  }
}
