import type { Stats } from 'node:fs';
import { closeSync, constants } from 'node:fs';
import { open, readlink, unlink, type FileHandle } from 'node:fs/promises';
import { posix } from 'node:path';
import { badRequest, HttpError } from '../errors.js';
import type { Owner } from './paths.js';
import { fstat, linkTrust, MAX_LINKS, O_PATH, openFd, openParent, toHttp, untrustedLink, type UserDir } from './user-path.js';

/**
 * Files created and opened on a user's behalf, by the rule of user-path.ts:
 * created O_EXCL relative to an open directory, read only after fstat showed
 * a regular file, never through a symlink another user can change.
 */

const { O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_RDONLY } = constants;

/**
 * A new file `name` in `dir`: O_CREAT|O_EXCL|O_NOFOLLOW (never reuses or
 * follows what is there), then given exactly `mode` and the owner through
 * the fd. The caller owns the handle.
 */
export async function createExclusive(dir: UserDir, name: string, mode: number, owner: Owner | undefined): Promise<FileHandle> {
  const handle = await open(dir.at(name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, mode & 0o777);
  try {
    // open()'s mode went through the umask; say exactly what we mean.
    await handle.chmod(mode);
    if (owner) await handle.chown(owner.uid, owner.gid);
    return handle;
  } catch (error) {
    await handle.close();
    await unlink(dir.at(name)).catch(() => {});
    throw error;
  }
}

/**
 * A path that opens `handle`'s own file (not a name: it cannot be swapped):
 * for a second, independent reader of a file being written. Valid while the handle is open.
 */
export function reopenPath(handle: FileHandle): string {
  return `/proc/self/fd/${handle.fd}`;
}


/** What a read refuses: only a regular file's bytes end (a FIFO waits for a writer, a device may never end). */
export function notRegular(path: string, stats: Stats): HttpError | undefined {
  if (stats.isFile()) return undefined;
  if (stats.isDirectory()) return badRequest(`${path}: is a directory`);
  const kind = stats.isFIFO() ? 'a FIFO' : stats.isSocket() ? 'a socket' : stats.isCharacterDevice() ? 'a character device' : stats.isBlockDevice() ? 'a block device' : 'not a regular file';
  return badRequest(`${path}: is ${kind}, not a regular file that can be read`);
}

/**
 * Opens a regular file for reading: resolved by the walk, its last component
 * opened O_PATH|O_NOFOLLOW (a symlink is followed only where the walk would),
 * checked with fstat (a directory, FIFO, socket or device is a 400), then
 * reopened through its own fd with O_RDONLY|O_NONBLOCK: the inode that was
 * checked is the one read, and nothing here can wait for another process.
 * The caller owns the handle.
 */
export async function openRegular(path: string, owner?: Owner): Promise<{ handle: FileHandle; stats: Stats }> {
  let current = path;
  /** A link only the request's user vouches for was followed: what it leads to must be theirs, or readable by anyone. */
  let onOwnersWord = false;
  for (let links = 0; ; links++) {
    if (current === '/') throw badRequest('/: is a directory');
    const { dir, name } = await openParent(current, { owner });
    let fd: number;
    let stats: Stats;
    try {
      fd = await openFd(dir.at(name), O_PATH | O_NOFOLLOW).catch((error: unknown) => {
        throw toHttp(error, current);
      });
      try {
        stats = await fstat(fd);
      } catch (error) {
        closeSync(fd);
        throw error;
      }
      if (stats.isSymbolicLink()) {
        closeSync(fd);
        const trust = linkTrust(await dir.stats(), stats, owner);
        if (trust === undefined) throw untrustedLink(current);
        if (trust === 'owner') onOwnersWord = true;
        if (links >= MAX_LINKS) throw badRequest(`${path}: too many levels of symbolic links`);
        current = posix.resolve(dir.path, await readlink(dir.at(name)));
        continue;
      }
    } finally {
      await dir.close();
    }
    try {
      const refused = notRegular(current, stats);
      if (refused) throw refused;
      if (onOwnersWord && owner && stats.uid !== owner.uid && (stats.mode & 0o004) === 0) {
        throw badRequest(`${path}: leads through a symbolic link of uid ${owner.uid} to ${current}, which they cannot read; envd does not read it as root`);
      }
      const handle = await open(`/proc/self/fd/${fd}`, O_RDONLY | O_NONBLOCK).catch((error: unknown) => {
        throw toHttp(error, current);
      });
      return { handle, stats };
    } finally {
      closeSync(fd);
    }
  }
}

