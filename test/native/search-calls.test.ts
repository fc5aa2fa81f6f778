import { closeSync, constants, lstatSync, mkdirSync, mkdtempSync, openSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { loadSearchCalls, type SearchCalls } from '../../src/native/search-calls.js';

// The search's native calls (src/native/open-at.c, byte-search.c) through
// the built addon: the hostile-path rules hold in C as they did in JavaScript.

let dir: string;
let dirfd: number;
let calls: SearchCalls;
const out = new Float64Array(3);
const ENOENT = -2;
const ELOOP = -40;
const EACCES = -13;
const EINVAL = -22;
const ENOTDIR = -20;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-search-calls-'));
  writeFileSync(join(dir, 'small.txt'), 'hello\n');
  writeFileSync(join(dir, 'big.txt'), 'x'.repeat(100));
  writeFileSync(join(dir, 'empty'), '');
  writeFileSync(join(dir, 'secret'), 'no', { mode: 0o600 });
  writeFileSync(Buffer.concat([Buffer.from(`${dir}/`), Buffer.from([0x63, 0x61, 0x66, 0xe9])]), 'latin');
  mkdirSync(join(dir, 'sub'));
  symlinkSync('/etc/passwd', join(dir, 'link'));
  symlinkSync('/etc', join(dir, 'dirlink'));
  execFileSync('mkfifo', [join(dir, 'fifo')]);
  dirfd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  const loaded = loadSearchCalls(dir, createLogger('error'));
  if (!loaded) throw new Error('the addon did not load (npm run build)');
  calls = loaded;
});
afterAll(() => {
  closeSync(dirfd);
  rmSync(dir, { recursive: true, force: true });
});

describe('openFileAt', () => {
  it('reads a small file whole and closes it', () => {
    const buffer = Buffer.alloc(64);
    expect(calls.openFileAt(dirfd, 'small.txt', null, buffer, 0, out)).toBe(0);
    expect([...out]).toEqual([6, -1, 6]);
    expect(buffer.subarray(0, 6).toString()).toBe('hello\n');
  });

  it('leaves a file larger than the buffer open after its first bytes', () => {
    const buffer = Buffer.alloc(64);
    expect(calls.openFileAt(dirfd, 'big.txt', null, buffer, 0, out)).toBe(0);
    expect(out[0]).toBe(100);
    expect(out[2]).toBe(64);
    expect(out[1]).toBeGreaterThan(2);
    closeSync(out[1]!);
  });

  it('reads nothing of a file over maxBytes and keeps it open; an empty one is closed', () => {
    expect(calls.openFileAt(dirfd, 'big.txt', null, Buffer.alloc(64), 50, out)).toBe(0);
    expect(out[2]).toBe(0);
    closeSync(out[1]!);
    expect(calls.openFileAt(dirfd, 'empty', null, Buffer.alloc(64), 0, out)).toBe(0);
    expect([...out]).toEqual([0, -1, 0]);
  });

  it('follows no symlink, opens no FIFO (and does not block on one), and is not a directory', () => {
    expect(calls.openFileAt(dirfd, 'link', null, Buffer.alloc(8), 0, out)).toBe(ELOOP);
    expect(calls.openFileAt(dirfd, 'fifo', null, Buffer.alloc(8), 0, out)).toBe(EINVAL);
    expect(calls.openFileAt(dirfd, 'sub', null, Buffer.alloc(8), 0, out)).toBe(EINVAL);
    expect(calls.openFileAt(dirfd, 'missing', null, Buffer.alloc(8), 0, out)).toBe(ENOENT);
  });

  it('refuses a path, an empty name or a name with a NUL: one name below the descriptor only', () => {
    expect(calls.openFileAt(dirfd, '../etc/passwd', null, Buffer.alloc(8), 0, out)).toBe(EINVAL);
    expect(calls.openFileAt(dirfd, '', null, Buffer.alloc(8), 0, out)).toBe(EINVAL);
    expect(calls.openFileAt(dirfd, 'small.txt\0x', null, Buffer.alloc(8), 0, out)).toBe(EINVAL);
  });

  it("checks the reader's permission bits on the opened inode", () => {
    const stranger = Int32Array.from([4242, 4242]);
    expect(calls.openFileAt(dirfd, 'secret', stranger, Buffer.alloc(8), 0, out)).toBe(EACCES);
    expect(calls.openFileAt(dirfd, 'small.txt', stranger, Buffer.alloc(8), 0, out)).toBe(0);
    const owner = Int32Array.from([process.getuid!(), 4242]);
    expect(calls.openFileAt(dirfd, 'secret', owner, Buffer.alloc(8), 0, out)).toBe(0);
  });

  it('opens a name that is not UTF-8 by its bytes', () => {
    expect(calls.openFileAt(dirfd, Buffer.from([0x63, 0x61, 0x66, 0xe9]), null, Buffer.alloc(8), 0, out)).toBe(0);
    expect(out[0]).toBe(5);
  });
});

describe('openDirAt and listDir', () => {
  it('opens a child directory, and neither a symlink to one nor a file', () => {
    const fd = calls.openDirAt(dirfd, 'sub', null);
    expect(fd).toBeGreaterThan(2);
    closeSync(fd);
    // O_NOFOLLOW|O_DIRECTORY on a symlink: the kernel says ENOTDIR.
    expect(calls.openDirAt(dirfd, 'dirlink', null)).toBe(ENOTDIR);
    expect(calls.openDirAt(dirfd, 'small.txt', null)).toBe(ENOTDIR);
  });

  it('lists every entry with its type, symlinks and FIFOs as other, and leaves the descriptor usable', () => {
    // A name that is not UTF-8 (caf\xE9): the listing comes as bytes, that name's bytes exact.
    const listed = calls.listDir(dirfd, true, 65_536) as Buffer;
    expect(Buffer.isBuffer(listed)).toBe(true);
    const entries = listed.toString('latin1').split('/').sort();
    expect(entries).toEqual(['dsub', 'fbig.txt', 'fcaf\xE9', 'fempty', 'fsecret', 'fsmall.txt', 'odirlink', 'ofifo', 'olink']);
    expect(calls.listDir(dirfd, true, 65_536)).toEqual(listed);
    expect(calls.listDir(999_999, true, 65_536)).toBeLessThan(0);
    expect(calls.listDir(dirfd, true, 0)).toBe(EINVAL);
  });

  it('lists in byte order of the names, across many getdents blocks', () => {
    const big = mkdtempSync(join(tmpdir(), 'envd-list-order-'));
    try {
      // Byte order is not JavaScript's string order: U+1F600 (F0 9F 98 80) sorts after U+FF21 (EF BC A1) in bytes, before it in UTF-16.
      const names = ['\u{1F600}', '\uFF21', 'B', 'a', 'Z', '10', '9', ...Array.from({ length: 3_000 }, (_, i) => `file-${'x'.repeat(i % 40)}-${i}`)];
      for (const name of names) writeFileSync(join(big, name), '');
      const fd = openSync(big, constants.O_RDONLY | constants.O_DIRECTORY);
      try {
        const listed = (calls.listDir(fd, true, 1024 * 1024) as string).split('/').map((entry) => entry.slice(1));
        expect(listed).toEqual(names.map((name) => Buffer.from(name)).sort(Buffer.compare).map((name) => name.toString()));
        expect(listed.indexOf('\uFF21')).toBeLessThan(listed.indexOf('\u{1F600}'));
      } finally {
        closeSync(fd);
      }
    } finally {
      rmSync(big, { recursive: true, force: true });
    }
  });
});

describe('statAt', () => {
  it("gives lstat's mode, owner, size and mtime of a child, a symlink's own, and refuses a path", () => {
    const stats = new Float64Array(5);
    for (const name of ['small.txt', 'sub', 'link', 'secret']) {
      expect(calls.statAt(dirfd, name, stats)).toBe(0);
      const expected = lstatSync(join(dir, name));
      expect([...stats]).toEqual([expected.mode, expected.uid, expected.gid, expected.size, expected.mtimeMs]);
    }
    expect(calls.statAt(dirfd, Buffer.from([0x63, 0x61, 0x66, 0xe9]), stats)).toBe(0);
    expect(stats[3]).toBe(5);
    expect(calls.statAt(dirfd, 'missing', stats)).toBe(ENOENT);
    expect(calls.statAt(dirfd, 'sub/../small.txt', stats)).toBe(EINVAL);
    expect(calls.statAt(dirfd, 'small.txt', new Float64Array(2))).toBe(EINVAL);
  });
});

describe('countNewlines and findNeedle', () => {
  it('count and find as Buffer.indexOf does, at the edges', () => {
    expect(calls.countNewlines(Buffer.from('a\nb\n\nc'))).toBe(3);
    expect(calls.countNewlines(Buffer.alloc(0))).toBe(0);
    const text = Buffer.from('one createServer two createServer');
    for (const needle of ['createServer', 'one', 'two createServer', 'Server', 'x', 'createServers', 'e']) {
      expect(calls.findNeedle(text, Buffer.from(needle))).toBe(text.indexOf(needle));
    }
    expect(calls.findNeedle(Buffer.from('ab'), Buffer.from('abc'))).toBe(-1);
    expect(calls.findNeedle(text.subarray(4), Buffer.from('createServer'))).toBe(0);
  });
});
