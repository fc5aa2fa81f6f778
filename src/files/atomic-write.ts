import { randomBytes } from 'node:crypto';
import { chmod, chown, lstat, mkdir, open, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { badRequest, errnoToHttpError } from '../errors.js';
import { STREAM_CHUNK_BYTES } from './chunk-size.js';
import type { Owner } from './paths.js';

const NEW_FILE_MODE = 0o644;

/** A name beside the target (same directory, so same file system: rename is atomic), hidden, recognisable. */
export function tempPathFor(target: string): string {
  return join(dirname(target), `.${basename(target)}.envd-${randomBytes(6).toString('hex')}.tmp`);
}

/** True for the temporary files this module creates; tests use it to prove none is left behind. */
export function isTempName(name: string): boolean {
  return /^\..+\.envd-[0-9a-f]{12}\.tmp$/.test(name);
}

/**
 * `mkdir -p` that gives every directory it created to the owner (the ones
 * that existed keep theirs). A parent that is a file is a 400, not a 409:
 * the caller asked for a file, not for that directory.
 */
export async function makeDirectories(dir: string, owner: Owner | undefined): Promise<string | undefined> {
  let first: string | undefined;
  try {
    first = await mkdir(dir, { recursive: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') throw badRequest(`${dir}: a component of the path is not a directory`);
    throw errnoToHttpError(error, dir);
  }
  if (first !== undefined && owner) {
    // mkdir returns the topmost directory it created; everything below it is new too.
    for (let created = dir; ; created = dirname(created)) {
      await chown(created, owner.uid, owner.gid);
      if (created === first || created === '/') break;
    }
  }
  return first;
}

/**
 * Checks the target can take a file (it is not a directory) and creates its
 * parents. Returns the mode to give the new file: an existing file keeps its
 * permissions (an executable script stays executable).
 */
export async function prepareTarget(target: string, owner: Owner | undefined): Promise<number> {
  if (target === '/') throw badRequest('/: is a directory');
  const existing = await lstat(target).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    if (error.code === 'ENOTDIR') throw badRequest(`${target}: a component of the path is not a directory`);
    throw errnoToHttpError(error, target);
  });
  if (existing?.isDirectory()) throw badRequest(`${target}: is a directory`);
  if (!existing) await makeDirectories(dirname(target), owner);
  return existing?.isFile() ? existing.mode & 0o7777 : NEW_FILE_MODE;
}

export type ByteSource = Uint8Array | AsyncIterable<Uint8Array> | Readable;

/**
 * Writes the source into a fresh temporary file beside the target, flushed to
 * disk and owned by the owner, and returns its path. On any failure (a limit
 * in `through`, the client going away, a full disk) the temporary file is
 * removed and the error rethrown: nothing is left behind.
 */
export async function writeTemp(target: string, source: ByteSource, owner: Owner | undefined, mode: number, through?: Transform): Promise<{ temp: string; size: number }> {
  return fillTemp(target, owner, mode, async (handle) => {
    if (source instanceof Uint8Array) {
      try {
        await handle.writeFile(source);
        await handle.sync();
      } finally {
        await handle.close();
      }
    } else {
      // The stream owns the handle from here: it closes it when it finishes or is destroyed.
      // flush: fsync before close, so the rename never exposes bytes that are only in the page cache.
      const file = handle.createWriteStream({ flush: true, highWaterMark: STREAM_CHUNK_BYTES });
      await (through ? pipeline(source, through, file) : pipeline(source, file));
    }
  });
}

/**
 * A fresh temporary file beside the target, filled by `fill` (which writes it
 * flushed to disk and closes the handle), given its mode and owner. On any
 * failure it is removed and the error rethrown as an HTTP error.
 */
export async function fillTemp(target: string, owner: Owner | undefined, mode: number, fill: (handle: FileHandle, temp: string) => Promise<void>): Promise<{ temp: string; size: number }> {
  const temp = tempPathFor(target);
  // 'wx': never reuse or follow anything already at the temp name.
  const handle = await open(temp, 'wx', mode).catch((error) => {
    throw errnoToHttpError(error, target);
  });
  try {
    await fill(handle, temp);
    // open()'s mode went through the umask; say exactly what we mean.
    await chmod(temp, mode);
    if (owner) await chown(temp, owner.uid, owner.gid);
    const { size } = await stat(temp);
    return { temp, size };
  } catch (error) {
    await rm(temp, { force: true });
    throw errnoToHttpError(error, target);
  }
}

/** The whole atomic write: the target shows the old bytes or the new ones, never a mix. */
export async function writeAtomically(target: string, source: ByteSource, owner: Owner | undefined, through?: Transform): Promise<{ path: string; size: number }> {
  return fillAtomically(target, owner, (mode) => writeTemp(target, source, owner, mode, through));
}

/** The atomic write around any way of filling the temporary file (`writeTemp`, `fillTemp`). */
export async function fillAtomically(target: string, owner: Owner | undefined, writeTempFile: (mode: number) => Promise<{ temp: string; size: number }>): Promise<{ path: string; size: number }> {
  const mode = await prepareTarget(target, owner);
  const { temp, size } = await writeTempFile(mode);
  try {
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    throw errnoToHttpError(error, target);
  }
  return { path: target, size };
}
