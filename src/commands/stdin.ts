import { Type } from '@sinclair/typebox';
import { badRequest } from '../errors.js';
import type { StdinBody } from './schemas.js';

/** The body of POST .../stdin sent as application/octet-stream: the bytes as they are (no schema can check a Buffer). */
export const StdinBytes = Type.Unsafe<Buffer>({ description: 'The bytes to write, as they are' });

/**
 * What a POST .../stdin writes: raw bytes as sent, or the JSON form's text
 * (as UTF-8) or base64 bytes. Exactly one of the two JSON fields.
 */
export function stdinBytes(body: StdinBody | Buffer): Buffer {
  if (Buffer.isBuffer(body)) return body;
  if (typeof body !== 'object' || body === null) throw badRequest('body: give JSON { data } (text) or { data_base64 } (bytes), or the raw bytes as application/octet-stream');
  if ((body.data === undefined) === (body.data_base64 === undefined)) throw badRequest('give exactly one of data (text) and data_base64 (bytes)');
  if (body.data !== undefined) return Buffer.from(body.data, 'utf8');
  if (body.data_base64!.length % 4 !== 0) throw badRequest('data_base64: not base64 (its length is not a multiple of 4: pad with =)');
  return Buffer.from(body.data_base64!, 'base64');
}
