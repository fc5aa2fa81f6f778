import { lstat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { createGzip } from 'node:zlib';
import { badRequest, errnoToHttpError } from '../errors.js';
import type { Owner } from './paths.js';
import { TarBody } from './tar/body.js';
import { MIN_CHUNK_BYTES } from './tar/write.js';

export type ArchiveFormat = 'tar' | 'tar.gz';

/** The tar piece size under gzip (the smallest tarPieces takes). */
const GZIP_PIECE_BYTES = MIN_CHUNK_BYTES;
/** What gzip is given at a time: it compresses a whole write before it looks at backpressure. */
const GZIP_SLICE_BYTES = 64 * 1024;

/**
 * A directory tree as a tar stream (gzipped for tar.gz), written by envd's
 * own tar writer (src/files/tar): pieces of at most 1 MiB in recycled
 * buffers, each made only when the client has taken the one before, so
 * memory stays flat whatever the tree's size. Checked before the first byte goes out: a missing path is a
 * 404, a file is a 400. A failure later (a file that cannot be read) ends
 * the response without its end-of-archive blocks, which every tar reader reports.
 * `checksums`: each file's sha256 in the stream (tar/checksums.ts), for `envd cp`.
 */
export async function packDirectory(dir: string, format: ArchiveFormat, owner?: Owner, checksums = false): Promise<Readable> {
  const info = await lstat(dir).catch((error: NodeJS.ErrnoException) => {
    throw errnoToHttpError(error, dir);
  });
  if (!info.isDirectory()) throw badRequest(`path: ${dir} is not a directory`);
  if (format === 'tar') return new TarBody(dir, owner, undefined, undefined, checksums);
  // gzip takes a piece slower than a socket would and holds it until done: smaller pieces keep what a
  // stalled client pins (the piece, zlib's state) under 1 MiB (issue 36, item 9) at no cost in speed.
  const tar = new TarBody(dir, owner, GZIP_PIECE_BYTES, GZIP_SLICE_BYTES, checksums);
  const gzip = createGzip({ level: 6 });
  tar.on('error', (error) => gzip.destroy(error));
  gzip.on('close', () => tar.destroy());
  return tar.pipe(gzip);
}
