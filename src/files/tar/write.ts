import { close as closeCallback, constants, fstat as fstatCallback, open as openCallback, read as readCallback, type Dirent, type Stats } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { promisify } from 'node:util';
import { DOWNLOAD_CHUNK_BYTES } from '../chunk-size.js';
import type { Owner } from '../paths.js';
import { openDirectory, openSubdirectory, UserDir } from '../user-path.js';
import type { FileChecksums } from './checksums.js';
import { entryAt, errnoError, fileBatches, type FileStats } from './file-batch.js';
import { BLOCK, encodeHeader, padding } from './format.js';

/**
 * Output goes out in pieces of this size: the memory one request holds (a
 * stalled client pins one piece: DOWNLOAD_CHUNK_BYTES says why that size), and
 * the most done in one turn of the event loop.
 */
export const CHUNK_BYTES = DOWNLOAD_CHUNK_BYTES;
/** The largest piece: a chunk of a large file with its padding. */
export const PIECE_BYTES = CHUNK_BYTES + BLOCK;
/**
 * Files up to this size are read straight into the piece being filled;
 * larger ones are read in pieces of their own. Smaller pieces take smaller
 * files: a small file with its headers (a long name's extra blocks
 * included) and padding must fit one piece.
 */
const SMALL_FILE_BYTES = 256 * 1024;
/** Room in a piece for a file's headers and padding beyond its data. */
const HEADER_ROOM_BYTES = 32 * BLOCK;
/** The smallest piece size a caller may ask for. */
export const MIN_CHUNK_BYTES = 64 * 1024;

/** Where pieces are made: `size` (at most PIECE_BYTES) bytes of any content. */
export type Allocate = (size: number) => Buffer;
const allocateFresh: Allocate = (size) => Buffer.allocUnsafe(size);
/** How an entry is opened: never through a symlink, never waiting (a FIFO swapped in opens at once, and fstat refuses it). */
const OPEN_ENTRY = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
/**
 * Entries of one directory looked at together: their opens and fstats go to
 * the thread pool at once (its four threads busy, not one trip after
 * another). Each holds a descriptor until its bytes are in the piece.
 */
const ENTRIES_AT_ONCE = 32;

const openFd = promisify(openCallback);
const fstat = promisify(fstatCallback);
/** read(2) at `position` into `buffer`: the bytes read. */
const readFd = (fd: number, buffer: Buffer, offset: number, length: number, position: number) =>
  new Promise<number>((resolve, reject) => readCallback(fd, buffer, offset, length, position, (error, bytesRead) => (error ? reject(error) : resolve(bytesRead))));
const closeFd = promisify(closeCallback);
/** Small files whose reads are handed to the pool together (file-batch.ts), once this many wait in a piece. */
const READS_AT_ONCE = 16;

/**
 * A directory tree as tar pieces: directories, regular files and symlinks
 * (not followed), depth first in name order, with modes, mtimes and owners;
 * other kinds (sockets, devices, fifos) are left out, and so is anything
 * that vanishes or changes kind while it is read. A file is sent at the size
 * it had when opened (cut or padded with zeros if it changed meanwhile): a
 * header cannot change once sent.
 *
 * The tree is a user's: every directory is opened O_NOFOLLOW and everything in
 * it is reached relative to that fd (user-path.ts), so swapping a directory
 * for a symlink steers nothing, and a file is opened O_NOFOLLOW|O_NONBLOCK and
 * checked with fstat before a byte is read, so a FIFO swapped in for it is
 * left out instead of waited on. Every call goes through the thread pool,
 * none runs on the event loop (issue 36, item 6): a file system call that
 * waits, whatever a user puts in the tree, waits in a pool thread, never in
 * envd's one thread. A directory's entries are opened and checked a few
 * dozen at once, and small files read straight into the piece being filled,
 * side by side; the piece goes out once every read into it is done.
 */
export async function* tarPieces(root: string, allocate: Allocate = allocateFresh, owner?: Owner, chunkBytes = CHUNK_BYTES, checksums?: FileChecksums): AsyncGenerator<Buffer> {
  if (chunkBytes < MIN_CHUNK_BYTES || chunkBytes > CHUNK_BYTES) throw new RangeError(`chunkBytes: ${chunkBytes} is outside ${MIN_CHUNK_BYTES}..${CHUNK_BYTES}`);
  const piece = new PieceBuilder(allocate, chunkBytes);
  const { dir } = await openDirectory(root, { owner });
  let top: UserDir | undefined;
  try {
    // Reopened for reading its entries (its own magic link, on purpose: it is this directory).
    top = new UserDir(await openFd(dir.self, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NONBLOCK), dir.path);
  } finally {
    await dir.close();
  }
  try {
    yield* addDirectory(piece, top, '', allocate, checksums);
    if (checksums) {
      // The last files' digests, then the tree's own directory ("./", as `tar -C dir -c .` writes it first):
      // a pax header must be followed by an entry (Python's tarfile refuses the archive otherwise).
      await piece.settle();
      yield* piece.add(checksums.manifest(true)!, 0);
      yield* piece.add(header('.', await top.stats(), 'directory', 0), 0);
    }
  } finally {
    await top.close();
    await piece.settle();
  }
  yield* piece.add(Buffer.alloc(2 * BLOCK), 0);
  yield* piece.flush();
}

/** An entry of a directory, looked at: what its header needs, and a file's descriptor (owned: closed once read). */
type Looked =
  | { kind: 'directory'; name: string }
  | { kind: 'symlink'; name: string; stats: Stats; target: string }
  | { kind: 'file'; name: string; stats: FileStats; fd: number };

/** The entries of the directory `dir`, in name order, each directory's entries after its own header. */
async function* addDirectory(piece: PieceBuilder, dir: UserDir, relative: string, allocate: Allocate, checksums: FileChecksums | undefined): AsyncGenerator<Buffer> {
  const entries = (await readdir(dir.self, { withFileTypes: true })).filter((e) => e.isDirectory() || e.isFile() || e.isSymbolicLink());
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (let at = 0; at < entries.length; at += ENTRIES_AT_ONCE) {
    const looked = await lookAtAll(dir, entries.slice(at, at + ENTRIES_AT_ONCE));
    let next = 0;
    try {
      for (; next < looked.length; next++) {
        const entry = looked[next];
        if (!entry) continue; // gone meanwhile, or changed kind
        const path = relative === '' ? entry.name : `${relative}/${entry.name}`;
        if (entry.kind === 'symlink') {
          yield* piece.add(header(path, entry.stats, 'symlink', 0, entry.target), 0);
        } else if (entry.kind === 'file') {
          looked[next] = undefined; // addFile owns its descriptor now
          yield* addFile(piece, path, entry.stats, entry.fd, allocate, checksums);
          if (checksums?.due()) {
            // The digests of small files still being read into the piece are needed first.
            await piece.settle();
            yield* piece.add(checksums.manifest()!, 0);
          }
        } else {
          const inner = await openSubdirectory(dir, entry.name);
          if (!inner) continue; // gone, or swapped for something else
          try {
            yield* piece.add(header(path, await inner.stats(), 'directory', 0), 0);
            yield* addDirectory(piece, inner, path, allocate, checksums);
          } finally {
            await inner.close();
          }
        }
      }
    } finally {
      // The client left mid-batch: the files looked at and not yet sent are closed.
      for (const entry of looked) if (entry?.kind === 'file') await closeFd(entry.fd).catch(() => {});
    }
  }
}

/** lookAt for each entry; the files among them opened and fstat-ed in one pool job where the addon is loaded. */
async function lookAtAll(dir: UserDir, entries: Dirent[]): Promise<(Looked | undefined)[]> {
  const batches = fileBatches();
  if (!batches) return Promise.all(entries.map((entry) => lookAt(dir, entry)));
  const files = entries.filter((entry) => entry.isFile());
  const [opened, others] = await Promise.all([batches.openEntries(dir.descriptor, files.map((entry) => entry.name)), Promise.all(entries.map((entry) => (entry.isFile() ? undefined : lookAt(dir, entry))))]);
  let failure: unknown;
  const looked = entries.map((entry, i): Looked | undefined => {
    if (!entry.isFile()) return others[i];
    const found = entryAt(opened, files.indexOf(entry), entry.name);
    if (found === 'other') return undefined;
    if (found instanceof Error) {
      if (!IGNORED_CODES.has(found.code ?? '')) failure ??= found;
      return undefined;
    }
    return { kind: 'file', name: entry.name, ...found };
  });
  if (failure) {
    for (const entry of looked) if (entry?.kind === 'file') await closeFd(entry.fd).catch(() => {});
    throw failure;
  }
  return looked;
}

/** ELOOP/ENOTDIR: an O_NOFOLLOW open met a symlink swapped in for what was listed; ENXIO: a socket; EINVAL: not a link any more. */
const IGNORED_CODES = new Set(['ENOENT', 'ELOOP', 'ENOTDIR', 'ENXIO', 'EINVAL']);

/** What an entry is now: a file opened and fstat-checked, a symlink's text, a directory; undefined when it is gone or is something else now. */
async function lookAt(dir: UserDir, entry: Dirent): Promise<Looked | undefined> {
  const { name } = entry;
  try {
    if (entry.isDirectory()) return { kind: 'directory', name };
    if (entry.isSymbolicLink()) {
      const [stats, target] = await Promise.all([lstat(dir.at(name)), readlink(dir.at(name))]);
      return stats.isSymbolicLink() ? { kind: 'symlink', name, stats, target } : undefined;
    }
    const fd = await openFd(dir.at(name), OPEN_ENTRY);
    const stats = await fstat(fd).catch(async (error: unknown) => {
      await closeFd(fd);
      throw error;
    });
    // Swapped for something else since it was listed (a FIFO, a directory): left out like one listed as such.
    if (stats.isFile()) return { kind: 'file', name, stats, fd };
    await closeFd(fd);
    return undefined;
  } catch (error) {
    if (IGNORED_CODES.has((error as NodeJS.ErrnoException).code ?? '')) return undefined;
    throw error;
  }
}

function header(name: string, info: FileStats | Stats, type: 'file' | 'directory' | 'symlink', size: number, linkname = ''): Buffer {
  return encodeHeader({ name, type, mode: info.mode, uid: info.uid, gid: info.gid, size, mtime: info.mtimeMs / 1000, linkname });
}

/** A regular file (open as `fd`, owned: closed here) as its header and data; its data's sha256 goes to `checksums`. */
async function* addFile(piece: PieceBuilder, relative: string, info: FileStats, fd: number, allocate: Allocate, checksums: FileChecksums | undefined): AsyncGenerator<Buffer> {
  const size = info.size;
  if (size <= Math.min(SMALL_FILE_BYTES, piece.chunkBytes - HEADER_ROOM_BYTES)) {
    try {
      yield* piece.add(header(relative, info, 'file', size), size + padding(size));
    } catch (error) {
      await closeFd(fd).catch(() => {});
      throw error;
    }
    piece.readFrom(fd, size, checksums?.reserve());
    return;
  }
  // Large files are read in pieces of their own.
  try {
    yield* piece.add(header(relative, info, 'file', size), 0);
    yield* piece.flush();
    for (let sent = 0; sent < size; ) {
      const want = Math.min(piece.chunkBytes, size - sent);
      const out = allocate(want + (sent + want === size ? padding(size) : 0));
      let got = 0;
      while (got < want) {
        const bytesRead = await readFd(fd, out, got, want - got, sent + got);
        if (bytesRead === 0) break; // shrank meanwhile: zeros stand in for the rest
        got += bytesRead;
      }
      out.fill(0, got);
      sent += want;
      // Hashed before it is handed out: once taken, the buffer may be recycled.
      checksums?.update(out.subarray(0, want));
      yield out;
    }
    checksums?.endFile();
  } finally {
    await closeFd(fd);
  }
}

/**
 * Fills output pieces of up to `chunkBytes`, handing each out when the next
 * entry would not fit, and only once every read into it is done.
 */
class PieceBuilder {
  private buffer: Buffer | undefined;
  private used = 0;
  /** Small files' reads into the current piece, each closing its file when done. */
  private reads: Promise<void>[] = [];
  /** Small files whose reads wait to go to the pool together (file-batch.ts). */
  private waiting: { fd: number; start: number; size: number; end: number; hashed?: (data: Buffer) => void }[] = [];

  constructor(
    private readonly allocate: Allocate,
    readonly chunkBytes: number,
  ) {}

  /** Appends a header, with room for `dataBytes` after it (filled by readFrom); yields the full piece first if needed. */
  async *add(bytes: Buffer, dataBytes: number): AsyncGenerator<Buffer> {
    if (this.used > 0 && this.used + bytes.length + dataBytes > this.chunkBytes) yield* this.flush();
    // Taken only now, not at the flush: a recycled buffer is likelier to be free the later it is asked for.
    this.buffer ??= this.allocate(this.chunkBytes + BLOCK);
    bytes.copy(this.buffer, this.used);
    this.used += bytes.length;
  }

  /**
   * A small file's first `size` bytes, zeros for what is missing, and the
   * padding to a block, read into its place in the piece in the thread pool
   * (alongside the other files of the piece); `fd` is closed once read.
   * `hashed` gets the data's bytes (the zeros standing in for a shrunk file's
   * missing ones included) once they are in place.
   */
  readFrom(fd: number, size: number, hashed?: (data: Buffer) => void): void {
    const buffer = this.buffer!;
    const start = this.used;
    const end = start + size + padding(size);
    this.used = end;
    if (fileBatches()) {
      this.waiting.push({ fd, start, size, end, hashed });
      if (this.waiting.length >= READS_AT_ONCE) this.startWaiting();
      return;
    }
    this.reads.push(
      (async () => {
        let got = 0;
        try {
          while (got < size) {
            const n = await readFd(fd, buffer, start + got, size - got, got);
            if (n === 0) break;
            got += n;
          }
        } finally {
          await closeFd(fd);
        }
        buffer.fill(0, start + got, end);
        hashed?.(buffer.subarray(start, start + size));
      })(),
    );
  }

  /** The waiting reads, as one pool job: each file read into its place, zeros for what is missing, closed. */
  private startWaiting(): void {
    const waiting = this.waiting;
    if (waiting.length === 0) return;
    this.waiting = [];
    const buffer = this.buffer!;
    const plan = new Float64Array(waiting.flatMap(({ fd, start, size, end }) => [fd, start, size, end]));
    this.reads.push(
      fileBatches()!
        .readFiles(buffer, plan)
        .then((got) => {
          waiting.forEach(({ start, size, hashed }, i) => {
            const bytesRead = got[i] ?? 0;
            if (bytesRead < 0) throw errnoError(-bytesRead, 'read', 'a file of the tree');
            hashed?.(buffer.subarray(start, start + size));
          });
        }),
    );
  }

  /** Waits for every read into the piece (their failures included, which the next flush rethrows). */
  async settle(): Promise<void> {
    this.startWaiting();
    await Promise.allSettled(this.reads);
  }

  async *flush(): AsyncGenerator<Buffer> {
    this.startWaiting();
    const reads = this.reads;
    this.reads = [];
    await Promise.all(reads);
    if (this.used === 0 || !this.buffer) return;
    const out = this.buffer.subarray(0, this.used);
    this.buffer = undefined;
    this.used = 0;
    yield out;
  }
}
