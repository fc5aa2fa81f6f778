import {
  chmodSync,
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
  symlinkSync,
  utimesSync,
  writeSync,
} from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname, join, normalize, sep } from 'node:path';
import { badRequest } from '../errors.js';
import type { Owner } from './paths.js';
import type { TarHeader } from './tar/format.js';
import type { TarVisitor } from './tar/read.js';
import { DiskRoom } from './archive-disk-room.js';
import { checkEntryName, depth, describeFlag, entryError, HeldNames, refusal } from './archive-names.js';

/** Up to this size a file's data is gathered and written in one go, synchronously; larger ones are written as they come. */
const SMALL_FILE_BYTES = 256 * 1024;
/** A large file is written in pieces this size, in the thread pool, behind the parsing. */
const PIECE_BYTES = 1024 * 1024;
/** Directories known to exist, so that most entries skip the mkdir of their parent: at most this many, then forgotten. */
const KNOWN_DIRS = 256;

export interface WriterOptions {
  /** Who what the archive makes belongs to (chowned as made); undefined: whoever envd runs as. */
  owner?: Owner;
  /** Keep setuid and setgid bits: only where root extracts for root. */
  keepSetId: boolean;
}

/**
 * Writes each entry of an archive under `root`, a fresh directory that only
 * this extraction writes (extractArchive keeps others out), as readTar hands
 * it over. Refuses (400, naming the entry) absolute names, `..` out of the
 * tree, writing beneath a symlink the archive made, hard links to anything
 * but a regular file extracted before, device nodes and fifos; 413 when a
 * file would leave the disk with less than its reserve (a gzip bomb stops at
 * its first big header), or the names held pass MAX_HELD_NAME_BYTES.
 *
 * No symlink exists in the tree while entries are written: symlinks are
 * data, made verbatim (absolute targets included) by `finish` once every
 * other entry is in, so no entry can be written through one, whatever chain
 * of links the archive builds; and every check is made on names before
 * anything is created. Directories are made 0700 and get their modes and
 * mtimes last (`settleDirectories`, deepest first): a 0555 directory still
 * takes its contents, and writing them does not change its mtime after.
 *
 * Why synchronous file calls for small files: an archive is mostly small
 * files, and an open, write, futimes and close in the thread pool cost ten
 * times what they do inline. At most one input chunk's worth of files is
 * written per turn of the event loop; large files are written asynchronously.
 */
export class EntryWriter implements TarVisitor {
  files = 0;
  bytes = 0;
  /** Directory entries (relative names), their modes and mtimes to apply last. */
  readonly directories = new Map<string, { mode: number; mtime: number }>();
  /** Symlink entries (relative names) to make last, their targets verbatim. */
  private readonly symlinks = new Map<string, { target: string; mtime: number }>();
  private readonly held = new HeldNames();
  /** Relative names of directories that exist (a bounded cache: forgetting one costs a mkdir). */
  private knownDirs = new Set<string>();
  /** Where a file's data is gathered; a large file's fills one while the other is written. */
  private gathered: Buffer = Buffer.allocUnsafe(PIECE_BYTES);
  private spare?: Buffer;
  /** The write of a large file's previous piece, from `spare`: awaited before the next starts (in order, one at a time). */
  private writing?: Promise<void>;
  private file?: OpenFile;
  private readonly room: DiskRoom;
  private readonly owner: Owner | undefined;
  private readonly modeMask: number;

  constructor(
    private readonly root: string,
    options: WriterOptions,
  ) {
    this.owner = options.owner;
    this.modeMask = options.keepSetId ? 0o7777 : 0o1777;
    this.room = new DiskRoom(root);
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

  /**
   * Makes the symlinks, once every other entry is in: a later entry of the
   * same name that is not a directory gives way (the later entry wins, as
   * with GNU tar). Their parents are directories the archive made, never a
   * symlink (`start` refused that), so none is made through another.
   */
  finish(): void {
    for (const [name, { target, mtime }] of this.symlinks) {
      this.named(name, () => {
        const path = join(this.root, name);
        try {
          symlinkSync(target, path);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
          removeEarlier(path, name);
          symlinkSync(target, path);
        }
        lutimesSync(path, mtime, mtime);
        if (this.owner) lchownSync(path, this.owner.uid, this.owner.gid);
      });
    }
    this.symlinks.clear();
  }

  /**
   * Each directory entry's mode and mtime, deepest first (a parent that
   * refuses writes, or entry, is set after its children), under `base`:
   * the extraction's root, or where a plain user's merge moved it.
   */
  settleDirectories(base = this.root): void {
    const deepestFirst = [...this.directories].sort(([a], [b]) => depth(b) - depth(a));
    for (const [name, { mode, mtime }] of deepestFirst) {
      const path = join(base, name);
      chmodSync(path, mode & this.modeMask);
      utimesSync(path, mtime, mtime);
    }
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
    const refuse = refusal(name);
    const relativeName = checkEntryName(header, refuse);
    if (relativeName === undefined) return;
    const target = join(this.root, relativeName);
    const mode = header.mode & this.modeMask;
    // Checked before anything is made: no parent may be a symlink the archive made.
    this.makeParent(dirname(relativeName), refuse);
    switch (header.type) {
      case 'directory':
        // A later directory replaces an earlier symlink of its name, which was never made.
        this.symlinks.delete(relativeName);
        try {
          mkdirSync(target, { mode: 0o700 });
          if (this.owner) lchownSync(target, this.owner.uid, this.owner.gid);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || !lstatSync(target).isDirectory()) throw error;
        }
        this.remember(relativeName);
        if (!this.directories.has(relativeName)) this.held.hold(relativeName, '');
        this.directories.set(relativeName, { mode, mtime: header.mtime });
        return;
      case 'file':
        this.symlinks.delete(relativeName);
        this.room.ensure(header.size, name);
        this.file = { header, target, mode, filled: 0 };
        // Owner and times once written (finish); a large file is opened now, to be written as it comes.
        if (header.size > SMALL_FILE_BYTES) return this.openLarge(this.file);
        return;
      case 'symlink': {
        if (lstatSync(target, { throwIfNoEntry: false })?.isDirectory()) throw refuse('a symlink where the archive made a directory');
        const earlier = this.symlinks.get(relativeName);
        if (!earlier) this.held.hold(relativeName, header.linkname);
        else this.held.replace(earlier.target, header.linkname);
        this.symlinks.set(relativeName, { target: header.linkname, mtime: header.mtime });
        return;
      }
      case 'link': {
        const to = normalize(header.linkname).replace(/\/+$/, '');
        const notAFile = () => refuse(`a hard link to ${JSON.stringify(header.linkname)}, which is not a file extracted before it`);
        if (to.startsWith('/') || to === '..' || to.startsWith(`..${sep}`) || this.symlinks.has(to)) throw notAFile();
        // The tree holds only what this archive wrote, and no symlink: what is there is a file it extracted.
        if (!lstatSync(join(this.root, to), { throwIfNoEntry: false })?.isFile()) throw notAFile();
        this.symlinks.delete(relativeName);
        linkSync(join(this.root, to), target);
        this.files++;
        return; // the file it links to has its owner already
      }
      default:
        throw refuse(`a ${describeFlag(header.flag)} (only files, directories, symlinks and hard links are extracted)`);
    }
  }

  /**
   * The directories above an entry (relative `dir`), made as needed, 0755
   * and the owner's; refused when one of them is a symlink the archive made.
   */
  private makeParent(dir: string, refuse: (why: string) => Error): void {
    if (dir === '.' || this.knownDirs.has(dir)) return;
    if (this.symlinks.size > 0) {
      for (let at = dir; at !== '.'; at = dirname(at)) if (this.symlinks.has(at)) throw refuse('a directory on its path is a symlink');
    }
    this.makeDirectory(dir);
  }

  private makeDirectory(dir: string): void {
    const path = join(this.root, dir);
    try {
      mkdirSync(path, { mode: 0o755 });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' && dirname(dir) !== '.') {
        this.makeDirectory(dirname(dir));
        return this.makeDirectory(dir);
      }
      if (code !== 'EEXIST' || !lstatSync(path).isDirectory()) throw error;
      return this.remember(dir);
    }
    if (this.owner) lchownSync(path, this.owner.uid, this.owner.gid);
    this.remember(dir);
  }

  private remember(dir: string): void {
    if (this.knownDirs.size >= KNOWN_DIRS) this.knownDirs = new Set();
    this.knownDirs.add(dir);
  }


  /** Never through an existing name ('wx' does not follow a symlink): a later entry of the same name replaces the earlier. */
  private async openLarge(file: OpenFile): Promise<void> {
    file.handle = await open(file.target, 'wx', file.mode).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
      removeEarlier(file.target, file.header.name);
      return open(file.target, 'wx', file.mode);
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
    const { header, target, mode } = file;
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

}

/** The file entry being written: gathered whole (small, `whole` when one piece holds it) or written as it comes (`handle`). */
interface OpenFile {
  header: TarHeader;
  target: string;
  /** Its mode, setuid and setgid dropped unless kept. */
  mode: number;
  filled: number;
  whole?: Buffer;
  handle?: FileHandle;
}


/**
 * An earlier entry of the same name, removed so that the later one wins (as
 * with GNU tar); an earlier directory is not: a file in its place would
 * drop what the archive put in it.
 */
function removeEarlier(target: string, name: string): void {
  if (lstatSync(target, { throwIfNoEntry: false })?.isDirectory()) {
    throw badRequest(`archive entry ${JSON.stringify(name)}: a file where the archive made a directory; nothing was written`);
  }
  rmSync(target, { force: true });
}


