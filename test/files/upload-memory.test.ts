import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { UPLOAD_LIMIT } from '../../src/files/upload.js';
import { putRaw, zeros } from '../helpers/files.js';
import { rssBytes, startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';

/**
 * The bound. envd runs with its deployed V8 flags (startEnvdProcess
 * passes package.json "envd.nodeFlags"): with the default 16 MiB young
 * generation, the 64 KiB socket buffers of an upload pile up to ~70 MiB
 * before V8 collects them; with a 1 MiB one they are collected every ~1 MiB.
 */
const RSS_GROWTH_BOUND = 64 * 1024 * 1024;

const token = randomBytes(16).toString('hex');
let envd: EnvdProcess;
let dir: string;
beforeAll(async () => {
  envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: token });
  dir = mkdtempSync(join(tmpdir(), 'envd-mem-'));
});
afterAll(async () => {
  await envd?.stop();
  rmSync(dir, { recursive: true, force: true });
});

it('accepts an upload of exactly 500 MiB while its RSS stays far below the upload size (the body is never buffered)', async () => {
  const pid = envd.child.pid!;
  const target = join(dir, 'big.bin');
  // Warm up the upload path so that code loading is not counted as upload memory.
  expect((await putRaw(envd.url, token, `path=${encodeURIComponent(target)}`, Buffer.from('warm'))).status).toBe(200);
  const baseline = rssBytes(pid);
  let peak = baseline;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssBytes(pid));
  }, 25);
  try {
    const result = await putRaw(envd.url, token, `path=${encodeURIComponent(target)}`, zeros(UPLOAD_LIMIT));
    expect(result).toMatchObject({ status: 200, body: { path: target, size: UPLOAD_LIMIT } });
  } finally {
    clearInterval(sampler);
  }
  expect(statSync(target).size).toBe(UPLOAD_LIMIT);
  expect(readdirSync(dir)).toEqual(['big.bin']);
  expect(peak - baseline).toBeLessThan(RSS_GROWTH_BOUND);
}, 120_000);
