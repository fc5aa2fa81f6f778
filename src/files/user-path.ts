import type { Stats } from 'node:fs';
import { closeSync, constants, openSync, fchown as fchownCallback, fstat as fstatCallback, open as openCallback } from 'node:fs';
import { lstat, mkdir, readlink, rename } from 'node:fs/promises';
import { promisify } from 'node:util';
import { posix } from 'node:path';
import { badRequest, conflict, errnoToHttpError, HttpError } from '../errors.js';
import type { Owner } from './paths.js';

/**
 * The one place envd opens, creates, renames, removes and chowns on a user's
 * behalf. The rule it keeps: **root never follows a path component that a
 * less-privileged user can change.**
 *
 * How, with nothing but Node's fs (no openat in Node, no native addon): a path
 * is walked one component at a time from `/`, each component opened with
 * `O_PATH|O_NOFOLLOW` relative to the directory opened before it, spelled
 * `/proc/self/fd/<dirfd>/<name>`. The kernel resolves `/proc/self/fd/<dirfd>`
 * to that open directory itself (a "magic link": no name is looked up again),
 * then looks up exactly one `name` in it, and O_NOFOLLOW keeps that from
 * following a symlink. mkdir, rename, unlink, rmdir, lstat and readlink never
 * follow their last component, so they are dirfd-relative the same way.
 * Ownership and modes are set with fchown/fchmod on an open fd, never by path.
 * Every call runs on the thread pool (fs.promises), never on the event loop;
 * none can wait on another process: O_PATH opens do not open a device or a
 * FIFO, and content is read only from a reopened fd that fstat showed to be a
 * regular file (`openRegular`), with O_NONBLOCK.
 *
 * Which symlinks are followed: one in a directory that only root or the
 * request's own user can change (owned by one of them, not writable by group
 * or others; or sticky, with the link owned by one of them). A user can
 * redirect their own requests, never someone else's, and never root's; and a
 * walk that followed a link only the user vouches for must end in a directory
 * of that user's (`~/.venv/lib64 -> lib` works, `~/link -> /etc` is a 400):
 * otherwise root would act with its own rights where the user could not. Any
 * other symlink in the middle of a path is a 400; at the end of a path it is
 * the thing itself (replaced by a write, removed by a delete, not read).
 *
 * Split by concern: this file walks and opens directories; user-file.ts
 * creates and opens files; user-tree-remove.ts removes trees.
 *
 * Needs /proc (envd-init mounts it; a kernel without it has no envd anyway).
 */

/** Not in fs.constants; the same on every Linux architecture envd ships for (x86-64, arm64). */
export const O_PATH = 0o10000000;
const { O_DIRECTORY, O_NOFOLLOW, O_RDONLY, O_NONBLOCK } = constants;

/** Symlinks followed in one resolution before it is ELOOP, as the kernel's own limit. */
export const MAX_LINKS = 40;

/** open(2) giving a bare fd: a walk holds a directory for one step, and a FileHandle's close would be a second trip through the pool. */
export const openFd = promisify(openCallback);
export const fstat = promisify(fstatCallback);
const fchown = promisify(fchownCallback);

/**
 * A directory opened by a walk (O_PATH, or O_RDONLY for one envd made): its
 * fd pins it, whatever happens to its name afterwards. Closing it is
 * synchronous: closing a directory's fd never waits.
 */
export class UserDir {
  private described: Promise<Stats> | undefined;
  private closed = false;

  constructor(
    private readonly fd: number,
    /** The path it was reached by, for messages only: never handed to fs. */
    readonly path: string,
    /** The process-wide `/`: never closed. */
    private readonly shared = false,
  ) {}

  /** The descriptor, for native calls that resolve a name relative to it (openat: tar/file-batch.ts). */
  get descriptor(): number {
    return this.fd;
  }

  /** Its owner and mode (fstat, once): whether a symlink in it may be followed. */
  stats(): Promise<Stats> {
    this.described ??= fstat(this.fd);
    return this.described;
  }

  /** A name inside this directory, for one dirfd-relative call (the name must be one component). */
  at(name: string): string {
    if (name === '' || name === '.' || name === '..' || name.includes('/')) throw badRequest(`${this.path}: ${JSON.stringify(name)} is not a single name`);
    return `/proc/self/fd/${this.fd}/${name}`;
  }

  /** The directory itself, as a path the kernel resolves to this fd (readdir). */
  get self(): string {
    return `/proc/self/fd/${this.fd}`;
  }

  /** The message path of an entry in this directory. */
  child(name: string): string {
    return posix.join(this.path, name);
  }

  /**
   * Hands the descriptor over to a caller that keeps it beyond this object
   * (a watch holds its directory for as long as it watches it); the caller
   * closes it. For the shared `/`, a new descriptor of it.
   */
  detach(): number {
    if (this.closed) throw new Error(`${this.path}: cannot hand over a closed directory`);
    // The shared `/` stays open for every walk: the caller gets a descriptor of its own (`/` is root's alone).
    if (this.shared) return openSync('/', O_PATH | O_DIRECTORY);
    this.closed = true;
    return this.fd;
  }

  async close(): Promise<void> {
    if (this.closed || this.shared) return;
    this.closed = true;
    closeSync(this.fd);
  }
}

/**
 * May a symlink in a directory with `dir`'s stats be followed on behalf of `owner`, and on whose word:
 * 'root' when only root (or envd itself) can change it, 'owner' when the request's own user can too,
 * undefined when someone else can.
 */
export function linkTrust(dir: Stats, link: Stats, owner: Owner | undefined): 'root' | 'owner' | undefined {
  const isRoot = (uid: number) => uid === 0 || uid === process.geteuid?.();
  const isOwner = (uid: number) => owner !== undefined && uid === owner.uid;
  const by = (uid: number) => (isRoot(uid) ? 'root' : isOwner(uid) ? 'owner' : undefined);
  const dirBy = by(dir.uid);
  if (dirBy === undefined) return undefined;
  if ((dir.mode & 0o022) === 0) return dirBy;
  if ((dir.mode & 0o1000) === 0) return undefined;
  const linkBy = by(link.uid);
  return linkBy === undefined ? undefined : dirBy === 'root' && linkBy === 'root' ? 'root' : 'owner';
}

/** `/`, opened once: every walk starts there (envd never changes its root). */
let root: UserDir | undefined;
function rootDir(): UserDir {
  root ??= new UserDir(openSync('/', O_PATH | O_DIRECTORY), '/', true);
  return root;
}

async function openDirAt(at: string, path: string): Promise<UserDir> {
  return new UserDir(await openFd(at, O_PATH | O_DIRECTORY | O_NOFOLLOW), path);
}

export interface WalkOptions {
  /** On whose behalf: their own symlinks are followed too. */
  owner?: Owner | undefined;
  /** Create missing directories (mode 0755, given to `owner` with fchown). */
  create?: boolean;
}

/** What `openDirectory` did. */
export interface Walked {
  dir: UserDir;
  /** The topmost directory it created (mkdir -p's answer), if any. */
  created: string | undefined;
}

/**
 * Opens the directory at `path` by the walk described above, creating what is
 * missing when asked. A component that is a file is a 400; a symlink that may
 * not be followed is a 400 that says why; a missing one without `create` is a
 * 404. Never loops: each step is one lookup, links are counted.
 */
export async function openDirectory(path: string, options: WalkOptions = {}): Promise<Walked> {
  let pending = path.split('/').filter((c) => c !== '' && c !== '.');
  let dir = rootDir();
  let created: string | undefined;
  let links = 0;
  /** A link only the request's user vouches for was followed: where it leads must be that user's own. */
  let onOwnersWord = false;
  try {
    while (pending.length > 0) {
      const name = pending.shift()!;
      if (name === '..') {
        const up = await openDirAt(`${dir.self}/..`, posix.dirname(dir.path));
        await dir.close();
        dir = up;
        continue;
      }
      const next = await stepInto(dir, name, options);
      if ('link' in next) {
        if (++links > MAX_LINKS) throw badRequest(`${path}: too many levels of symbolic links`);
        if (next.trust === 'owner') onOwnersWord = true;
        // A link's text is resolved against where it was found: start again from /.
        const target = posix.resolve(dir.path, next.link);
        pending = [...target.split('/').filter((c) => c !== '' && c !== '.'), ...pending];
        await dir.close();
        dir = rootDir();
        continue;
      }
      if (next.created && created === undefined) created = next.dir.path;
      await dir.close();
      dir = next.dir;
    }
    // The user's own link may lead the request anywhere the user could go itself, not where only root can:
    // root would write, rename or remove there with its own rights (say ~/link -> /etc and a write of
    // ~/link/passwd). So the directory it ends in must be the user's.
    if (onOwnersWord && options.owner && (await dir.stats()).uid !== options.owner.uid) {
      throw badRequest(`${path}: leads through a symbolic link of uid ${options.owner.uid} to ${dir.path}, which is not theirs; envd does not follow it as root`);
    }
    return { dir, created };
  } catch (error) {
    await dir.close();
    throw toHttp(error, path);
  }
}

/**
 * One step of a walk: the directory `name` inside `dir` (made if asked), or
 * the text of a link that may be followed. One trip through the pool for a
 * directory (O_DIRECTORY|O_NOFOLLOW refuses anything else); an lstat only
 * when it is something else.
 */
async function stepInto(dir: UserDir, name: string, options: WalkOptions): Promise<{ dir: UserDir; created: boolean } | { link: string; trust: 'root' | 'owner' }> {
  const path = dir.child(name);
  for (let attempt = 0; ; attempt++) {
    try {
      return { dir: await openDirAt(dir.at(name), path), created: false };
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') {
        if (!options.create || attempt > 2) throw error;
        const made = await makeOne(dir, name, options.owner);
        if (made) return { dir: made, created: true };
        continue; // someone else made it meanwhile: look again
      }
      if (code !== 'ENOTDIR' && code !== 'ELOOP') throw error;
    }
    const stats = await lstat(dir.at(name)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (!stats || stats.isDirectory()) {
      // Changed between the two looks: look again, a few times (a user flipping it forever gets a 409, not a spin).
      if (attempt > 2) throw conflict(`${path}: changed while it was being opened; try again`);
      continue;
    }
    if (!stats.isSymbolicLink()) throw badRequest(`${path}: a component of the path is not a directory`);
    const trust = linkTrust(await dir.stats(), stats, options.owner);
    if (trust === undefined) throw untrustedLink(path);
    return { link: await readlink(dir.at(name)), trust };
  }
}

export function untrustedLink(path: string): HttpError {
  return badRequest(`${path}: is a symbolic link that another user can change; envd does not follow it as root`);
}

/** mkdir of one name, then opened without following and given to the owner; undefined when it was there already. */
async function makeOne(dir: UserDir, name: string, owner: Owner | undefined): Promise<UserDir | undefined> {
  try {
    await mkdir(dir.at(name), 0o755);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return undefined;
    // The directory is open, so it exists: a file system that makes nothing (/proc) says ENOENT.
    if (code === 'ENOENT') throw new HttpError(403, `${dir.child(name)}: cannot be created: ${dir.path} takes no new entries (a pseudo-file system)`);
    throw error;
  }
  const fd = await openFd(dir.at(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  const made = new UserDir(fd, dir.child(name));
  try {
    // Only what envd itself made is given away (a user could have put their own directory there meanwhile).
    if (owner && (await made.stats()).uid === process.geteuid?.()) await fchown(fd, owner.uid, owner.gid);
    return made;
  } catch (error) {
    await made.close();
    throw error;
  }
}

/** The parent of `path`, opened (and made, with `create`), and the last component's name. */
export async function openParent(path: string, options: WalkOptions = {}): Promise<Walked & { name: string }> {
  const name = posix.basename(path);
  if (path === '/' || name === '') throw badRequest('/: has no parent');
  return { ...(await openDirectory(posix.dirname(path), options)), name };
}

/** lstat of a path whose parents are resolved by the walk; undefined when nothing is there (a missing parent included). */
export async function lstatPath(path: string, owner?: Owner): Promise<Stats | undefined> {
  let parent: Walked & { name: string };
  try {
    parent = await openParent(path, { owner });
  } catch (error) {
    if (error instanceof HttpError && error.status === 404) return undefined;
    throw error;
  }
  try {
    return await lstatAt(parent.dir, parent.name);
  } finally {
    await parent.dir.close();
  }
}

/** lstat of one name in an open directory; undefined when nothing is there. */
export async function lstatAt(dir: UserDir, name: string): Promise<Stats | undefined> {
  try {
    return await lstat(dir.at(name));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw toHttp(error, dir.child(name));
  }
}

/** rename(2) of one name in one directory to one name in another (or the same); neither is followed. */
export async function renameAt(from: UserDir, fromName: string, to: UserDir, toName: string): Promise<void> {
  await rename(from.at(fromName), to.at(toName));
}

/**
 * The directory `name` in `dir`, opened for reading its entries
 * (O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_NONBLOCK): undefined when nothing, a
 * symlink or anything but a directory is there now (a user swapped it since
 * it was listed), so a walk down a user's tree never leaves it.
 */
export async function openSubdirectory(dir: UserDir, name: string): Promise<UserDir | undefined> {
  try {
    return new UserDir(await openFd(dir.at(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK), dir.child(name));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR') return undefined;
    throw toHttp(error, dir.child(name));
  }
}

/** Errors of this module as HTTP errors: errno mapped, a missing component named. */
export function toHttp(error: unknown, path: string): unknown {
  if (error instanceof HttpError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOTDIR') return badRequest(`${path}: a component of the path is not a directory`);
  return errnoToHttpError(error, path);
}
