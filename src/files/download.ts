import { stat, type FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { HttpError, badRequest, conflict, errnoToHttpError } from '../errors.js';
import { STREAM_CHUNK_BYTES } from './chunk-size.js';
import { openReadable } from './open-readable.js';

export interface ByteRange {
  start: number;
  end: number;
}

/**
 * One `bytes=` range of RFC 9110: `a-b`, `a-` or `-n`. Returns undefined
 * when the header should be ignored (absent, another unit, several ranges,
 * bad syntax: the whole file is then sent with 200, as the RFC allows) and
 * 'unsatisfiable' when it lies wholly past the end (416).
 */
export function parseRange(header: string | undefined, size: number): ByteRange | 'unsatisfiable' | undefined {
  const match = header === undefined ? null : /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match) return undefined;
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return undefined;
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  if (last !== '' && Number(last) < start) return undefined;
  if (start >= size) return 'unsatisfiable';
  return { start, end };
}

export type Download =
  | { status: 200 | 206; headers: Record<string, string>; body: Readable }
  // The range lies past the end: the caller answers 416 with `content-range: bytes */<size>`.
  | { status: 416; size: number };

/**
 * A read that fails before anything is sent (a special file such as
 * /proc/self/mem answers EIO) is the client's request for something that
 * cannot be read as bytes: known errnos keep their usual answer (EACCES 403,
 * EISDIR 400...), any other is 400 naming the path and errno.
 */
function readError(error: unknown, path: string): unknown {
  const mapped = errnoToHttpError(error, path);
  if (mapped !== error || error instanceof HttpError) return mapped;
  const code = (error as NodeJS.ErrnoException | undefined)?.code ?? 'unknown error';
  return badRequest(`${path}: cannot be read (${code})`);
}

/**
 * Reads `length` bytes from `start` (or up to EOF when `length` is undefined)
 * in STREAM_CHUNK_BYTES chunks and closes the handle. Never more than
 * `length`: a file that grows meanwhile cannot push the body past its
 * Content-Length; a file that shrinks fails, so the connection is aborted
 * rather than the answer ending short as if complete.
 */
async function* readChunks(handle: FileHandle, path: string, start: number, length: number | undefined): AsyncGenerator<Buffer> {
  try {
    let position = start;
    let left = length ?? Infinity;
    while (left > 0) {
      const buffer = Buffer.allocUnsafe(Math.min(STREAM_CHUNK_BYTES, left));
      let bytesRead: number;
      try {
        ({ bytesRead } = await handle.read(buffer, 0, buffer.length, position));
      } catch (error) {
        throw readError(error, path);
      }
      if (bytesRead === 0) {
        if (length !== undefined) throw conflict(`${path}: ended ${left} bytes short of its size while being read (truncated meanwhile)`);
        return;
      }
      position += bytesRead;
      left -= bytesRead;
      yield bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead);
    }
  } finally {
    await handle.close();
  }
}

/**
 * The first chunk is read before the answer is chosen, so that a file that
 * cannot be read is an ordinary `{ message }` error; the rest follows as a
 * stream (fastify aborts the connection when it fails after the status line).
 */
async function startBody(chunks: AsyncGenerator<Buffer>): Promise<{ body: Readable; empty: boolean }> {
  const first = await chunks.next();
  if (first.done) return { body: Readable.from([]), empty: true };
  async function* all(): AsyncGenerator<Buffer> {
    yield first.value as Buffer;
    yield* chunks;
  }
  const body = Readable.from(all(), { objectMode: false, highWaterMark: STREAM_CHUNK_BYTES });
  // Destroyed before it began reading (client gone at once), `all` never runs: close the handle here.
  body.once('close', () => void chunks.return(undefined).catch(() => {}));
  return { body, empty: false };
}

/**
 * Opens the file once and streams from that handle, so the length sent is
 * the length of the file being read even if the path is replaced meanwhile.
 * The handle is closed when the body ends or is destroyed (client gone).
 *
 * A FIFO or socket is 400 before it is opened (opening a FIFO blocks a
 * thread-pool thread until a writer appears). A file whose size is 0 may
 * still have content (/proc, /sys, /dev/zero): it is sent to its end without
 * a Content-Length (chunked), or with `content-length: 0` if it is empty.
 */
export async function openDownload(path: string, rangeHeader: string | undefined): Promise<Download> {
  const kind = await stat(path).catch((error: unknown) => {
    throw errnoToHttpError(error, path);
  });
  if (kind.isFIFO() || kind.isSocket()) throw badRequest(`${path}: is a ${kind.isFIFO() ? 'FIFO' : 'socket'}, not a file that can be downloaded`);
  const { handle, stats } = await openReadable(path);
  const size = stats.size;
  const range = parseRange(rangeHeader, size);
  if (range === 'unsatisfiable') {
    await handle.close();
    return { status: 416, size };
  }
  const headers: Record<string, string> = { 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
  if (range) {
    const length = range.end - range.start + 1;
    headers['content-range'] = `bytes ${range.start}-${range.end}/${size}`;
    headers['content-length'] = String(length);
    return { status: 206, headers, body: (await startBody(readChunks(handle, path, range.start, length))).body };
  }
  if (size > 0) {
    headers['content-length'] = String(size);
    return { status: 200, headers, body: (await startBody(readChunks(handle, path, 0, size))).body };
  }
  const { body, empty } = await startBody(readChunks(handle, path, 0, undefined));
  if (empty) headers['content-length'] = '0';
  return { status: 200, headers, body };
}
