import { closeSync, lstatSync, openSync, readdirSync, readlinkSync, readSync, type Stats } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { BLOCK, encodeHeader, padding } from './format.js';

/** Output goes out in pieces of this size: the memory one request holds, and the most done in one turn of the event loop. */
export const CHUNK_BYTES = 1024 * 1024;
/** The largest piece: a chunk of a large file with its padding. */
export const PIECE_BYTES = CHUNK_BYTES + BLOCK;

/** Where pieces are made: `size` (at most PIECE_BYTES) bytes of any content. */
export type Allocate = (size: number) => Buffer;
const allocateFresh: Allocate = (size) => Buffer.allocUnsafe(size);
/** Files up to this size are read straight into the piece being filled; larger ones are read in pieces of their own. */
const SMALL_FILE_BYTES = 256 * 1024;

/**
 * A directory tree as tar pieces: directories, regular files and symlinks
 * (not followed), depth first in name order, with modes, mtimes and owners;
 * other kinds (sockets, devices, fifos) are left out, and so is anything
 * that vanishes while it is read. A file is sent at the size it had when
 * listed (cut or padded with zeros if it changed meanwhile): a header cannot
 * change once sent.
 *
 * Why synchronous reads: a source tree is mostly small files in the page
 * cache, where an open, read and close take microseconds but three trips
 * through the thread pool take ten times that. Each piece (at most 1 MiB of
 * data, or 2,048 headers) is filled in one go, then the event loop turns
 * while the client takes it; large files are read asynchronously.
 */
export async function* tarPieces(root: string, allocate: Allocate = allocateFresh): AsyncGenerator<Buffer> {
  const piece = new PieceBuilder(allocate);
  const pending: string[] = [''];
  // Depth first in name order: a directory's entries are pushed reversed, so they pop sorted.
  while (pending.length > 0) {
    const relative = pending.pop()!;
    const path = relative === '' ? root : join(root, relative);
    const info = ifThere(() => lstatSync(path));
    if (!info) continue; // gone meanwhile
    if (info.isDirectory()) {
      if (relative !== '') yield* piece.add(header(relative, info, 'directory', 0), 0);
      const names = readdirSync(path).sort().reverse();
      for (const name of names) pending.push(relative === '' ? name : `${relative}/${name}`);
    } else if (info.isSymbolicLink()) {
      yield* piece.add(header(relative, info, 'symlink', 0, readlinkSync(path)), 0);
    } else if (info.isFile()) {
      yield* addFile(piece, relative, path, info, allocate);
    }
  }
  yield* piece.add(Buffer.alloc(2 * BLOCK), 0);
  yield* piece.flush();
}

function header(name: string, info: Stats, type: 'file' | 'directory' | 'symlink', size: number, linkname = ''): Buffer {
  return encodeHeader({ name, type, mode: info.mode, uid: info.uid, gid: info.gid, size, mtime: info.mtimeMs / 1000, linkname });
}

async function* addFile(piece: PieceBuilder, relative: string, path: string, info: Stats, allocate: Allocate): AsyncGenerator<Buffer> {
  const size = info.size;
  if (size <= SMALL_FILE_BYTES) {
    const fd = ifThere(() => openSync(path, 'r'));
    if (fd === undefined) return;
    try {
      yield* piece.add(header(relative, info, 'file', size), size + padding(size));
      piece.readFrom(fd, size);
    } finally {
      closeSync(fd);
    }
    return;
  }
  const handle = await open(path, 'r').catch((error: NodeJS.ErrnoException) => ifThere(() => { throw error; }));
  if (handle === undefined) return;
  try {
    yield* piece.add(header(relative, info, 'file', size), 0);
    yield* piece.flush();
    for (let sent = 0; sent < size; ) {
      const want = Math.min(CHUNK_BYTES, size - sent);
      const out = allocate(want + (sent + want === size ? padding(size) : 0));
      let got = 0;
      while (got < want) {
        const { bytesRead } = await handle.read(out, got, want - got, sent + got);
        if (bytesRead === 0) break; // shrank meanwhile: zeros stand in for the rest
        got += bytesRead;
      }
      out.fill(0, got);
      sent += want;
      yield out;
    }
  } finally {
    await handle.close();
  }
}

/** What `open` gives, or undefined for a path that vanished since it was listed. */
function ifThere<T>(open: () => T): T | undefined {
  try {
    return open();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** Fills output pieces of up to CHUNK_BYTES, handing each out when the next entry would not fit. */
class PieceBuilder {
  private buffer: Buffer | undefined;
  private used = 0;

  constructor(private readonly allocate: Allocate) {}

  /** Appends a header, with room for `dataBytes` after it (filled by readFrom); yields the full piece first if needed. */
  *add(bytes: Buffer, dataBytes: number): Generator<Buffer> {
    if (this.used > 0 && this.used + bytes.length + dataBytes > CHUNK_BYTES) yield* this.flush();
    // Taken only now, not at the flush: a recycled buffer is likelier to be free the later it is asked for.
    this.buffer ??= this.allocate(PIECE_BYTES);
    bytes.copy(this.buffer, this.used);
    this.used += bytes.length;
  }

  /** A small file's first `size` bytes, zeros for what is missing, and the padding to a block. */
  readFrom(fd: number, size: number): void {
    const buffer = this.buffer!;
    let got = 0;
    while (got < size) {
      const n = readSync(fd, buffer, this.used + got, size - got, got);
      if (n === 0) break;
      got += n;
    }
    const end = this.used + size + padding(size);
    buffer.fill(0, this.used + got, end);
    this.used = end;
  }

  *flush(): Generator<Buffer> {
    if (this.used === 0 || !this.buffer) return;
    const out = this.buffer.subarray(0, this.used);
    this.buffer = undefined;
    this.used = 0;
    yield out;
  }
}
