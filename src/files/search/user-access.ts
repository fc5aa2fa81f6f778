import { closeSync, constants, existsSync, fstatSync, lstatSync, openSync, readdirSync, readSync, statSync, type Stats } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { dirname } from 'node:path';
import { badRequest, errnoToHttpError, HttpError } from '../../errors.js';
import type { SearchCalls } from '../../native/search-calls.js';
import type { EntryStats } from '../entry-info.js';

/**
 * The one place search and find touch paths a sandbox user controls. envd
 * runs as root; what it reads on a user's behalf must be what that user could
 * read, and no symlink the user plants may send root elsewhere:
 *
 * - every directory below the root is opened through its parent's descriptor
 *   (openat(2) through envd's addon, src/native/open-at.c; where it does not
 *   load, `/proc/self/fd/N/name`) with O_NOFOLLOW|O_DIRECTORY, so swapping a
 *   directory for a symlink mid-walk opens nothing;
 * - files are opened the same way with O_NOFOLLOW|O_NONBLOCK, and only when
 *   their directory entry says "regular file" (FIFOs, devices and sockets are
 *   never opened);
 * - the permission check runs on fstat of the opened descriptor (the inode
 *   that is read), with the kernel's owner/group/other rule for the user's
 *   uid and groups. POSIX ACLs are not consulted (docs/api.md).
 *
 * Everything here is synchronous: the search runs it in time slices (search.ts).
 */

/** A name as given to open: the string, or its bytes when they are not UTF-8 (the string is then lossy). */
export type Name = string | Buffer;

export interface DirEntry {
  /** For answers: the name decoded as UTF-8 (invalid bytes become U+FFFD). */
  name: string;
  /** The bytes, when `name` cannot be used to open the entry. */
  raw: Buffer | undefined;
  isDir: boolean;
  isFile: boolean;
}

/**
 * listDir's text: type letter and name, joined by '/' (and one after the
 * last when more follow), read one entry at a time. No array of entries: a
 * part of a large directory's (thousands of entries) lived long enough to be
 * promoted to V8's old generation, 43 MiB of garbage over 300,000 files.
 */
function* parseListing(listed: string, more: boolean): Generator<DirEntry, void, undefined> {
  const end = more ? listed.length - 1 : listed.length;
  for (let at = 0; at < end; ) {
    let slash = listed.indexOf('/', at);
    if (slash === -1 || slash > end) slash = end;
    const letter = listed.charCodeAt(at);
    yield { name: listed.slice(at + 1, slash), raw: undefined, isDir: letter === 0x64, isFile: letter === 0x66 };
    at = slash + 1;
  }
}

/** The same as bytes (a name in it is not UTF-8): names that are not UTF-8 keep their bytes to be opened by. */
function parseListingBytes(listed: Buffer, more: boolean): DirEntry[] {
  const entries: DirEntry[] = [];
  const end = more ? listed.length - 1 : listed.length;
  for (let at = 0; at < end; ) {
    const slash = listed.indexOf(0x2f, at);
    const next = slash === -1 || slash > end ? end : slash;
    entries.push(byteEntry(listed.subarray(at + 1, next), listed[at] === 0x64, listed[at] === 0x66));
    at = next + 1;
  }
  return entries;
}

function byteEntry(name: Buffer, isDir: boolean, isFile: boolean): DirEntry {
  return { name: name.toString('utf8'), raw: isUtf8(name) ? undefined : Buffer.from(name), isDir, isFile };
}

/** In byte order of their names (ripgrep's `--sort path`), as the addon's listDir sorts them. */
function sortByNameBytes(entries: DirEntry[]): DirEntry[] {
  const keyed = entries.map((entry) => ({ entry, key: entry.raw ?? Buffer.from(entry.name) }));
  return keyed.sort((a, b) => Buffer.compare(a.key, b.key)).map(({ entry }) => entry);
}

/** A part of a directory's listing (OpenDir.listChunk). */
export interface ListedChunk {
  /** In order; each iteration reads the listing again, making no array of it. */
  entries: Iterable<DirEntry>;
  /** More entries follow in the next part. */
  more: boolean;
  /** The listing's size, for the walk's budget (0 without the addon). */
  bytes: number;
  /** False when the part surely holds none of `.git`, `.gitignore`, `.ignore`. */
  ignoreFilesMaybe: boolean;
}

/** Whose permissions apply; undefined: no check (envd is not root, or the user is root). */
export interface Reader {
  uid: number;
  gids: ReadonlySet<number>;
}

const OPEN_DIR = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const OPEN_FILE = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/** Without /proc (an image that does not mount it) children are opened by full path: O_NOFOLLOW still guards the last component. */
const HAS_PROC_FD = existsSync('/proc/self/fd');

/** A file opened for the search, its first bytes read: `fd` is -1 once closed (all of it was read). */
export interface StartedFile {
  fd: number;
  size: number;
  /** How many bytes of the file the buffer holds from its start. */
  length: number;
}

/** openFileAt's results (one call at a time: the walk is synchronous). */
const started = new Float64Array(3);

/** The reader as the addon takes it, [uid, gid...], made once per reader. */
const packedReaders = new WeakMap<Reader, Int32Array>();
export function packed(reader: Reader | undefined): Int32Array | null {
  if (!reader) return null;
  let ids = packedReaders.get(reader);
  if (!ids) packedReaders.set(reader, (ids = Int32Array.from([reader.uid, ...reader.gids])));
  return ids;
}

/** The permission bits `reader` gets from `stats`: 4 read, 2 write, 1 execute. */
function bitsFor(stats: Stats, reader: Reader): number {
  if (stats.uid === reader.uid) return (stats.mode >> 6) & 7;
  if (reader.gids.has(stats.gid)) return (stats.mode >> 3) & 7;
  return stats.mode & 7;
}

export const mayRead = (stats: Stats, reader: Reader | undefined) => !reader || (bitsFor(stats, reader) & 4) !== 0;
export const mayList = (stats: Stats, reader: Reader | undefined) => !reader || (bitsFor(stats, reader) & 5) === 5;

/** statAt's results (one call at a time: the walk is synchronous). */
const statOut = new Float64Array(5);

/** The part of an lstat find's entry info shows, from the addon's statAt. */
class ChildStats implements EntryStats {
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly size: number;
  readonly mtime: Date;

  constructor(out: Float64Array) {
    this.mode = out[0]!;
    this.uid = out[1]!;
    this.gid = out[2]!;
    this.size = out[3]!;
    // Rounded, as fs's Stats makes its Dates: find's entry infos equal /files/info's.
    this.mtime = new Date(Math.round(out[4]!));
  }

  private is(type: number): boolean {
    return (this.mode & constants.S_IFMT) === type;
  }

  isFile(): boolean {
    return this.is(constants.S_IFREG);
  }

  isDirectory(): boolean {
    return this.is(constants.S_IFDIR);
  }

  isSymbolicLink(): boolean {
    return this.is(constants.S_IFLNK);
  }

  isCharacterDevice(): boolean {
    return this.is(constants.S_IFCHR);
  }

  isBlockDevice(): boolean {
    return this.is(constants.S_IFBLK);
  }

  isFIFO(): boolean {
    return this.is(constants.S_IFIFO);
  }

  isSocket(): boolean {
    return this.is(constants.S_IFSOCK);
  }
}

/** An open directory of the walk: its descriptor, its path (for answers), and how to name its children. */
export class OpenDir {
  /** Batches in flight on the thread pool that open children through `fd` (file-batches.ts). */
  private holds = 0;
  private closeWhenFree = false;

  private constructor(
    readonly fd: number,
    readonly path: string,
    private readonly searchCalls: SearchCalls | undefined,
  ) {}

  /** Opens the search root: every ancestor must be searchable by the reader, the root itself listable. `searchCalls`: the addon's, when it loaded. */
  static openRoot(path: string, reader: Reader | undefined, searchCalls: SearchCalls | undefined): OpenDir {
    checkAncestors(path, reader);
    let fd: number;
    try {
      fd = openSync(path, OPEN_DIR);
    } catch (error) {
      throw errnoToHttpError(error, path);
    }
    const dir = new OpenDir(fd, path, searchCalls);
    if (!mayList(fstatSync(fd), reader)) {
      dir.close();
      throw new HttpError(403, `${path}: permission denied (the user cannot list it)`);
    }
    return dir;
  }

  /** An ancestor of the search root, to read its ignore files; no permission check on listing (reading a named file needs only search permission). */
  static openAncestor(path: string): OpenDir | undefined {
    try {
      return new OpenDir(openSync(path, OPEN_DIR), path, undefined);
    } catch {
      return undefined;
    }
  }

  private childPath(name: Name): string | Buffer {
    const prefix = HAS_PROC_FD ? `/proc/self/fd/${this.fd}/` : `${this.path === '/' ? '' : this.path}/`;
    return typeof name === 'string' ? prefix + name : Buffer.concat([Buffer.from(prefix), name]);
  }

  /**
   * The next part of the directory's entries (`fromStart`: its first), and
   * whether more follow; undefined when it vanished meanwhile. With the addon
   * a directory whose names fit `maxBytes` (list-dir.c) comes whole, in
   * byte order of the names so answers are stable; a larger one comes in
   * chunks in the file system's order, so a walk holds a bounded part of any
   * directory. Without the addon every directory comes whole and sorted.
   */
  listChunk(fromStart: boolean, maxBytes: number): ListedChunk | undefined {
    if (this.searchCalls) {
      const listed = this.searchCalls.listDir(this.fd, fromStart, maxBytes);
      if (typeof listed === 'number') return undefined;
      const more = listed.length > 0 && (typeof listed === 'string' ? listed.endsWith('/') : listed[listed.length - 1] === 0x2f);
      if (typeof listed !== 'string') return { entries: parseListingBytes(listed, more), more, bytes: listed.length, ignoreFilesMaybe: true };
      // Most listings hold none of .git, .gitignore, .ignore: found without reading them entry by entry.
      return { entries: { [Symbol.iterator]: () => parseListing(listed, more) }, more, bytes: listed.length, ignoreFilesMaybe: listed.includes('.git') || listed.includes('.ignore') };
    }
    if (!fromStart) return { entries: [], more: false, bytes: 0, ignoreFilesMaybe: false };
    const path = HAS_PROC_FD ? `/proc/self/fd/${this.fd}` : this.path;
    try {
      // Names as strings (a Buffer per name cost a quarter of a search in garbage collection); a
      // directory with a name that is not UTF-8 (it decodes with U+FFFD) is read again as bytes.
      const list = readdirSync(path, { withFileTypes: true });
      if (!list.some((entry) => entry.name.includes('\uFFFD'))) {
        return { entries: sortByNameBytes(list.map((entry) => ({ name: entry.name, raw: undefined, isDir: entry.isDirectory(), isFile: entry.isFile() }))), more: false, bytes: 0, ignoreFilesMaybe: true };
      }
      const bytes = readdirSync(path, { withFileTypes: true, encoding: 'buffer' });
      return { entries: sortByNameBytes(bytes.map((entry) => byteEntry(entry.name, entry.isDirectory(), entry.isFile()))), more: false, bytes: 0, ignoreFilesMaybe: true };
    } catch {
      return undefined;
    }
  }

  /** A child directory the reader may list, or undefined (a symlink now, gone, or not theirs to read). */
  openChild(name: Name, reader: Reader | undefined): OpenDir | undefined {
    const path = this.path === '/' ? `/${String(name)}` : `${this.path}/${String(name)}`;
    if (this.searchCalls) {
      const fd = this.searchCalls.openDirAt(this.fd, name, packed(reader));
      return fd < 0 ? undefined : new OpenDir(fd, path, this.searchCalls);
    }
    let fd: number;
    try {
      fd = openSync(this.childPath(name), OPEN_DIR);
    } catch {
      return undefined;
    }
    const child = new OpenDir(fd, path, undefined);
    try {
      if (mayList(fstatSync(fd), reader)) return child;
    } catch {
      // fall through: closed below
    }
    child.close();
    return undefined;
  }

  /** A regular child file the reader may read, opened, with its size; undefined otherwise. The caller closes the fd. */
  openFile(name: Name, reader: Reader | undefined): { fd: number; size: number } | undefined {
    let fd: number;
    try {
      fd = openSync(this.childPath(name), OPEN_FILE);
    } catch {
      return undefined;
    }
    try {
      const stats = fstatSync(fd);
      if (stats.isFile() && mayRead(stats, reader)) return { fd, size: stats.size };
    } catch {
      // fall through
    }
    closeSync(fd);
    return undefined;
  }

  /**
   * A regular child file the reader may read, opened, and its first bytes read
   * into `buffer` (none when it is empty or over `maxBytes` > 0); undefined
   * otherwise. One crossing into the addon for most files. The caller closes `fd` unless it is -1.
   */
  startFile(name: Name, reader: Reader | undefined, buffer: Buffer, maxBytes: number): StartedFile | undefined {
    if (this.searchCalls) {
      if (this.searchCalls.openFileAt(this.fd, name, packed(reader), buffer, maxBytes, started) < 0) return undefined;
      return { size: started[0]!, fd: started[1]!, length: started[2]! };
    }
    const file = this.openFile(name, reader);
    if (!file) return undefined;
    try {
      const length = file.size === 0 || (maxBytes > 0 && file.size > maxBytes) ? 0 : readSync(file.fd, buffer, 0, Math.min(buffer.length, file.size), 0);
      if (length < file.size) return { ...file, length };
      closeSync(file.fd);
      return { ...file, fd: -1, length };
    } catch {
      closeSync(file.fd);
      return undefined;
    }
  }

  /** A small child file's bytes (an ignore file), when it is regular, readable by the reader and at most `limit` bytes. */
  readSmallFile(name: Name, reader: Reader | undefined, limit: number): Buffer | undefined {
    const file = this.openFile(name, reader);
    if (!file) return undefined;
    try {
      if (file.size > limit) return undefined;
      const bytes = Buffer.allocUnsafe(file.size);
      const length = readSync(file.fd, bytes, 0, file.size, 0);
      return bytes.subarray(0, length);
    } catch {
      return undefined;
    } finally {
      closeSync(file.fd);
    }
  }

  /** lstat of a child (find's entry infos): not followed. */
  statChild(name: Name): EntryStats | undefined {
    if (this.searchCalls) return this.searchCalls.statAt(this.fd, name, statOut) === 0 ? new ChildStats(statOut) : undefined;
    try {
      return lstatSync(this.childPath(name));
    } catch {
      return undefined;
    }
  }

  /** Keeps the descriptor open past close() until release(): a batch on the thread pool still opens children through it. */
  hold(): void {
    this.holds++;
  }

  release(): void {
    if (--this.holds === 0 && this.closeWhenFree) closeSync(this.fd);
  }

  close(): void {
    if (this.holds > 0) this.closeWhenFree = true;
    else closeSync(this.fd);
  }
}

/** Opens the search root when it is a regular file (a search of one file); undefined when it is a directory. */
export function openRootFile(path: string, reader: Reader | undefined): { fd: number; size: number } | undefined {
  let stats: Stats;
  try {
    stats = lstatSync(path);
  } catch (error) {
    throw errnoToHttpError(error, path);
  }
  if (stats.isDirectory()) return undefined;
  if (!stats.isFile()) throw badRequest(`${path}: is not a regular file or directory${stats.isSymbolicLink() ? ' (a symlink; search its target)' : ''}`);
  checkAncestors(path, reader);
  let fd: number;
  try {
    fd = openSync(path, OPEN_FILE);
  } catch (error) {
    throw errnoToHttpError(error, path);
  }
  const opened = fstatSync(fd);
  if (!opened.isFile() || !mayRead(opened, reader)) {
    closeSync(fd);
    throw new HttpError(403, `${path}: permission denied (the user cannot read it)`);
  }
  return { fd, size: opened.size };
}

/** The reader must be able to reach the path: execute permission on every directory above it. */
function checkAncestors(path: string, reader: Reader | undefined): void {
  if (!reader) return;
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    let stats: Stats;
    try {
      stats = statSync(dir);
    } catch (error) {
      throw errnoToHttpError(error, dir);
    }
    if ((bitsFor(stats, reader) & 1) === 0) throw new HttpError(403, `${dir}: permission denied (the user cannot enter it)`);
    if (dir === '/') return;
  }
}
