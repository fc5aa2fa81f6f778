import {
  closeSync,
  fchownSync,
  futimesSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  rmSync,
  statfsSync,
  symlinkSync,
  writeSync,
} from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname, join, normalize, resolve, sep } from 'node:path';
import { badRequest, HttpError } from '../errors.js';
import type { Owner } from './paths.js';
import type { TarHeader } from './tar/format.js';
import type { TarVisitor } from './tar/read.js';

/** Free space an archive must leave on the disk: the sandbox's own work needs some too. */
const DISK_RESERVE_BYTES = 64 * 1024 * 1024;
/** Up to this size a file's data is gathered and written in one go, synchronously; larger ones are written as they come. */
const SMALL_FILE_BYTES = 256 * 1024;
/** A large file is written in pieces this size, in the thread pool, behind the parsing. */
const PIECE_BYTES = 1024 * 1024;

/**
 * Writes each entry of an archive under `root` as readTar hands it over,
 * refusing (400, naming the entry) absolute names, `..` out of the tree,
 * symlinks whose target resolves outside it, writing through a symlink the
 * archive made, hard links to anything but a regular file extracted before,
 * and device nodes and fifos; 413 when a file would leave the disk with less
 * than its reserve (a gzip bomb stops at its first big header).
 *
 * Why synchronous file calls for small files: an archive is mostly small
 * files, and an open, write, futimes and close in the thread pool cost ten
 * times what they do inline. At most one input chunk's worth of files is
 * written per turn of the event loop; large files are written asynchronously.
 */
export class EntryWriter implements TarVisitor {
  files = 0;
  bytes = 0;
  /** Directories and their mtimes, set once everything is written (writing their entries changed them). */
  readonly dirTimes: Array<[string, number]> = [];
  private readonly knownDirs: Set<string>;
  private readonly regular = new Set<string>();
  /** Where a file's data is gathered; a large file's fills one while the other is written. */
  private gathered: Buffer = Buffer.allocUnsafe(PIECE_BYTES);
  private spare?: Buffer;
  /** The write of a large file's previous piece, from `spare`: awaited before the next starts (in order, one at a time). */
  private writing?: Promise<void>;
  private file?: OpenFile;
  /** What may still be written before the disk's free space is asked again. */
  private room = { bytes: 0, entries: 0 };

  constructor(
    private readonly root: string,
    private readonly owner: Owner | undefined,
  ) {
    this.knownDirs = new Set([root]);
  }

  // Each step is synchronous for what is most of an archive (directories, small files, links) and
  // returns a promise only for a large file's open and writes: no promise per entry to make and collect.

  entry(header: TarHeader): void | Promise<void> {
    return this.named(header.name, () => this.start(header));
  }

  data(piece: Buffer): void | Promise<void> {
    const file = this.file;
    if (!file) return; // data of an entry that keeps none (a symlink's, a skipped one's)
    if (!file.handle) {
      // A small file's data fits whole. Most often it is one piece: that view is written as it is (end
      // follows in the same turn, while the input chunk it views is still the one in hand).
      if (file.filled === 0 && piece.length === file.header.size) file.whole = piece;
      else piece.copy(this.gathered, file.filled);
      file.filled += piece.length;
      return;
    }
    return this.named(file.header.name, async () => {
      for (let at = 0; at < piece.length; ) {
        const copied = piece.copy(this.gathered, file.filled, at);
        file.filled += copied;
        at += copied;
        if (file.filled === PIECE_BYTES) await this.writeBehind(file.handle!, file);
      }
    });
  }

  end(): void | Promise<void> {
    const file = this.file;
    if (!file) return;
    this.file = undefined;
    return this.named(file.header.name, () => (file.handle ? this.finishLarge(file, file.handle) : this.finishSmall(file)));
  }

  /** Closes a file left open by a failure; the caller then removes the tree. */
  async abort(): Promise<void> {
    await this.writing?.catch(() => {});
    this.writing = undefined;
    await this.file?.handle?.close().catch(() => {});
    this.file = undefined;
  }

  private start(header: TarHeader): void | Promise<void> {
    const name = header.name;
    const refuse = (why: string) => badRequest(`archive entry ${JSON.stringify(name)}: ${why}; nothing was written`);
    if (name.includes('\0')) throw refuse('a NUL byte in its name');
    if (name.startsWith('/')) throw refuse('an absolute path');
    const relativeName = normalize(name).replace(/\/+$/, '');
    if (relativeName === '..' || relativeName.startsWith(`..${sep}`)) throw refuse('it leaves the directory (..)');
    if (relativeName === '.' || relativeName === '') return;
    const target = join(this.root, relativeName);
    const mode = header.mode & 0o7777;
    const parent = dirname(target);
    if (!this.knownDirs.has(parent)) {
      mkdirSync(parent, { recursive: true });
      if (this.escapesThroughSymlink(parent)) throw refuse('a directory on its path is a symlink');
      this.knownDirs.add(parent);
    }
    switch (header.type) {
      case 'directory':
        if (lstatSync(target, { throwIfNoEntry: false })?.isSymbolicLink()) throw refuse('a directory where the archive made a symlink');
        mkdirSync(target, { recursive: true, mode });
        this.knownDirs.add(target);
        this.dirTimes.push([target, header.mtime]);
        break;
      case 'file':
        this.ensureRoom(header.size, name);
        this.file = { header, target, filled: 0 };
        this.regular.add(relativeName);
        // Owner and times once written (finish); a large file is opened now, to be written as it comes.
        if (header.size > SMALL_FILE_BYTES) return this.openLarge(this.file, mode);
        return;
      case 'symlink': {
        const linkname = header.linkname;
        if (linkname.startsWith('/')) throw refuse(`a symlink to an absolute path (${linkname})`);
        if (!inside(this.root, resolve(dirname(target), linkname))) throw refuse(`a symlink out of the directory (${linkname})`);
        symlinkSync(linkname, target);
        lutimesSync(target, header.mtime, header.mtime);
        break;
      }
      case 'link': {
        const to = normalize(header.linkname).replace(/\/+$/, '');
        if (!this.regular.has(to)) throw refuse(`a hard link to ${JSON.stringify(header.linkname)}, which is not a file extracted before it`);
        linkSync(join(this.root, to), target);
        this.files++;
        return; // the file it links to has its owner already
      }
      default:
        throw refuse(`a ${describeFlag(header.flag)} (only files, directories, symlinks and hard links are extracted)`);
    }
    if (this.owner) lchownSync(target, this.owner.uid, this.owner.gid);
  }

  /** Never through an existing name ('wx' does not follow a symlink): a later entry of the same name replaces the earlier. */
  private async openLarge(file: OpenFile, mode: number): Promise<void> {
    file.handle = await open(file.target, 'wx', mode).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
      removeEarlier(file.target, file.header.name);
      return open(file.target, 'wx', mode);
    });
  }

  private async finishLarge(file: OpenFile, handle: FileHandle): Promise<void> {
    try {
      await this.writeBehind(handle, file);
      await this.writing;
      this.writing = undefined;
      await handle.utimes(file.header.mtime, file.header.mtime);
      if (this.owner) await handle.chown(this.owner.uid, this.owner.gid);
    } finally {
      await handle.close();
    }
    this.files++;
    this.bytes += file.header.size;
  }

  private finishSmall(file: OpenFile): void {
    const { header, target } = file;
    const mode = header.mode & 0o7777;
    let fd: number;
    try {
      fd = openSync(target, 'wx', mode);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      removeEarlier(target, header.name);
      fd = openSync(target, 'wx', mode);
    }
    try {
      const data = file.whole ?? this.gathered;
      for (let written = 0; written < file.filled; ) written += writeSync(fd, data, written, file.filled - written);
      futimesSync(fd, header.mtime, header.mtime);
      if (this.owner) fchownSync(fd, this.owner.uid, this.owner.gid);
    } finally {
      closeSync(fd);
    }
    this.files++;
    this.bytes += header.size;
  }

  /**
   * Starts writing what a large file gathered and gathers on into the other
   * buffer meanwhile: the thread pool writes while the main thread parses
   * and hashes the next piece. Writes stay in order, one at a time.
   */
  private async writeBehind(handle: FileHandle, file: { filled: number }): Promise<void> {
    await this.writing;
    const data = this.gathered;
    const length = file.filled;
    this.gathered = this.spare ?? Buffer.allocUnsafe(PIECE_BYTES);
    this.spare = data;
    file.filled = 0;
    this.writing = (async () => {
      for (let written = 0; written < length; ) written += (await handle.write(data, written, length - written)).bytesWritten;
    })();
    // Its failure is the next await's (the next piece, the file's end, or abort), not an unhandled rejection.
    this.writing.catch(() => {});
  }

  /** Runs one step of an entry, with a file system's refusal turned into the client's error naming the entry. */
  private named(name: string, step: () => void | Promise<void>): void | Promise<void> {
    try {
      return step()?.catch((error: unknown) => {
        throw entryError(name, error);
      });
    } catch (error) {
      throw entryError(name, error);
    }
  }

  /** Whether a directory an entry goes into is reached through a symlink the archive made (a later entry writing through it). */
  private escapesThroughSymlink(dir: string): boolean {
    for (let at = dir; inside(this.root, at) && at !== this.root; at = dirname(at)) {
      if (lstatSync(at).isSymbolicLink()) return true;
    }
    return false;
  }

  /**
   * 413 when writing `bytes` more would leave the disk with less than its
   * reserve. The disk is asked again after 16 MiB or 1,000 entries, not for
   * every small file: others write meanwhile, and the 64 MiB reserve absorbs that.
   */
  private ensureRoom(bytes: number, name: string): void {
    if (bytes <= this.room.bytes && this.room.entries > 0) {
      this.room.bytes -= bytes;
      this.room.entries--;
      return;
    }
    const disk = statfsSync(this.root);
    const free = disk.bavail * disk.bsize;
    if (bytes > free - DISK_RESERVE_BYTES) {
      throw new HttpError(413, `archive entry ${JSON.stringify(name)}: ${bytes} bytes would leave less than ${DISK_RESERVE_BYTES} bytes free on the disk (${free} free); nothing was written`);
    }
    this.room = { bytes: Math.min(free - DISK_RESERVE_BYTES, RECHECK_BYTES) - bytes, entries: RECHECK_ENTRIES };
  }
}

/** The file entry being written: gathered whole (small, `whole` when one piece holds it) or written as it comes (`handle`). */
interface OpenFile {
  header: TarHeader;
  target: string;
  filled: number;
  whole?: Buffer;
  handle?: FileHandle;
}

const RECHECK_BYTES = 16 * 1024 * 1024;
const RECHECK_ENTRIES = 1_000;

/**
 * An earlier entry of the same name, removed so that the later one wins (as
 * with GNU tar); an earlier directory is not: a file in its place would drop
 * what the archive put in it.
 */
function removeEarlier(target: string, name: string): void {
  if (lstatSync(target, { throwIfNoEntry: false })?.isDirectory()) {
    throw badRequest(`archive entry ${JSON.stringify(name)}: a file where the archive made a directory; nothing was written`);
  }
  rmSync(target, { force: true });
}

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(`${root}${sep}`);
}

const FLAGS: Record<string, string> = { '3': 'character device', '4': 'block device', '6': 'fifo' };

function describeFlag(flag: string): string {
  return FLAGS[flag] ?? `entry of type ${JSON.stringify(flag)}`;
}

/**
 * What writing an entry ran into, as the client's error: the disk full is a
 * 507; any other refusal of the file system (a name too long, a file where
 * the archive wants a directory, a loop) is the archive's, a 400 naming the entry.
 */
function entryError(name: string, error: unknown): unknown {
  if (error instanceof HttpError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new HttpError(507, `archive entry ${JSON.stringify(name)}: the disk is full (${code}); nothing was written`);
  if (code !== undefined && /^E[A-Z]+$/.test(code)) return badRequest(`archive entry ${JSON.stringify(name)}: cannot be written (${code}); nothing was written`);
  return error;
}
