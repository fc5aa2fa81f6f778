import { randomBytes } from 'node:crypto';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { badRequest, conflict, errnoToHttpError } from '../errors.js';
import { STREAM_CHUNK_BYTES } from './chunk-size.js';
import type { Owner } from './paths.js';
import { createExclusive, reopenPath } from './user-file.js';
import { lstatAt, openDirectory, openParent, renameAt, type UserDir } from './user-path.js';

/** The mode of a file that did not exist (an existing one keeps its own). */
export const NEW_FILE_MODE = 0o644;

/** A temporary name for `target`'s basename: hidden, recognisable, random. */
export function tempNameFor(name: string): string {
  return `.${name}.envd-${randomBytes(6).toString('hex')}.tmp`;
}

/** True for the temporary files this module creates; tests use it to prove none is left behind. */
export function isTempName(name: string): boolean {
  return /^\..+\.envd-[0-9a-f]{12}\.tmp$/.test(name);
}

/**
 * `mkdir -p` that gives every directory it created to the owner (the ones
 * that existed keep theirs), one component at a time without following
 * anything a user can change (user-path.ts). Returns the topmost directory
 * it created. A parent that is a file is a 400, not a 409: the caller asked
 * for a file, not for that directory.
 */
export async function makeDirectories(dir: string, owner: Owner | undefined): Promise<string | undefined> {
  const { dir: made, created } = await openDirectory(dir, { owner, create: true });
  await made.close();
  return created;
}

/** Where a target goes: its parent directory (open, made if missing), its name, and the mode a new file gets. */
export interface PreparedTarget {
  dir: UserDir;
  name: string;
  path: string;
  mode: number;
}

/**
 * Opens (and makes) the target's parent, checks the target can take a file
 * (it is not a directory), and says which mode to give the new file: an
 * existing file keeps its permissions (an executable script stays executable).
 * The caller closes `dir`.
 */
export async function openTarget(target: string, owner: Owner | undefined): Promise<PreparedTarget> {
  if (target === '/') throw badRequest('/: is a directory');
  const { dir, name } = await openParent(target, { owner, create: true });
  try {
    const existing = await lstatAt(dir, name);
    if (existing?.isDirectory()) throw badRequest(`${target}: is a directory`);
    return { dir, name, path: target, mode: existing?.isFile() ? existing.mode & 0o7777 : NEW_FILE_MODE };
  } catch (error) {
    await dir.close();
    throw error;
  }
}

export type ByteSource = Uint8Array | AsyncIterable<Uint8Array> | Readable;

/** A temporary file written beside its target, not yet renamed. */
export interface Filled {
  /** Its path, for messages and for callers that rename by path (the batch). */
  temp: string;
  /** Its name in the target's directory. */
  name: string;
  size: number;
  /** Its inode: the rename checks that the name still holds this file. */
  ino: number;
}

/**
 * Fills a temporary file from `source`: `fill` for `fillTemp`. A Uint8Array is
 * written and synced; a stream is piped (fsync before close: the rename never
 * exposes bytes that are only in the page cache).
 */
export function writeSource(source: ByteSource, through?: Transform) {
  return async (handle: FileHandle): Promise<void> => {
    if (source instanceof Uint8Array) {
      try {
        await handle.writeFile(source);
        await handle.sync();
      } finally {
        await handle.close();
      }
    } else {
      // The stream owns the handle from here: it closes it when it finishes or is destroyed.
      const file = handle.createWriteStream({ flush: true, highWaterMark: STREAM_CHUNK_BYTES });
      await (through ? pipeline(source, through, file) : pipeline(source, file));
    }
  };
}

/**
 * Writes the source into a fresh temporary file beside the target, flushed to
 * disk and owned by the owner. On any failure (a limit in `through`, the client
 * going away, a full disk) it is removed and the error rethrown.
 */
export async function writeTemp(target: string, source: ByteSource, owner: Owner | undefined, mode: number, through?: Transform, dir?: UserDir): Promise<Filled> {
  return fillTemp(target, owner, mode, writeSource(source, through), dir);
}

/**
 * A fresh temporary file beside the target, created O_EXCL|O_NOFOLLOW relative
 * to the target's open directory and given its mode and owner through its fd
 * (user-path.ts): renaming it away and putting a symlink in its place changes
 * nothing envd does. `fill` writes it and closes the handle; `readPath` opens
 * the same file (not a name) for a second reader, such as a hash, while it is
 * written. On any failure the file is removed and the error rethrown as an HTTP error.
 * `dir` is the target's directory when the caller has it open already.
 */
export async function fillTemp(
  target: string,
  owner: Owner | undefined,
  mode: number,
  fill: (handle: FileHandle, readPath: string) => Promise<void>,
  dir?: UserDir,
): Promise<Filled> {
  const parent = dir ?? (await openParent(target, { owner })).dir;
  try {
    const name = tempNameFor(posix.basename(target));
    const handle = await createExclusive(parent, name, mode, owner).catch((error: unknown) => {
      throw errnoToHttpError(error, target);
    });
    // A second descriptor of the same file, kept open: the size is read from it, and readers reopen it, after fill closed the first.
    let keeper: FileHandle | undefined;
    try {
      keeper = await open(reopenPath(handle), 'r');
      await fill(handle, reopenPath(keeper));
      const { size, ino } = await keeper.stat();
      return { temp: parent.child(name), name, size, ino };
    } catch (error) {
      await handle.close().catch(() => {});
      await unlink(parent.at(name)).catch(() => {});
      throw errnoToHttpError(error, target);
    } finally {
      await keeper?.close();
    }
  } finally {
    if (!dir) await parent.close();
  }
}

const replaced = (target: string) => conflict(`${target}: its temporary file was replaced by another process while it was written; the target may hold what that process put there`);

/** The whole atomic write: the target shows the old bytes or the new ones, never a mix. */
export async function writeAtomically(target: string, source: ByteSource, owner: Owner | undefined, through?: Transform): Promise<{ path: string; size: number }> {
  return fillAtomically(target, owner, (mode, dir) => writeTemp(target, source, owner, mode, through, dir));
}

/**
 * The atomic write around any way of filling the temporary file (`writeTemp`,
 * `fillTemp`, given the target's open directory): renamed over the target
 * relative to that directory.
 */
export async function fillAtomically(target: string, owner: Owner | undefined, writeTempFile: (mode: number, dir: UserDir) => Promise<Filled>): Promise<{ path: string; size: number }> {
  const prepared = await openTarget(target, owner);
  try {
    const { name, size, ino } = await writeTempFile(prepared.mode, prepared.dir);
    // A user who can write the directory can rename the temporary file away and put something in its
    // place: that is theirs, and is neither moved over the target nor answered for. (A swap between this
    // check and the rename moves the user's entry to a name in the same directory, which the user could
    // have done anyway; nothing is written or chowned through it.)
    if ((await lstatAt(prepared.dir, name))?.ino !== ino) throw replaced(target);
    try {
      await renameAt(prepared.dir, name, prepared.dir, prepared.name);
    } catch (error) {
      await unlink(prepared.dir.at(name)).catch(() => {});
      throw errnoToHttpError(error, target);
    }
    return { path: target, size };
  } finally {
    await prepared.dir.close();
  }
}
