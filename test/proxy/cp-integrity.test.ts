import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, cpSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/main.js';
import { startBurstyProxy, type BurstyProxy } from '../helpers/bursty-proxy.js';
import { startServer, type TestServer } from '../helpers/server.js';

/** Each way: enough runs that a buffer reused too early (issue 44: 1 upload in 6 broke) cannot slip through. */
const RUNS = 200;

let server: TestServer;
let proxy: BurstyProxy;
let dir: string;
let source: string;
let want: Map<string, string>;

/** Every regular file under `root` by relative path, with the sha256 of its contents. */
function hashes(root: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    found.set(relative(root, path), createHash('sha256').update(readFileSync(path)).digest('hex'));
  }
  return found;
}

/** A small tree that still spans several of the tar writer's 1 MiB pieces: many small text files between random binary ones. */
function makeTree(root: string): void {
  for (let d = 0; d < 4; d++) {
    const sub = join(root, `dir${d}`, 'nested');
    mkdirSync(sub, { recursive: true });
    for (let f = 0; f < 5; f++) writeFileSync(join(sub, `text${f}.d.ts`), `export declare const value${d}_${f}: string; // ${'x'.repeat(f * 700)}\n`);
    for (let f = 0; f < 2; f++) writeFileSync(join(root, `dir${d}`, `blob${f}.bin`), randomBytes(60_000 + d * 3000 + f * 511));
  }
  writeFileSync(join(root, 'large.bin'), randomBytes(1_100_000));
}

beforeAll(async () => {
  server = await startServer();
  proxy = await startBurstyProxy(new URL(server.url), 44);
  dir = mkdtempSync(join(tmpdir(), 'envd-cp-integrity-'));
  source = join(dir, 'source');
  makeTree(source);
  want = hashes(source);
});
afterAll(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await proxy?.close();
  await server?.close();
});

const env = () => ({ ENVD_URL: proxy.url, ENVD_TOKEN: server.token });

describe('envd cp through a proxy that reads in bursts (issue 44)', () => {
  it(`uploads a tree ${RUNS} times, each byte-exact by sha256 of every file`, { timeout: 600_000 }, async () => {
    expect(want.size).toBe(4 * 7 + 1);
    for (let run = 0; run < RUNS; run++) {
      const target = join(dir, `up-${run}`);
      expect(await runCli('cp', [source, `:${target}`], env()), `upload ${run}`).toBe(0);
      expect(hashes(target), `upload ${run}`).toEqual(want);
      rmSync(target, { recursive: true });
    }
  });

  it(`downloads a tree ${RUNS} times, each byte-exact by sha256 of every file`, { timeout: 600_000 }, async () => {
    const there = join(dir, 'there');
    cpSync(source, there, { recursive: true });
    for (let run = 0; run < RUNS; run++) {
      const target = join(dir, `down-${run}`);
      expect(await runCli('cp', [`:${there}`, target], env()), `download ${run}`).toBe(0);
      expect(hashes(target), `download ${run}`).toEqual(want);
      rmSync(target, { recursive: true });
    }
  });

  it('uploads and downloads a binary file byte-exact, checked against envd\'s sha256 both ways', async () => {
    const file = join(source, 'large.bin');
    expect(await runCli('cp', [file, `:${join(dir, 'one.bin')}`], env())).toBe(0);
    expect(await runCli('cp', [`:${join(dir, 'one.bin')}`, join(dir, 'back.bin')], env())).toBe(0);
    expect(readFileSync(join(dir, 'back.bin')).equals(readFileSync(file))).toBe(true);
  });
});
