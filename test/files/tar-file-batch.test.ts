// The tar writer's batched file calls (src/native/file-batch.c through
// src/files/tar/file-batch.ts): the same archive as node:fs writes, the same
// refusals (a symlink, a FIFO or a directory where a file was listed is never
// read, and a FIFO never waited on), every descriptor closed, a file that
// shrank padded with zeros.
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { constants as os, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { NOT_REGULAR, useFileBatches } from '../../src/files/tar/file-batch.js';
import { tarPieces } from '../../src/files/tar/write.js';
import type { Logger } from '../../src/logger.js';
import { fileBatchCalls } from '../../src/native/malloc-trim.js';

const dir = mkdtempSync(join(tmpdir(), 'envd-file-batch-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
/** The addon's calls, as main.ts loads them; a missing addon fails here rather than testing node:fs twice. */
const refuse = { warn: (_: unknown, message: string) => { throw new Error(`${message}: run node build.mjs first`); } } as unknown as Logger;
const native = fileBatchCalls(dir, refuse)!;
useFileBatches(native);
afterEach(() => useFileBatches(native));

const openDescriptors = () => readdirSync('/proc/self/fd').length;

async function collect(pieces: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const piece of pieces) chunks.push(Buffer.from(piece));
  return Buffer.concat(chunks);
}

function makeTree(name: string): string {
  const root = join(dir, name);
  for (let d = 0; d < 5; d++) {
    mkdirSync(join(root, `d${d}`), { recursive: true });
    for (let f = 0; f < 90; f++) writeFileSync(join(root, `d${d}`, `f${f}`), Buffer.alloc((f * 997) % 20_000, f));
  }
  writeFileSync(join(root, 'big.bin'), Buffer.alloc(3 * 1024 * 1024 + 5, 7));
  writeFileSync(join(root, 'empty'), '');
  symlinkSync('/etc/passwd', join(root, 'abs-link'));
  execFileSync('mkfifo', [join(root, 'fifo')]);
  return root;
}

describe('the tar writer with batched file calls', () => {
  it('writes byte for byte the archive node:fs writes, which GNU tar reads back', async () => {
    const root = makeTree('same');
    expect(native).toBeDefined();
    const batched = await collect(tarPieces(root));
    useFileBatches(undefined);
    const plain = await collect(tarPieces(root));
    expect(batched.equals(plain)).toBe(true);
    const listed = execFileSync('tar', ['-tvf', '-'], { input: batched, encoding: 'utf8' });
    expect(listed).toContain('d4/f89');
    expect(listed).toContain('abs-link -> /etc/passwd');
    expect(listed).not.toContain('fifo');
  });

  it('refuses what is no regular file at once: a symlink (ELOOP), a FIFO and a directory (not read), a missing name (ENOENT)', async () => {
    const root = makeTree('kinds');
    const before = openDescriptors();
    const dirfd = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY);
    try {
      const result = await native.openEntries(dirfd, ['abs-link', 'fifo', 'd0', 'missing', 'empty']);
      expect(Array.from(result.subarray(0, 24)).filter((_, i) => i % 6 === 0)).toEqual([-os.errno.ELOOP, NOT_REGULAR, NOT_REGULAR, -os.errno.ENOENT]);
      const fd = result[24]!;
      expect(fd).toBeGreaterThan(0);
      expect(result[28]).toBe(0); // its size
      // readFiles closes what it read.
      const buffer = Buffer.alloc(512, 1);
      expect(Array.from(await native.readFiles(buffer, new Float64Array([fd, 0, 0, 512])))).toEqual([0]);
      expect(buffer.equals(Buffer.alloc(512))).toBe(true);
    } finally {
      closeSync(dirfd);
    }
    expect(openDescriptors()).toBe(before);
  });

  it('pads a file that shrank after its fstat with zeros, and closes it', async () => {
    const file = join(dir, 'shrinks');
    writeFileSync(file, Buffer.alloc(1000, 9));
    const fd = openSync(file, 'r');
    truncateSync(file, 100);
    const buffer = Buffer.alloc(1024, 1);
    expect(Array.from(await native.readFiles(buffer, new Float64Array([fd, 0, 1000, 1024])))).toEqual([100]);
    expect(buffer.subarray(0, 100).equals(Buffer.alloc(100, 9))).toBe(true);
    expect(buffer.subarray(100).equals(Buffer.alloc(924))).toBe(true);
    expect(() => closeSync(fd)).toThrow(/EBADF/);
  });

  it('closes every descriptor when the reader leaves after the first piece', async () => {
    const root = makeTree('left');
    const before = openDescriptors();
    const pieces = tarPieces(root, undefined, undefined, 64 * 1024);
    await pieces.next();
    await pieces.return(undefined);
    expect(openDescriptors()).toBe(before);
  });
});
