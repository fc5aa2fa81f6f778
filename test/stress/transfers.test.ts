import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MiB, report, startStressEnvd, type StressEnvd } from './harness.js';

/** envd's RSS over its idle RSS, at most, whatever the sandbox does (the memory-budget rule, default settings). */
const BUDGET = 64 * MiB;

let target: StressEnvd;
beforeAll(async () => {
  target = await startStressEnvd();
});
afterAll(async () => target?.stop());

/** Samples envd's RSS every 50 ms while `work` runs; resolves with the peak. */
async function peakWhile(work: () => Promise<unknown>): Promise<number> {
  let peak = target.rss();
  const timer = setInterval(() => (peak = Math.max(peak, target.rss())), 50);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return Math.max(peak, target.rss());
}

describe('transfers under the memory budget', () => {
  it('8 concurrent 64 MiB uploads, then 8 concurrent downloads of them, stay within the budget and give memory back', async () => {
    await new Promise((r) => setTimeout(r, 1_000));
    const idle = target.rss();
    const bodies = Array.from({ length: 8 }, () => randomBytes(64 * MiB));
    const hashes = bodies.map((body) => createHash('sha256').update(body).digest('hex'));
    const uploadPeak = await peakWhile(() =>
      Promise.all(
        bodies.map(async (body, i) => {
          const response = await target.call('PUT', `/files/raw?path=${target.dir}/t${i}.bin`, undefined, { headers: { 'content-type': 'application/octet-stream' }, body });
          expect(response.status).toBe(200);
        }),
      ),
    );
    const downloadPeak = await peakWhile(() =>
      Promise.all(
        hashes.map(async (expected, i) => {
          const response = await target.call('GET', `/files/raw?path=${target.dir}/t${i}.bin`);
          const hash = createHash('sha256');
          for await (const chunk of response.body!) hash.update(chunk);
          expect(hash.digest('hex')).toBe(expected);
        }),
      ),
    );
    await new Promise((r) => setTimeout(r, 2_000));
    const after = target.rss();
    report('8 × 64 MiB up and down', { idleMiB: idle / MiB, uploadPeakMiB: uploadPeak / MiB, downloadPeakMiB: downloadPeak / MiB, afterMiB: after / MiB });
    expect(uploadPeak - idle).toBeLessThan(BUDGET);
    expect(downloadPeak - idle).toBeLessThan(BUDGET);
    // What V8 and glibc keep of the transfers' buffers once they are done (measured +20 MiB).
    expect(after - idle).toBeLessThan(BUDGET / 2);
  }, 120_000);

  it('4 concurrent archive downloads of a 2,000-file tree, then 4 uploads of that archive, stay within the budget and give the same bytes', async () => {
    const tree = join(target.dir, 'tree');
    const small = randomBytes(8 * 1024);
    for (let i = 0; i < 2_000; i++) {
      if (i < 20) mkdirSync(join(tree, `d${i}`), { recursive: true });
      writeFileSync(join(tree, `d${i % 20}`, `f${i}`), small);
    }
    for (let i = 0; i < 4; i++) writeFileSync(join(tree, `big${i}`), randomBytes(8 * MiB));
    await new Promise((r) => setTimeout(r, 1_000));
    const idle = target.rss();
    const archives: Buffer[] = [];
    const downloadPeak = await peakWhile(() =>
      Promise.all(
        [0, 1, 2, 3].map(async (i) => {
          const response = await target.call('GET', `/files/archive?path=${encodeURIComponent(tree)}`);
          expect(response.status).toBe(200);
          archives[i] = Buffer.from(await response.arrayBuffer());
        }),
      ),
    );
    const sha = createHash('sha256').update(archives[0]!).digest('hex');
    for (const archive of archives) expect(createHash('sha256').update(archive).digest('hex')).toBe(sha);
    const uploadPeak = await peakWhile(() =>
      Promise.all(
        [0, 1, 2, 3].map(async (i) => {
          const response = await target.call('PUT', `/files/archive?path=${encodeURIComponent(join(target.dir, `copy${i}`))}`, undefined, { headers: { 'content-type': 'application/x-tar' }, body: archives[i] as unknown as BodyInit });
          expect(response.status).toBe(200);
          expect(await response.json()).toMatchObject({ files: 2_004, sha256: sha });
        }),
      ),
    );
    expect(readFileSync(join(target.dir, 'copy3', 'big2')).equals(readFileSync(join(tree, 'big2')))).toBe(true);
    report('4 archives of 2,004 files / 48 MiB down and up', { idleMiB: idle / MiB, downloadPeakMiB: downloadPeak / MiB, uploadPeakMiB: uploadPeak / MiB });
    expect(downloadPeak - idle).toBeLessThan(BUDGET);
    expect(uploadPeak - idle).toBeLessThan(BUDGET);
  }, 120_000);
});
