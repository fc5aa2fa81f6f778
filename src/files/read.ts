import type { FileHandle } from 'node:fs/promises';
import { HttpError, badRequest, errnoToHttpError } from '../errors.js';
import { openReadable } from './open-readable.js';
import type { Owner } from './paths.js';
import type { EncodingName } from './schemas.js';

/** JSON reads of files above this are refused with 413; `/files/raw` streams any size. */
export const READ_LIMIT = 10 * 1024 * 1024;

/** How much more a read asks for once the size stat gave is reached (files whose size says nothing). */
const READ_STEP_BYTES = 64 * 1024;

/** Reads a whole (small) file for a JSON answer. */
export async function readContent(path: string, encoding: EncodingName, owner?: Owner): Promise<{ path: string; data: string; encoding: EncodingName; size: number }> {
  const { handle, stats } = await openReadable(path, owner);
  try {
    if (stats.size > READ_LIMIT) throw new HttpError(413, `${path}: ${stats.size} bytes is over the ${READ_LIMIT}-byte limit of a JSON read; use GET /files/raw`);
    const bytes = await readUpTo(handle, READ_LIMIT + 1, stats.size);
    if (bytes.length > READ_LIMIT) throw new HttpError(413, `${path}: grew over the ${READ_LIMIT}-byte limit of a JSON read; use GET /files/raw`);
    const length = bytes.length;
    return { path, data: bytes.toString(encoding), encoding, size: length };
  } catch (error) {
    throw errnoToHttpError(error, path);
  } finally {
    await handle.close();
  }
}

/** How much a line-range read reads at once; only the lines in the range are kept. */
const LINE_READ_CHUNK_BYTES = 64 * 1024;

export interface LineRange {
  /** 1-based. */
  from: number;
  /** How many lines at most; undefined: to the end. */
  count: number | undefined;
}

/**
 * Reads lines `from` .. `from + count - 1` of a file of any size: the file is
 * read in chunks to its end (to count `total_lines`), and only the lines in
 * the range are held. A range over READ_LIMIT bytes is a 413. The last line
 * counts even without a final newline; the lines keep their newlines.
 */
export async function readLineRange(
  path: string,
  encoding: EncodingName,
  range: LineRange,
  owner?: Owner,
): Promise<{ path: string; data: string; encoding: EncodingName; size: number; from_line: number; lines: number; total_lines: number }> {
  const { handle } = await openReadable(path, owner);
  const last = range.count === undefined ? Number.POSITIVE_INFINITY : range.from + range.count - 1;
  const kept: Buffer[] = [];
  let keptBytes = 0;
  let line = 1;
  let size = 0;
  let endsWithNewline = true;
  try {
    const buffer = Buffer.allocUnsafe(LINE_READ_CHUNK_BYTES);
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, size);
      if (bytesRead === 0) break;
      size += bytesRead;
      const chunk = buffer.subarray(0, bytesRead);
      endsWithNewline = chunk[bytesRead - 1] === 10;
      let start = 0;
      while (start < bytesRead) {
        const newline = chunk.indexOf(10, start);
        const end = newline === -1 ? bytesRead : newline + 1;
        if (line >= range.from && line <= last) {
          keptBytes += end - start;
          if (keptBytes > READ_LIMIT) throw new HttpError(413, `${path}: lines ${range.from}..${line} are over the ${READ_LIMIT}-byte limit of a JSON read; ask for fewer lines`);
          kept.push(Buffer.from(chunk.subarray(start, end)));
        }
        if (newline === -1) break;
        line++;
        start = end;
      }
    }
  } catch (error) {
    throw errnoToHttpError(error, path);
  } finally {
    await handle.close();
  }
  // `line` counted the newlines; a last line without one is a line too, an empty file has none.
  const total = size === 0 ? 0 : endsWithNewline ? line - 1 : line;
  const returned = Math.max(0, Math.min(last, total) - range.from + 1);
  return { path, data: Buffer.concat(kept, keptBytes).toString(encoding), encoding, size, from_line: range.from, lines: returned, total_lines: total };
}

/**
 * Reads from the start to the end of the file, or `limit` bytes. `sizeHint` is
 * what stat said: a file of size 0 may still have content (/proc/cpuinfo), so
 * the end is where a read returns nothing, not the size.
 */
async function readUpTo(handle: FileHandle, limit: number, sizeHint: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  while (total < limit) {
    const buffer = Buffer.allocUnsafe(Math.min(limit - total, Math.max(sizeHint - total + 1, READ_STEP_BYTES)));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, total);
    if (bytesRead === 0) break;
    chunks.push(buffer.subarray(0, bytesRead));
    total += bytesRead;
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
}

/** Request data as bytes; base64 that does not decode cleanly is a 400, not silently dropped characters. */
export function decodeData(data: string, encoding: EncodingName, field: string): Buffer {
  if (encoding === 'utf8') return Buffer.from(data, 'utf8');
  const clean = data.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(clean) || clean.length % 4 === 1) throw badRequest(`${field}: not valid base64`);
  return Buffer.from(clean, 'base64');
}
