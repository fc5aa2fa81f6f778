import { createHash, randomBytes } from 'node:crypto';
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
});
