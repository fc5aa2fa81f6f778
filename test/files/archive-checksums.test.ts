import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChecksumMismatch, FILES_PER_MANIFEST, verifyingChecksums } from '../../src/files/tar/checksums.js';
import { readTar, type TarVisitor } from '../../src/files/tar/read.js';
import { startServer, type TestServer } from '../helpers/server.js';

let server: TestServer;
let dir: string;
let tree: string;
/** Files in the tree: more than one manifest's worth, a large one (read in pieces), an empty one. */
const SMALL_FILES = FILES_PER_MANIFEST + 40;

beforeAll(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), 'envd-archive-sums-'));
  tree = join(dir, 'tree');
  mkdirSync(join(tree, 'sub'), { recursive: true });
  for (let index = 0; index < SMALL_FILES; index++) writeFileSync(join(tree, 'sub', `f${String(index).padStart(3, '0')}.txt`), `file ${index}\n`.repeat(index % 7));
  writeFileSync(join(tree, 'large.bin'), randomBytes(2_500_000));
  writeFileSync(join(tree, 'victim.txt'), 'A'.repeat(5000));
  symlinkSync('large.bin', join(tree, 'link'));
});
afterAll(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function download(query: string): Promise<Buffer> {
  const response = await server.call('GET', `/files/archive?path=${encodeURIComponent(tree)}&${query}`);
  expect(response.status).toBe(200);
  return Buffer.from(await response.arrayBuffer());
}

/** Reads `bytes` through verifyingChecksums; returns the files seen and the manifests met. */
async function verify(bytes: Buffer): Promise<{ files: number; manifests: number }> {
  let files = 0;
  let manifests = 0;
  const counting: TarVisitor = {
    entry: (header) => void (header.type === 'file' && files++),
    data: () => {},
    end: () => {},
  };
  const checking = verifyingChecksums(counting);
  const global = checking.global!.bind(checking);
  checking.global = (records) => {
    manifests++;
    global(records);
  };
  await readTar((async function* () {
    yield bytes;
  })(), checking);
  return { files, manifests };
}

describe('GET /files/archive?sha256=true', () => {
  it("carries every file's sha256, checked file by file, in manifests of FILES_PER_MANIFEST", async () => {
    const bytes = await download('sha256=true');
    expect(await verify(bytes)).toEqual({ files: SMALL_FILES + 2, manifests: Math.ceil((SMALL_FILES + 2) / FILES_PER_MANIFEST) });
    // tar.gz carries them the same way
    expect((await verify(gunzipSync(await download('sha256=true&format=tar.gz')))).files).toBe(SMALL_FILES + 2);
  });

  it('is a tar GNU tar extracts without a word, identical to the tree', async () => {
    const out = join(dir, 'gnu');
    mkdirSync(out);
    const extracted = spawnSync('tar', ['-x', '-C', out], { input: await download('sha256=true'), encoding: 'utf8' });
    expect({ status: extracted.status, stderr: extracted.stderr }).toEqual({ status: 0, stderr: '' });
    for (const name of ['large.bin', 'victim.txt', 'sub/f010.txt', 'sub/f000.txt']) expect(readFileSync(join(out, name)).equals(readFileSync(join(tree, name))), name).toBe(true);
  });

  it.skipIf(!existsSync('/usr/bin/python3'))("is a tar Python's tarfile reads whole (a pax header is never the last thing in it)", async () => {
    const listed = spawnSync('/usr/bin/python3', ['-c', 'import sys, tarfile; print(len(tarfile.open(fileobj=sys.stdin.buffer, mode="r|").getmembers()))'], { input: await download('sha256=true'), encoding: 'utf8' });
    // Every file, the link, sub/ and the closing "./".
    expect({ status: listed.status, stderr: listed.stderr, members: listed.stdout.trim() }).toEqual({ status: 0, stderr: '', members: String(SMALL_FILES + 2 + 3) });
  });

  it('is refused by the checker when one byte of a file changed on the way, naming the file', async () => {
    const bytes = await download('sha256=true');
    const at = bytes.indexOf('A'.repeat(64));
    expect(at).toBeGreaterThan(0);
    bytes[at + 10] = 'B'.charCodeAt(0);
    await expect(verify(bytes)).rejects.toThrow(ChecksumMismatch);
    await expect(verify(bytes)).rejects.toThrow(/^victim\.txt: the bytes received \(sha256 [0-9a-f]{12}…\) are not those envd sent \(sha256 [0-9a-f]{12}…\)$/);
  });

  it('is refused by the checker when its last manifest is missing, and plain archives carry none', async () => {
    const bytes = await download('sha256=true');
    // The last manifest is the 'g' header just before the two end-of-archive blocks: cut it out.
    const last = bytes.lastIndexOf('pax_global_header');
    const cut = Buffer.concat([bytes.subarray(0, last), Buffer.alloc(1024)]);
    await expect(verify(cut)).rejects.toThrow(/the archive ended without the checksums of \d+ files/);
    const plain = await download('format=tar');
    expect(plain.includes('envd-sha256')).toBe(false);
    await expect(verify(plain)).rejects.toThrow(/more than 256 files without a checksum/);
  });
});
