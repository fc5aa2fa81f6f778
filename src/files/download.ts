import type { ReadStream } from 'node:fs';
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
  | { status: 200 | 206; headers: Record<string, string>; body: ReadStream }
  // The range lies past the end: the caller answers 416 with `content-range: bytes */<size>`.
  | { status: 416; size: number };

/**
 * Opens the file once and streams from that handle, so the length sent is
 * the length of the file being read even if the path is replaced meanwhile.
 * The stream closes the handle when it ends or is destroyed (client gone).
 */
export async function openDownload(path: string, rangeHeader: string | undefined): Promise<Download> {
  const { handle, stats } = await openReadable(path);
  try {
    const size = stats.size;
    const range = parseRange(rangeHeader, size);
    if (range === 'unsatisfiable') {
      await handle.close();
      return { status: 416, size };
    }
    const headers: Record<string, string> = { 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
    if (range) {
      headers['content-range'] = `bytes ${range.start}-${range.end}/${size}`;
      headers['content-length'] = String(range.end - range.start + 1);
      return { status: 206, headers, body: handle.createReadStream({ start: range.start, end: range.end, highWaterMark: STREAM_CHUNK_BYTES }) };
    }
    headers['content-length'] = String(size);
    return { status: 200, headers, body: handle.createReadStream({ highWaterMark: STREAM_CHUNK_BYTES }) };
  } catch (error) {
    await handle.close();
    throw error;
  }
}
