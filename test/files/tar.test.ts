// envd's tar codec (src/files/tar) against two other implementations: what it
// writes, GNU tar and tar-stream read back the same; what GNU tar writes in
// each of its formats (gnu long names, pax, ustar, v7), envd reads the same.
// Edges: the 100-byte name field, the 155+100 ustar split, pax beyond it,
// ids and sizes past the octal fields, a bad checksum, a missing end block,
// an extended header past its bound.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { extract } from 'tar-stream';
import { afterAll, describe, expect, it } from 'vitest';
import { BLOCK, decodeHeader, encodeHeader, TarFormatError, type TarHeader } from '../../src/files/tar/format.js';
import { MAX_EXTENDED_BYTES, readTar } from '../../src/files/tar/read.js';
import { tarPieces } from '../../src/files/tar/write.js';

const dir = mkdtempSync(join(tmpdir(), 'envd-tar-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const NAMES = [
  'a'.repeat(100), // fills the name field exactly
  `${'p'.repeat(150)}/${'n'.repeat(100)}`, // fits ustar's prefix + name split
  `${'deep/'.repeat(60)}end.txt`, // 307 bytes: only pax holds it
  `ünï/${'ç'.repeat(60)}.txt`, // 120 characters, 185 bytes of UTF-8
];

interface Seen {
  name: string;
  type: string;
  mode: number;
  mtime: number;
  linkname: string;
  body: string;
}

/** Every entry readTar gives, with its data as text. */
async function readAll(bytes: Buffer, chunk = 700): Promise<Seen[]> {
  const seen: Seen[] = [];
  let body: Buffer[] = [];
  const pieces = Array.from({ length: Math.ceil(bytes.length / chunk) }, (_, i) => bytes.subarray(i * chunk, (i + 1) * chunk));
  await readTar(Readable.from(pieces), {
    entry: (header: TarHeader) => {
      seen.push({ name: header.name, type: header.type, mode: header.mode, mtime: Math.floor(header.mtime), linkname: header.linkname, body: '' });
      body = [];
    },
    data: (piece: Buffer) => void body.push(Buffer.from(piece)),
    end: () => void (seen.at(-1)!.body = Buffer.concat(body).toString()),
  });
  return seen;
}

async function collect(pieces: AsyncIterable<Buffer>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const piece of pieces) out.push(Buffer.from(piece));
  return Buffer.concat(out);
}

function makeTree(root: string): void {
  for (const name of NAMES) {
    mkdirSync(join(root, name, '..'), { recursive: true });
    writeFileSync(join(root, name), `content of ${name.length}`);
  }
  writeFileSync(join(root, 'big.bin'), Buffer.alloc(3 * 1024 * 1024 + 5, 7)); // read in pieces of its own
  writeFileSync(join(root, 'empty.txt'), '');
  writeFileSync(join(root, 'run.sh'), '#!/bin/sh\n', { mode: 0o755 });
  symlinkSync(`${'t'.repeat(150)}`, join(root, 'long-link')); // a target past 100 bytes: pax linkpath
  utimesSync(join(root, 'run.sh'), 1_234_567_890, 1_234_567_890);
}

describe('envd writes tar', () => {
  const root = join(dir, 'tree');
  makeTree(root);

  it('that GNU tar extracts to the same tree: long names, unicode, a long link target, modes, mtimes', async () => {
    const archive = await collect(tarPieces(root));
    expect(archive.length % BLOCK).toBe(0);
    const file = join(dir, 'out.tar');
    writeFileSync(file, archive);
    const listed = execFileSync('tar', ['-tvf', file], { encoding: 'utf8' });
    const into = join(dir, 'gnu');
    mkdirSync(into);
    execFileSync('tar', ['-xpf', file, '-C', into]);
    for (const name of NAMES) expect(readFileSync(join(into, name), 'utf8')).toBe(`content of ${name.length}`);
    expect(readFileSync(join(into, 'big.bin')).equals(readFileSync(join(root, 'big.bin')))).toBe(true);
    expect(execFileSync('stat', ['-c', '%a %Y', join(into, 'run.sh')], { encoding: 'utf8' }).trim()).toBe('755 1234567890');
    expect(execFileSync('readlink', [join(into, 'long-link')], { encoding: 'utf8' }).trim()).toBe('t'.repeat(150));
    expect(listed).not.toMatch(/PaxHeader/); // pax headers are read as such, not as files
  });

  it('that tar-stream reads entry by entry with the same names and bytes, and that envd reads back the same', async () => {
    const archive = await collect(tarPieces(root));
    const fromTarStream: string[] = [];
    const parser = extract();
    parser.on('entry', (header, stream, next) => {
      fromTarStream.push(`${header.type} ${header.name.replace(/\/$/, '')}`);
      stream.on('end', next).resume();
    });
    await new Promise<void>((resolve, reject) => parser.on('finish', () => resolve()).on('error', reject).end(archive));
    const fromEnvd = await readAll(archive, 4096);
    expect(fromEnvd.map((entry) => `${entry.type} ${entry.name}`)).toEqual(fromTarStream);
    expect(fromEnvd.find((entry) => entry.name === NAMES[2])?.body).toBe(`content of ${NAMES[2]!.length}`);
    expect(fromEnvd.find((entry) => entry.name === 'long-link')?.linkname).toBe('t'.repeat(150));
  });

  it('puts ids and times past the octal fields into pax records that GNU tar reads', () => {
    const entry = encodeHeader({ name: 'x', type: 'file', mode: 0o600, uid: 2 ** 22, gid: 5, size: 0, mtime: -86_400, linkname: '' });
    const file = join(dir, 'ids.tar');
    writeFileSync(file, Buffer.concat([entry, Buffer.alloc(1024)]));
    const listed = execFileSync('tar', ['--numeric-owner', '--utc', '-tvf', file], { encoding: 'utf8', env: { ...process.env, TZ: 'UTC' } });
    expect(listed).toMatch(new RegExp(`^-rw------- ${2 ** 22}/5 +0 1969-12-31 00:00 x$`, 'm'));
  });

  it('puts a size of 8 GiB and more into a pax record (the size field holds 11 octal digits)', async () => {
    const blocks = encodeHeader({ name: 'huge', type: 'file', mode: 0o600, uid: 0, gid: 0, size: 2 ** 34, mtime: 0, linkname: '' });
    const seen: TarHeader[] = [];
    const reading = readTar(Readable.from([blocks]), { entry: (header: TarHeader) => void seen.push(header), data: () => {}, end: () => {} });
    await expect(reading).rejects.toThrow(/unexpected end of the archive in the data of "huge"/);
    expect(seen[0]).toMatchObject({ name: 'huge', size: 2 ** 34 });
    expect(decodeHeader(blocks.subarray(0, BLOCK)).flag).toBe('x');
  });
});

describe('envd reads tar', () => {
  const root = join(dir, 'source');
  makeTree(root);

  it.each(['gnu', 'pax', 'ustar', 'v7'])('as GNU tar writes it in --format=%s (long names where the format has them)', async (format) => {
    const file = join(dir, `${format}.tar`);
    // ustar splits a long name at a slash (NAMES[1]); v7 has 99 bytes; a link target past 100 bytes needs gnu or pax.
    const fits = (name: string) => format === 'gnu' || format === 'pax' || Buffer.byteLength(name) < 100 || (format === 'ustar' && name === NAMES[1]);
    const names = ['big.bin', 'empty.txt', 'run.sh', ...(format === 'gnu' || format === 'pax' ? ['long-link'] : []), ...NAMES.filter(fits)];
    execFileSync('tar', [`--format=${format}`, '-cf', file, '-C', root, ...names]);
    const entries = await readAll(readFileSync(file), 333);
    for (const name of NAMES.filter(fits)) expect(entries.find((entry) => entry.name === name)?.body).toBe(`content of ${name.length}`);
    expect(entries.find((entry) => entry.name === 'run.sh')).toMatchObject({ type: 'file', mode: 0o755, mtime: 1_234_567_890 });
    expect(Buffer.byteLength(entries.find((entry) => entry.name === 'big.bin')!.body)).toBe(3 * 1024 * 1024 + 5);
  });

  it('reads past a global pax header (git archive writes one) and ignores what follows the end blocks', async () => {
    const global = encodeHeader({ name: 'x', type: 'file', mode: 0o644, uid: 0, gid: 0, size: 0, mtime: 0, linkname: '' });
    global.write('g', 156); // same block with a global type: its checksum fixed below
    fixChecksum(global);
    const one = Buffer.concat([global, encodeHeader({ name: 'one.txt', type: 'file', mode: 0o644, uid: 0, gid: 0, size: 3, mtime: 9, linkname: '' }), pad(Buffer.from('abc'))]);
    const entries = await readAll(Buffer.concat([one, Buffer.alloc(1024), Buffer.from('trailing junk')]));
    expect(entries).toEqual([{ name: 'one.txt', type: 'file', mode: 0o644, mtime: 9, linkname: '', body: 'abc' }]);
  });

  it('refuses a wrong checksum, a missing end block, data cut short and an extended header past 1 MiB', async () => {
    const header = encodeHeader({ name: 'f', type: 'file', mode: 0o644, uid: 0, gid: 0, size: 10, mtime: 0, linkname: '' });
    const good = Buffer.concat([header, pad(Buffer.from('0123456789')), Buffer.alloc(1024)]);
    expect(await readAll(good)).toHaveLength(1);
    const flipped = Buffer.from(good);
    flipped[0] = 0x67;
    await expect(readAll(flipped)).rejects.toThrow(/wrong checksum/);
    await expect(readAll(good.subarray(0, BLOCK * 2))).rejects.toThrow(/no end-of-archive block/);
    await expect(readAll(good.subarray(0, BLOCK + 5))).rejects.toThrow(TarFormatError);
    const huge = encodeHeader({ name: 'p', type: 'file', mode: 0o644, uid: 0, gid: 0, size: 1024 * 1024 + 1, mtime: 0, linkname: '' });
    huge.write('x', 156);
    fixChecksum(huge);
    await expect(readAll(Buffer.concat([huge, Buffer.alloc(1024 * 1024 + 512)]))).rejects.toThrow(/extended headers of 1048577 bytes before one entry/);
  });

  it('holds the extended headers before one entry up to MAX_EXTENDED_BYTES together, and refuses one byte more however it is split', async () => {
    const file = Buffer.concat([encodeHeader({ name: 'f', type: 'file', mode: 0o644, uid: 0, gid: 0, size: 1, mtime: 0, linkname: '' }), pad(Buffer.from('1'))]);
    const half = MAX_EXTENDED_BYTES / 2;
    // Two pax headers of distinct keys that fill the budget exactly, then the entry: read.
    const atEdge = Buffer.concat([paxHeader('comment', half), paxHeader('envd.a', half), file, Buffer.alloc(1024)]);
    expect(await readAll(atEdge)).toEqual([expect.objectContaining({ name: 'f', body: '1' })]);
    // The budget is per entry: the same again before a second entry is fine.
    expect(await readAll(Buffer.concat([atEdge.subarray(0, atEdge.length - 1024), atEdge]))).toHaveLength(2);
    // One byte more, split over a pax header and a GNU long name: refused before it is held.
    const longName = encodeHeader({ name: '././@LongLink', type: 'file', mode: 0, uid: 0, gid: 0, size: half + 1, mtime: 0, linkname: '' });
    longName.write('L', 156);
    fixChecksum(longName);
    const over = Buffer.concat([paxHeader('comment', half), longName, pad(Buffer.alloc(half + 1, 0x61)), file, Buffer.alloc(1024)]);
    await expect(readAll(over)).rejects.toThrow(`extended headers of ${MAX_EXTENDED_BYTES + 1} bytes before one entry (at most ${MAX_EXTENDED_BYTES})`);
    // Many small headers of distinct keys (what took envd to 372 MiB) stop at the same edge.
    const many = Array.from({ length: 300 }, (_, i) => paxHeader(`k${i}`, 64 * 1024));
    await expect(readAll(Buffer.concat([...many, file, Buffer.alloc(1024)]))).rejects.toThrow(/extended headers of \d+ bytes before one entry/);
  });
});

/** A pax header ('x') of one record `key=aaa…` exactly `bytes` long. */
function paxHeader(key: string, bytes: number): Buffer {
  const value = 'a'.repeat(bytes - String(bytes).length - key.length - 3);
  const record = Buffer.from(`${bytes} ${key}=${value}\n`);
  expect(record.length).toBe(bytes);
  const header = encodeHeader({ name: 'PaxHeader', type: 'file', mode: 0o644, uid: 0, gid: 0, size: bytes, mtime: 0, linkname: '' });
  header.write('x', 156);
  fixChecksum(header);
  return Buffer.concat([header, pad(record)]);
}

function pad(bytes: Buffer): Buffer {
  return Buffer.concat([bytes, Buffer.alloc((BLOCK - (bytes.length % BLOCK)) % BLOCK)]);
}

function fixChecksum(block: Buffer): void {
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += block[i]!;
  block.write(`${sum.toString(8).padStart(6, '0')}\0`, 148, 'latin1');
}
