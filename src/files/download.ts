import type { Readable } from 'node:stream';
import { FileBody } from './file-body.js';
import { openReadable } from './open-readable.js';
import type { Owner } from './paths.js';

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
 * Opens the file once and streams from that handle, so the length sent is
 * the length of the file being read even if the path is replaced meanwhile.
 * The first chunk is read before the answer is chosen (FileBody.open), so a
 * file that cannot be read is a `{ message }` error; a failure after that
 * aborts the connection (fastify destroys the response). The handle is closed
 * when the body ends or is destroyed (client gone).
 *
 * A FIFO, socket or device is 400 before a byte is read (user-path.ts's
 * openRegular). A file whose size is 0 may
 * still have content (/proc, /sys): it is sent to its end without
 * a Content-Length (chunked), or with `content-length: 0` if it is empty.
 */
export async function openDownload(path: string, rangeHeader: string | undefined, owner?: Owner): Promise<Download> {
  const { handle, stats } = await openReadable(path, owner);
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
    return { status: 206, headers, body: (await FileBody.open(handle, path, range.start, length)).body };
  }
  if (size > 0) {
    headers['content-length'] = String(size);
    return { status: 200, headers, body: (await FileBody.open(handle, path, 0, size)).body };
  }
  const { body, empty } = await FileBody.open(handle, path, 0, undefined);
  if (empty) headers['content-length'] = '0';
  return { status: 200, headers, body };
}
