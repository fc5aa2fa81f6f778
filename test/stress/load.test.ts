import autocannon from 'autocannon';
import { writeFileSync, mkdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MiB, report, settleFds, startStressEnvd, type StressEnvd } from './harness.js';

const DURATION_S = Number(process.env.STRESS_LOAD_SECONDS ?? 30);
let target: StressEnvd;
beforeAll(async () => {
  target = await startStressEnvd();
});
afterAll(async () => target?.stop());

describe('load', () => {
  it(`holds 100 connections for ${DURATION_S} s over a mix of routes with no error`, async () => {
    const dir = `${target.dir}/load`;
    mkdirSync(dir);
    for (let i = 0; i < 20; i++) writeFileSync(`${dir}/f${i}.txt`, `file ${i}\n`.repeat(100));
    const fdsBefore = target.fds();
    const rssBefore = target.rss();
    const auth = { authorization: `Bearer ${target.token}` };
    const json = { ...auth, 'content-type': 'application/json' };
    let peak = rssBefore;
    const sampler = setInterval(() => (peak = Math.max(peak, target.rss())), 200);
    const result = await autocannon({
      url: target.url,
      connections: 100,
      duration: DURATION_S,
      requests: [
        { method: 'POST', path: '/commands', headers: json, body: JSON.stringify({ cmd: 'echo hi' }) },
        { method: 'PUT', path: `/files/raw?path=${dir}/up.bin`, headers: { ...auth, 'content-type': 'application/octet-stream' }, body: 'x'.repeat(4096) },
        { method: 'GET', path: `/files?path=${dir}/f3.txt`, headers: auth },
        { method: 'GET', path: `/files/info?path=${dir}/f4.txt`, headers: auth },
        { method: 'GET', path: `/files/list?path=${dir}`, headers: auth },
        { method: 'GET', path: `/files/raw?path=${dir}/f5.txt`, headers: auth },
        { method: 'GET', path: '/health' },
      ],
    });
    clearInterval(sampler);
    const fdsAfter = await settleFds(target, fdsBefore, 4);
    report('load', {
      requests: result.requests.total, rps: result.requests.average, errors: result.errors, timeouts: result.timeouts,
      non2xx: result.non2xx, p99ms: result.latency.p99, rssBeforeMiB: rssBefore / MiB, peakMiB: peak / MiB, fdsBefore, fdsAfter,
    });
    expect(result.requests.total).toBeGreaterThan(1000);
    expect(result.errors).toBe(0);
    expect(result.timeouts).toBe(0);
    expect(result.non2xx).toBe(0);
    expect(peak - rssBefore).toBeLessThan(256 * MiB);
    expect(fdsAfter).toBeLessThanOrEqual(fdsBefore + 4);
  }, (DURATION_S + 60) * 1000);
});
