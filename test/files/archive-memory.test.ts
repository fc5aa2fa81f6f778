// Issue 36 §C.7-8 on dist/envd, where memory is measured: small archives that
// made envd hold what they named. 300 pax headers of distinct keys (~310 KB
// gzipped) took envd from 60 to 372 MiB; 60,000 entries with 3.7 KB names
// from 68 to 296 MiB. Now the extended headers before one entry are bounded
// together (MAX_EXTENDED_BYTES), files' names are not held at all, and what
// is held until the end (directories, symlinks) stops at MAX_HELD_NAME_BYTES.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGzip } from 'node:zlib';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MAX_HELD_NAME_BYTES } from '../../src/files/archive-names.js';
import { encodeHeader, padding } from '../../src/files/tar/format.js';
import { MAX_EXTENDED_BYTES } from '../../src/files/tar/read.js';
import { rssBytes, startEnvdExecutable, type EnvdProcess } from '../helpers/proc.js';

const MiB = 1024 * 1024;
/** RSS growth allowed while one of these archives is extracted or refused: ~4x the held budget (its strings and the decoding's garbage), and room for the parser's own. */
const RSS_GROWTH_BOUND = MAX_HELD_NAME_BYTES * 4 + 16 * MiB;

const token = randomBytes(16).toString('hex');
let envd: EnvdProcess;
let dir: string;
beforeAll(async () => {
  envd = await startEnvdExecutable([], { ENVD_ACCESS_TOKEN: token });
  // tmpfs where there is one: 60,000 files on a disk measure the disk.
  dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'envd-archive-mem-'));
});
afterAll(async () => {
  await envd?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A gzipped tar made of `blocks` as they come (never whole in memory), ended with the end-of-archive blocks. */
async function gzipped(blocks: () => Generator<Buffer>): Promise<Buffer> {
  const gzip = createGzip({ level: 1 });
  const out: Buffer[] = [];
  gzip.on('data', (chunk: Buffer) => out.push(chunk));
  const ended = new Promise((resolve) => gzip.on('end', resolve));
  for (const block of blocks()) if (!gzip.write(block)) await new Promise((resolve) => gzip.once('drain', resolve));
  gzip.end(Buffer.alloc(1024));
  await ended;
  return Buffer.concat(out);
}

function paxHeader(records: string): Buffer {
  const body = Buffer.from(records);
  const header = encodeHeader({ name: 'PaxHeader', type: 'file', mode: 0o644, uid: 0, gid: 0, size: body.length, mtime: 0, linkname: '' });
  header.write('x', 156);
  header.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of header.subarray(0, 512)) sum += byte;
  header.write(`${sum.toString(8).padStart(6, '0')}\0`, 148, 'latin1');
  return Buffer.concat([header, body, Buffer.alloc(padding(body.length))]);
}

function record(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = body.length + String(body.length).length;
  if (String(length).length !== String(body.length).length) length = body.length + String(length).length;
  return `${length}${body}`;
}

/** Uploads `body` while sampling envd's RSS; the answer and the growth over the RSS before. */
async function measured(path: string, body: Buffer): Promise<{ status: number; message?: string; growth: number }> {
  const pid = envd.child.pid!;
  const baseline = rssBytes(pid);
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid))), 20);
  try {
    const res = await fetch(`${envd.url}/files/archive?path=${encodeURIComponent(path)}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/gzip' },
      body: new Uint8Array(body),
    });
    const answer = await res.json();
    return { status: res.status, message: answer.message, growth: peak - baseline };
  } finally {
    clearInterval(sampler);
  }
}

// A deep directory and a long last name: 3.7 KB in all, below PATH_MAX with the target's path before it.
const DEEP = Array.from({ length: 14 }, (_, i) => `${String(i).padStart(2, '0')}${'p'.repeat(248)}`).join('/');
const longName = (i: number) => `${DEEP}/${String(i).padStart(6, '0')}${'n'.repeat(200)}`;

it('refuses 300 pax headers of distinct keys (~300 KB gzipped) at MAX_EXTENDED_BYTES with a 400, and stays in budget', async () => {
  const archive = await gzipped(function* () {
    for (let i = 0; i < 300; i++) yield paxHeader(record(`envd.k${i}`, 'v'.repeat(MAX_EXTENDED_BYTES / 2 - 40)));
  });
  expect(archive.length).toBeLessThan(1024 * 1024);
  const target = join(dir, 'pax');
  const { status, message, growth } = await measured(target, archive);
  expect(status).toBe(400);
  expect(message).toMatch(/extended headers of \d+ bytes before one entry/);
  expect(existsSync(target)).toBe(false);
  expect(growth).toBeLessThan(RSS_GROWTH_BOUND);
}, 60_000);

it('extracts 60,000 files with 3.7 KB names and holds none of their names', async () => {
  const archive = await gzipped(function* () {
    for (let i = 0; i < 60_000; i++) {
      yield paxHeader(record('path', longName(i)));
      yield encodeHeader({ name: `f${i}`, type: 'file', mode: 0o644, uid: 0, gid: 0, size: 1, mtime: 1_700_000_000, linkname: '' });
      yield Buffer.alloc(512, 0x31);
    }
  });
  const target = join(dir, 'files');
  const { status, message, growth } = await measured(target, archive);
  expect(status, message).toBe(200);
  expect(readdirSync(join(target, DEEP))).toHaveLength(60_000);
  expect(growth).toBeLessThan(RSS_GROWTH_BOUND);
  rmSync(target, { recursive: true, force: true });
}, 300_000);

it('refuses 60,000 directories with 3.7 KB names with a 413 once their names pass MAX_HELD_NAME_BYTES, and stays in budget', async () => {
  const archive = await gzipped(function* () {
    for (let i = 0; i < 60_000; i++) {
      yield paxHeader(record('path', longName(i)));
      yield encodeHeader({ name: `d${i}`, type: 'directory', mode: 0o755, uid: 0, gid: 0, size: 0, mtime: 1_700_000_000, linkname: '' });
    }
  });
  const target = join(dir, 'dirs');
  const { status, message, growth } = await measured(target, archive);
  expect(status, message).toBe(413);
  expect(message).toMatch(new RegExp(`hold more than ${MAX_HELD_NAME_BYTES} bytes of names`));
  expect(existsSync(target)).toBe(false);
  expect(growth).toBeLessThan(RSS_GROWTH_BOUND);
}, 300_000);
