/**
 * The tar format as envd reads and writes it: POSIX ustar headers, with pax
 * extended headers for what does not fit (long names and link targets, sizes
 * of 8 GiB and more, large ids, times before 1970). Read side also takes GNU
 * tar's long-name entries and base-256 numbers, and old v7 headers.
 *
 * A header is one 512-byte block; an entry's data follows, padded to a block;
 * the archive ends with zero blocks.
 */

export const BLOCK = 512;

export type EntryType = 'file' | 'directory' | 'symlink' | 'link' | 'other';

export interface TarHeader {
  /** Relative path inside the archive (no trailing slash). */
  name: string;
  type: EntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds since the epoch (fractional from pax). */
  mtime: number;
  linkname: string;
  /** The raw type flag, for messages about the kinds envd will not extract. */
  flag: string;
}

/** Bytes that pad `size` to a whole number of blocks. */
export function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

// ---- writing ----

const MAX_OCTAL_11 = 0o77777777777; // size and mtime fields: 11 digits (8 GiB - 1)
const MAX_OCTAL_7 = 0o7777777; // uid and gid fields: 7 digits

/**
 * The header block(s) of one entry: a pax header first when a value does not
 * fit ustar's fields. `name` is relative; directories get their trailing slash here.
 */
export function encodeHeader(entry: Omit<TarHeader, 'flag'>): Buffer {
  const name = entry.type === 'directory' ? `${entry.name}/` : entry.name;
  const pax: Array<[string, string]> = [];
  const split = splitName(name);
  if (!split) pax.push(['path', name]);
  if (Buffer.byteLength(entry.linkname) > 100) pax.push(['linkpath', entry.linkname]);
  if (entry.size > MAX_OCTAL_11) pax.push(['size', String(entry.size)]);
  if (entry.uid > MAX_OCTAL_7) pax.push(['uid', String(entry.uid)]);
  if (entry.gid > MAX_OCTAL_7) pax.push(['gid', String(entry.gid)]);
  const mtime = Math.floor(entry.mtime);
  if (mtime < 0 || mtime > MAX_OCTAL_11) pax.push(['mtime', String(mtime)]);
  const main = ustarBlock({
    name: split?.name ?? name.slice(0, 100),
    prefix: split?.prefix ?? '',
    flag: FLAG_OF[entry.type],
    mode: entry.mode & 0o7777,
    uid: entry.uid > MAX_OCTAL_7 ? 0 : entry.uid,
    gid: entry.gid > MAX_OCTAL_7 ? 0 : entry.gid,
    size: entry.size > MAX_OCTAL_11 ? 0 : entry.size,
    mtime: mtime < 0 || mtime > MAX_OCTAL_11 ? 0 : mtime,
    linkname: entry.linkname,
  });
  if (pax.length === 0) return main;
  const records = Buffer.from(pax.map(([key, value]) => paxRecord(key, value)).join(''));
  const paxHeader = ustarBlock({ name: 'PaxHeader', prefix: '', flag: 'x', mode: 0o644, uid: 0, gid: 0, size: records.length, mtime: 0, linkname: '' });
  return Buffer.concat([paxHeader, records, Buffer.alloc(padding(records.length)), main]);
}

/** A pax global header ('g') holding one `comment` record, which every reader ignores but envd's (tar/checksums.ts). */
export function encodeGlobalComment(comment: string): Buffer {
  const records = Buffer.from(paxRecord('comment', comment));
  const header = ustarBlock({ name: 'pax_global_header', prefix: '', flag: 'g', mode: 0o644, uid: 0, gid: 0, size: records.length, mtime: 0, linkname: '' });
  return Buffer.concat([header, records, Buffer.alloc(padding(records.length))]);
}

const FLAG_OF: Record<EntryType, string> = { file: '0', directory: '5', symlink: '2', link: '1', other: '0' };

/** ustar's split of a long name at a slash into prefix (155 bytes) and name (100); undefined when none fits. */
function splitName(name: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', name };
  if (Buffer.byteLength(name) > 256) return undefined;
  for (let at = name.indexOf('/'); at !== -1; at = name.indexOf('/', at + 1)) {
    const prefix = name.slice(0, at);
    const rest = name.slice(at + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(rest) <= 100 && rest !== '') return { prefix, name: rest };
  }
  return undefined;
}

/** "%d key=value\n", where %d counts the whole record, itself included. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  const bytes = Buffer.byteLength(body);
  let length = bytes + String(bytes).length;
  if (String(length).length !== String(bytes).length) length = bytes + String(length).length;
  return `${length}${body}`;
}

/** A ustar block's fields: a header's, with the name split into prefix and name. */
type Fields = Omit<TarHeader, 'type'> & { prefix: string };

function ustarBlock(fields: Fields): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(fields.name, 0, 100);
  writeOctal(block, 100, 8, fields.mode);
  writeOctal(block, 108, 8, fields.uid);
  writeOctal(block, 116, 8, fields.gid);
  writeOctal(block, 124, 12, fields.size);
  writeOctal(block, 136, 12, fields.mtime);
  block.write(fields.flag, 156, 1);
  block.write(fields.linkname, 157, 100);
  block.write('ustar\u000000', 257, 8, 'latin1');
  block.write(fields.prefix, 345, 155);
  // The checksum is summed with its own field read as spaces.
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += block[i]!;
  writeOctal(block, 148, 7, sum);
  return block;
}

/** Zero-padded octal digits filling the field but its last byte, a NUL. */
function writeOctal(block: Buffer, offset: number, length: number, value: number): void {
  block.write(value.toString(8).padStart(length - 1, '0'), offset, length - 1, 'latin1');
  block[offset + length - 1] = 0;
}

// ---- reading ----

export class TarFormatError extends Error {}

/** Whether a block is all zeros: the end of the archive. */
export function isZeroBlock(block: Buffer): boolean {
  for (let i = 0; i < BLOCK; i++) if (block[i] !== 0) return false;
  return true;
}

/** One header block as it stands, before pax or GNU long names are applied. */
export function decodeHeader(block: Buffer): TarHeader {
  const stored = readNumber(block, 148, 8, 'checksum');
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  if (stored !== unsigned && stored !== signed) throw new TarFormatError('a header with a wrong checksum');
  const ustar = block.toString('latin1', 257, 263) === 'ustar\u0000';
  let name = cString(block, 0, 100);
  if (ustar && block[345] !== 0) name = `${cString(block, 345, 155)}/${name}`;
  const flag = String.fromCharCode(block[156]!);
  return {
    name,
    type: typeOf(flag),
    mode: readNumber(block, 100, 8, 'mode'),
    uid: readNumber(block, 108, 8, 'uid'),
    gid: readNumber(block, 116, 8, 'gid'),
    size: readNumber(block, 124, 12, 'size'),
    mtime: readNumber(block, 136, 12, 'mtime'),
    linkname: cString(block, 157, 100),
    flag,
  };
}

function typeOf(flag: string): EntryType {
  switch (flag) {
    case '0':
    case '\u0000':
    case '7':
      return 'file'; // or a directory, by v7's trailing slash: applyExtended tells, once the whole name is known
    case '5':
      return 'directory';
    case '2':
      return 'symlink';
    case '1':
      return 'link';
    default:
      return 'other';
  }
}

/** A NUL-terminated UTF-8 field. */
function cString(block: Buffer, offset: number, length: number): string {
  const end = block.indexOf(0, offset);
  return block.toString('utf8', offset, end === -1 || end > offset + length ? offset + length : end);
}

/**
 * An octal field (spaces and NULs around it), or GNU's base-256 when its
 * first bit is set. Read from the bytes, not through a string: six of them
 * per header, ten thousand headers in a source tree.
 */
function readNumber(block: Buffer, offset: number, length: number, field: string): number {
  if (block[offset]! & 0x80) {
    if (block[offset] === 0xff) throw new TarFormatError(`a negative ${field}`);
    let value = block[offset]! & 0x7f;
    for (let i = 1; i < length; i++) value = value * 256 + block[offset + i]!;
    if (!Number.isSafeInteger(value)) throw new TarFormatError(`a ${field} too large`);
    return value;
  }
  const end = offset + length;
  let at = offset;
  while (at < end && block[at] === 0x20) at++;
  let value = 0;
  for (; at < end; at++) {
    const byte = block[at]!;
    if (byte === 0 || byte === 0x20) break;
    if (byte < 0x30 || byte > 0x37) throw new TarFormatError(`a ${field} field that is not a number (${JSON.stringify(block.toString('latin1', offset, end))})`);
    value = value * 8 + (byte - 0x30);
  }
  return value; // what follows a NUL or space is ignored, as GNU tar does
}

/** pax records ("%d key=value\n" each) as a map; a malformed record is the archive's fault. */
export function parsePax(bytes: Buffer): Map<string, string> {
  const records = new Map<string, string>();
  let at = 0;
  while (at < bytes.length) {
    if (bytes[at] === 0) break; // padding some writers leave
    const space = bytes.indexOf(0x20, at);
    const length = space === -1 ? NaN : Number(bytes.toString('latin1', at, space));
    if (!Number.isSafeInteger(length) || length <= space - at || at + length > bytes.length || bytes[at + length - 1] !== 0x0a) {
      throw new TarFormatError('a malformed pax header');
    }
    const record = bytes.toString('utf8', space + 1, at + length - 1);
    const equals = record.indexOf('=');
    if (equals <= 0) throw new TarFormatError('a malformed pax header');
    records.set(record.slice(0, equals), record.slice(equals + 1));
    at += length;
  }
  return records;
}

/** A header with the pax records (and GNU long names) that came before it applied. */
export function applyExtended(header: TarHeader, pax: Map<string, string> | undefined, longName?: string, longLink?: string): TarHeader {
  const out = header; // decoded for this entry alone: changed in place
  if (longName !== undefined) out.name = longName;
  if (longLink !== undefined) out.linkname = longLink;
  if (pax) {
    const path = pax.get('path');
    if (path !== undefined) out.name = path;
    const linkpath = pax.get('linkpath');
    if (linkpath !== undefined) out.linkname = linkpath;
    for (const key of ['size', 'uid', 'gid'] as const) {
      const value = pax.get(key);
      if (value === undefined) continue;
      if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) throw new TarFormatError(`a pax ${key} that is not a number`);
      out[key] = Number(value);
    }
    const mtime = pax.get('mtime');
    if (mtime !== undefined) {
      if (!/^-?\d+(\.\d+)?$/.test(mtime)) throw new TarFormatError('a pax mtime that is not a number');
      out.mtime = Number(mtime);
    }
  }
  if (out.type === 'file' && out.name.endsWith('/')) out.type = 'directory'; // v7 wrote directories as files named with a slash
  out.name = out.name.replace(/\/+$/, '');
  return out;
}
