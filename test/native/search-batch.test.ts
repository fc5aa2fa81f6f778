import { closeSync, constants, mkdtempSync, openSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { loadSearchCalls, type SearchCalls } from '../../src/native/search-calls.js';
import { SEARCH_BATCH_READ_BYTES, Verdict } from '../../src/files/search/file-batches.js';

// scanFiles (src/native/search-batch.c) through the built addon: a batch of
// files opened the hostile-path way on the thread pool, and a verdict each
// that never says "no match" where the event loop's scan would find one.

let dir: string;
let dirfd: number;
let calls: SearchCalls;
const ENOENT = -2;
const ELOOP = -40;
const EACCES = -13;
const EINVAL = -22;
const READ = SEARCH_BATCH_READ_BYTES;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-search-batch-'));
  writeFileSync(join(dir, 'hit.txt'), 'a createServer call\n');
  writeFileSync(join(dir, 'miss.txt'), 'nothing here\n');
  writeFileSync(join(dir, 'empty'), '');
  writeFileSync(join(dir, 'after-nul.bin'), Buffer.concat([Buffer.from('text\n'), Buffer.from([0]), Buffer.from('createServer\n')]));
  writeFileSync(join(dir, 'before-nul.bin'), Buffer.concat([Buffer.from('createServer\n'), Buffer.from([0])]));
  // The needle across the boundary of the job's first and second read, and one far into a large file.
  writeFileSync(join(dir, 'straddle.txt'), `${'x'.repeat(READ - 5)}createServer\n`);
  writeFileSync(join(dir, 'late.txt'), `${'y\n'.repeat(3 * READ)}createServer\n`);
  writeFileSync(join(dir, 'late-miss.txt'), `${'y\n'.repeat(3 * READ)}\n`);
  writeFileSync(join(dir, 'secret'), 'createServer\n', { mode: 0o600 });
  symlinkSync(join(dir, 'hit.txt'), join(dir, 'link'));
  execFileSync('mkfifo', [join(dir, 'fifo')]);
  for (let i = 0; i < 40; i++) writeFileSync(join(dir, `big-${i}.txt`), `createServer\n${'z'.repeat(2 * READ)}\n`);
  for (let i = 0; i < 8; i++) writeFileSync(join(dir, `log-${i}.txt`), 'line without it\n'.repeat(65_536));
  dirfd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  const loaded = loadSearchCalls(dir, createLogger('error'));
  if (!loaded) throw new Error('the addon did not load (npm run build)');
  calls = loaded;
});
afterAll(() => {
  closeSync(dirfd);
  rmSync(dir, { recursive: true, force: true });
});

const openFds = () => readdirSync('/proc/self/fd').length;

interface Result {
  verdict: number;
  fd: number;
  size: number;
  at: number;
}

async function scan(names: string[], options: { needle?: string; reader?: Int32Array; maxBytes?: number; arena?: number; stop?: boolean; firstBytes?: number } = {}): Promise<Result[]> {
  const stop = new Int32Array(new ArrayBuffer(4));
  if (options.stop) stop[0] = 1;
  const arena = Buffer.alloc(options.arena ?? 1 << 20);
  const out = await calls.scanFiles(Int32Array.from(names, () => dirfd), Buffer.from(names.map((name) => `${name}\0`).join('')), options.reader ?? null, options.needle ? Buffer.from(options.needle) : null, options.firstBytes ?? READ, options.maxBytes ?? 0, stop, arena);
  const results: Result[] = [];
  for (let i = 0; i < names.length; i++) results.push({ verdict: out[i * 4]!, fd: out[i * 4 + 1]!, size: out[i * 4 + 2]!, at: out[i * 4 + 3]! });
  (results as Result[] & { arena?: Buffer }).arena = arena;
  return results;
}

const closeAll = (results: Result[]) => {
  for (const result of results) if (result.fd >= 0) closeSync(result.fd);
};

describe('scanFiles', () => {
  it('finds the needle only before the first NUL byte, across reads, and far into a file', async () => {
    const before = openFds();
    const names = ['hit.txt', 'miss.txt', 'after-nul.bin', 'before-nul.bin', 'straddle.txt', 'late.txt', 'late-miss.txt'];
    const results = await scan(names, { needle: 'createServer' });
    expect(results.map((result) => result.verdict)).toEqual([Verdict.candidate, Verdict.noMatch, Verdict.noMatch, Verdict.candidate, Verdict.candidate, Verdict.candidate, Verdict.noMatch]);
    // Files within the first read come back as bytes, closed; larger ones open, for the scan to read.
    expect(results[0]!.fd).toBe(-1);
    expect(results[4]!.fd).toBeGreaterThan(2);
    expect(results[5]!.fd).toBeGreaterThan(2);
    closeAll(results);
    expect(openFds()).toBe(before);
  });

  it('gives back the bytes of a small candidate in the arena, one after another', async () => {
    const results = await scan(['hit.txt', 'before-nul.bin'], { needle: 'createServer' });
    const arena = (results as Result[] & { arena: Buffer }).arena;
    expect(arena.subarray(results[0]!.at, results[0]!.at + results[0]!.size).toString()).toBe('a createServer call\n');
    expect(results[1]!.at).toBe(results[0]!.size);
    expect(results.every((result) => result.fd === -1)).toBe(true);
  });

  it('without a needle: a candidate unless the first read holds a NUL byte', async () => {
    const results = await scan(['miss.txt', 'after-nul.bin', 'late.txt']);
    expect(results.map((result) => result.verdict)).toEqual([Verdict.candidate, Verdict.noMatch, Verdict.candidate]);
    closeAll(results);
  });

  it('skips empty files and files over maxBytes without reading them', async () => {
    const results = await scan(['empty', 'late.txt', 'hit.txt'], { needle: 'createServer', maxBytes: 1000 });
    expect(results.map((result) => result.verdict)).toEqual([Verdict.skipped, Verdict.skipped, Verdict.candidate]);
    expect(results.map((result) => result.fd)).toEqual([-1, -1, -1]);
  });

  it('follows no symlink, opens no FIFO, refuses a path, and checks the reader on the opened inode', async () => {
    const before = openFds();
    const results = await scan(['link', 'fifo', 'missing', '..', 'secret'], { needle: 'createServer', reader: Int32Array.of(65534, 65534) });
    expect(results.map((result) => result.verdict)).toEqual([ELOOP, EINVAL, ENOENT, EINVAL, EACCES]);
    expect(openFds()).toBe(before);
    expect(await calls.scanFiles(Int32Array.of(dirfd), Buffer.from('a/b\0'), null, null, READ, 0, new Int32Array(new ArrayBuffer(4)), Buffer.alloc(8))).toEqual(new Float64Array([EINVAL, -1, 0, -1]));
  });

  it('leaves at most 16 candidates of a job open: the rest are closed and marked for reopening', async () => {
    const before = openFds();
    const names = Array.from({ length: 40 }, (_, i) => `big-${i}.txt`);
    const results = await scan(names, { needle: 'createServer' });
    expect(results.filter((result) => result.verdict === Verdict.candidate && result.fd >= 0)).toHaveLength(16);
    expect(results.filter((result) => result.verdict === Verdict.reopen)).toHaveLength(24);
    expect(openFds()).toBe(before + 16);
    closeAll(results);
    expect(openFds()).toBe(before);
  });

  it('copies no more than its arena holds: past it, small candidates stay open', async () => {
    const results = await scan(['hit.txt', 'hit.txt', 'hit.txt'], { needle: 'createServer', arena: 30 });
    expect(results.map((result) => result.at)).toEqual([0, -1, -1]);
    expect(results.slice(1).every((result) => result.verdict === Verdict.candidate && result.fd >= 0)).toBe(true);
    closeAll(results);
  });

  it('reads past the first read of a file only until the job has read 4 MiB: later large files are candidates, scanned by the caller', async () => {
    const names = Array.from({ length: 8 }, (_, i) => `log-${i}.txt`);
    const results = await scan(names, { needle: 'createServer' });
    // 1 MiB each: four are read whole (no match), the rest only once past the budget.
    expect(results.map((result) => result.verdict)).toEqual([...Array(4).fill(Verdict.noMatch), ...Array(4).fill(Verdict.candidate)]);
    closeAll(results);
  });

  it('opens nothing once its stop flag is set', async () => {
    const before = openFds();
    const results = await scan(['hit.txt', 'late.txt'], { needle: 'createServer', stop: true });
    expect(results.map((result) => result.verdict)).toEqual([Verdict.notReached, Verdict.notReached]);
    expect(openFds()).toBe(before);
  });

  it('refuses arguments of the wrong kinds with a TypeError', () => {
    expect(() => calls.scanFiles(Int32Array.of(dirfd), Buffer.from('x'), null, null, READ, 0, new Int32Array(1), Buffer.alloc(8))).toThrow(TypeError);
    expect(() => (calls.scanFiles as (...args: unknown[]) => unknown)([dirfd], Buffer.from('x\0'), null, null, READ, 0, new Int32Array(1), Buffer.alloc(8))).toThrow(TypeError);
  });
});
