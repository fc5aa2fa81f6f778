import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readlinkSync, readSync, type Stats } from 'node:fs';
import { open } from 'node:fs/promises';
import { DOWNLOAD_CHUNK_BYTES } from '../chunk-size.js';
import type { Owner } from '../paths.js';
import { openDirectory } from '../user-path.js';
import type { FileChecksums } from './checksums.js';
import { BLOCK, encodeHeader, padding } from './format.js';

/**
 * Output goes out in pieces of this size: the memory one request holds (a
 * stalled client pins one piece: DOWNLOAD_CHUNK_BYTES says why that size), and
 * the most done in one turn of the event loop.
 */
export const CHUNK_BYTES = DOWNLOAD_CHUNK_BYTES;
/** The largest piece: a chunk of a large file with its padding. */
export const PIECE_BYTES = CHUNK_BYTES + BLOCK;
/** Files up to this size are read straight into the piece being filled; larger ones are read in pieces of their own. */
const SMALL_FILE_BYTES = 256 * 1024;
/**
 * The smallest piece size a caller may ask for: a small file with its
 * headers (a long name's extra blocks included) and padding must fit one piece.
 */
export const MIN_CHUNK_BYTES = SMALL_FILE_BYTES + 32 * BLOCK;

/** Where pieces are made: `size` (at most PIECE_BYTES) bytes of any content. */
export type Allocate = (size: number) => Buffer;
const allocateFresh: Allocate = (size) => Buffer.allocUnsafe(size);
/** How an entry is opened: never through a symlink, never waiting (a FIFO swapped in opens at once, and fstat refuses it). */
const OPEN_ENTRY = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const OPEN_DIR = OPEN_ENTRY | constants.O_DIRECTORY;

/** A name inside the directory open as `fd` (user-path.ts's magic-link spelling: nothing before it is looked up again). */
const at = (fd: number, name: string) => `/proc/self/fd/${fd}/${name}`;

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
 * left out instead of waited on.
 *
 * Why synchronous calls: a source tree is mostly small files in the page
 * cache, where an open, read and close take microseconds but three trips
 * through the thread pool take ten times that. None of them can wait for
 * another process: O_NONBLOCK opens return at once for a FIFO, a socket is
 * ENXIO, and a plain user cannot make device nodes (a device the tree had
 * from the start is left out by its lstat, never opened). Each piece (at most
 * 1 MiB of data, or 2,048 headers) is filled in one go, then the event loop
 * turns while the client takes it; large files are read asynchronously.
 */
export async function* tarPieces(root: string, allocate: Allocate = allocateFresh, owner?: Owner, chunkBytes = CHUNK_BYTES, checksums?: FileChecksums): AsyncGenerator<Buffer> {
  if (chunkBytes < MIN_CHUNK_BYTES || chunkBytes > CHUNK_BYTES) throw new RangeError(`chunkBytes: ${chunkBytes} is outside ${MIN_CHUNK_BYTES}..${CHUNK_BYTES}`);
  const piece = new PieceBuilder(allocate, chunkBytes);
  const { dir } = await openDirectory(root, { owner });
  let fd: number;
  try {
    // A directory's open cannot wait; a FileHandle here could be closed by the GC under the walk.
    // Reopened through its own fd (the magic link is followed, on purpose: it is this directory).
    fd = openSync(dir.self, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NONBLOCK);
  } finally {
    await dir.close();
  }
  try {
    yield* addDirectory(piece, fd, '', allocate, checksums);
    if (checksums) {
      // The last files' digests, then the tree's own directory ("./", as `tar -C dir -c .` writes it first):
      // a pax header must be followed by an entry (Python's tarfile refuses the archive otherwise).
      yield* piece.add(checksums.manifest(true)!, 0);
      yield* piece.add(header('.', fstatSync(fd), 'directory', 0), 0);
    }
  } finally {
    closeSync(fd);
  }
  yield* piece.add(Buffer.alloc(2 * BLOCK), 0);
  yield* piece.flush();
}

/** The entries of the directory open as `fd`, in name order, each directory's entries after its own header. */
async function* addDirectory(piece: PieceBuilder, fd: number, relative: string, allocate: Allocate, checksums: FileChecksums | undefined): AsyncGenerator<Buffer> {
  const names = readdirSync(`/proc/self/fd/${fd}`).sort();
  for (const name of names) {
    const path = relative === '' ? name : `${relative}/${name}`;
    const info = ifThere(() => lstatSync(at(fd, name)));
    if (!info) continue; // gone meanwhile
    if (info.isDirectory()) {
      const inner = ifThere(() => openSync(at(fd, name), OPEN_DIR));
      if (inner === undefined) continue; // gone, or swapped for something else
      try {
        yield* piece.add(header(path, fstatSync(inner), 'directory', 0), 0);
        yield* addDirectory(piece, inner, path, allocate, checksums);
      } finally {
        closeSync(inner);
      }
    } else if (info.isSymbolicLink()) {
      const target = ifThere(() => readlinkSync(at(fd, name)));
      if (target !== undefined) yield* piece.add(header(path, info, 'symlink', 0, target), 0);
    } else if (info.isFile()) {
      yield* addFile(piece, path, fd, name, allocate, checksums);
      const manifest = checksums?.manifest();
      if (manifest) yield* piece.add(manifest, 0);
    }
  }
}

function header(name: string, info: Stats, type: 'file' | 'directory' | 'symlink', size: number, linkname = ''): Buffer {
  return encodeHeader({ name, type, mode: info.mode, uid: info.uid, gid: info.gid, size, mtime: info.mtimeMs / 1000, linkname });
}

/** One regular file's header and data; its data's sha256 goes to `checksums` (none for a file that vanished or changed kind). */
async function* addFile(piece: PieceBuilder, relative: string, dirFd: number, name: string, allocate: Allocate, checksums: FileChecksums | undefined): AsyncGenerator<Buffer> {
  const fd = ifThere(() => openSync(at(dirFd, name), OPEN_ENTRY));
  if (fd === undefined) return;
  let info: Stats;
  try {
    info = fstatSync(fd);
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  // Swapped for something else since it was listed (a FIFO, a directory): left out like one listed as such.
  if (!info.isFile()) return void closeSync(fd);
  const size = info.size;
  if (size <= SMALL_FILE_BYTES) {
    try {
      yield* piece.add(header(relative, info, 'file', size), size + padding(size));
      const data = piece.readFrom(fd, size);
      checksums?.update(data);
      checksums?.endFile();
    } finally {
      closeSync(fd);
    }
    return;
  }
  // Large files are read through the thread pool, from the descriptor that was checked.
  const handle = await open(`/proc/self/fd/${fd}`, 'r').finally(() => closeSync(fd));
  try {
    yield* piece.add(header(relative, info, 'file', size), 0);
    yield* piece.flush();
    for (let sent = 0; sent < size; ) {
      const want = Math.min(piece.chunkBytes, size - sent);
      const out = allocate(want + (sent + want === size ? padding(size) : 0));
      let got = 0;
      while (got < want) {
        const { bytesRead } = await handle.read(out, got, want - got, sent + got);
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
    await handle.close();
  }
}

/** What `open` gives, or undefined for an entry that vanished or changed kind since it was listed. */
function ifThere<T>(open: () => T): T | undefined {
  try {
    return open();
  } catch (error) {
    // ELOOP/ENOTDIR: an O_NOFOLLOW open met a symlink swapped in for what was listed; ENXIO: a socket.
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR' || code === 'ENXIO') return undefined;
    throw error;
  }
}
/** Fills output pieces of up to `chunkBytes`, handing each out when the next entry would not fit. */
class PieceBuilder {
  private buffer: Buffer | undefined;
  private used = 0;

  constructor(
    private readonly allocate: Allocate,
    readonly chunkBytes: number,
  ) {}

  /** Appends a header, with room for `dataBytes` after it (filled by readFrom); yields the full piece first if needed. */
  *add(bytes: Buffer, dataBytes: number): Generator<Buffer> {
    if (this.used > 0 && this.used + bytes.length + dataBytes > this.chunkBytes) yield* this.flush();
    // Taken only now, not at the flush: a recycled buffer is likelier to be free the later it is asked for.
    this.buffer ??= this.allocate(this.chunkBytes + BLOCK);
    bytes.copy(this.buffer, this.used);
    this.used += bytes.length;
  }

  /** A small file's first `size` bytes, zeros for what is missing, and the padding to a block; returns the data's bytes (a view). */
  readFrom(fd: number, size: number): Buffer {
    const buffer = this.buffer!;
    let got = 0;
    while (got < size) {
      const n = readSync(fd, buffer, this.used + got, size - got, got);
      if (n === 0) break;
      got += n;
    }
    const end = this.used + size + padding(size);
    buffer.fill(0, this.used + got, end);
    const data = buffer.subarray(this.used, this.used + size);
    this.used = end;
    return data;
  }

  *flush(): Generator<Buffer> {
    if (this.used === 0 || !this.buffer) return;
    const out = this.buffer.subarray(0, this.used);
    this.buffer = undefined;
    this.used = 0;
    yield out;
  }
}
