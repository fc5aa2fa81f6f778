import { HttpError, badRequest, errnoToHttpError } from '../errors.js';
import { openReadable } from './open-readable.js';
import type { EncodingName } from './schemas.js';

/** JSON reads of files above this are refused with 413; `/files/raw` streams any size. */
export const READ_LIMIT = 10 * 1024 * 1024;

/** Reads a whole (small) file for a JSON answer. */
export async function readContent(path: string, encoding: EncodingName): Promise<{ path: string; data: string; encoding: EncodingName; size: number }> {
  const { handle, stats } = await openReadable(path);
  try {
    if (stats.size > READ_LIMIT) throw new HttpError(413, `${path}: ${stats.size} bytes is over the ${READ_LIMIT}-byte limit of a JSON read; use GET /files/raw`);
    // Read at most the size seen above (plus one byte to notice growth): a
    // file that grows meanwhile cannot push the answer past the limit.
    const buffer = Buffer.alloc(Math.min(stats.size + 1, READ_LIMIT + 1));
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > READ_LIMIT) throw new HttpError(413, `${path}: grew over the ${READ_LIMIT}-byte limit of a JSON read; use GET /files/raw`);
    const bytes = buffer.subarray(0, length);
    return { path, data: bytes.toString(encoding), encoding, size: length };
  } catch (error) {
    throw errnoToHttpError(error, path);
  } finally {
    await handle.close();
  }
}

/** Request data as bytes; base64 that does not decode cleanly is a 400, not silently dropped characters. */
export function decodeData(data: string, encoding: EncodingName, field: string): Buffer {
  if (encoding === 'utf8') return Buffer.from(data, 'utf8');
  const clean = data.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(clean) || clean.length % 4 === 1) throw badRequest(`${field}: not valid base64`);
  return Buffer.from(clean, 'base64');
}
