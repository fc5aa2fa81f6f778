import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MiB, report, settleFds, startStressEnvd, type StressEnvd } from './harness.js';

// A sandbox user's directory of 200,000 empty files (seconds to make) must not
// grow envd past a fixed budget when it is searched or listed by find: the walk
// reads large directories in parts and makes no array of their entries
// (src/native/list-dir.c, src/files/search/walk.ts). Before, a find over it
// took +55 MiB of anonymous memory and a search +71 MiB. What a search still
// takes (+37 MiB measured) is its batches' entries (a path string and an
// object a file), alive while a batch is on the thread pool and so promoted to
// V8's old generation until its next full collection: bounded by the files'
// count, not held, and under the soak's 64 MiB.

const FILES = 200_000;
const FIND_BUDGET = 16 * MiB;
const SEARCH_BUDGET = 48 * MiB;

let target: StressEnvd;
let tree: string;

const anon = (pid: number) => Number(/RssAnon:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

/** Runs the request to its end, sampling envd's anonymous memory every 5 ms; resolves with the peak and the answer's text. */
async function peakDuring(method: string, path: string, body?: unknown): Promise<{ peak: number; text: string }> {
  let peak = anon(target.pid);
  const sampler = setInterval(() => (peak = Math.max(peak, anon(target.pid))), 5);
  try {
    const response = await target.call(method, path, body);
    const text = await response.text();
    expect(response.status).toBe(200);
    return { peak: Math.max(peak, anon(target.pid)), text };
  } finally {
    clearInterval(sampler);
  }
}

describe('search and find over a directory of 200,000 files (dist/envd bundle)', () => {
  beforeAll(async () => {
    target = await startStressEnvd();
    tree = join(target.dir, 'tree');
    mkdirSync(join(tree, 'many'), { recursive: true });
    for (let i = 0; i < FILES; i++) writeFileSync(join(tree, 'many', `entry-number-${String(i).padStart(7, '0')}.txt`), '');
    writeFileSync(join(tree, 'many', 'last.txt'), 'needle\n');
  }, 120_000);
  afterAll(async () => target?.stop());

  it(`find stays within ${FIND_BUDGET / MiB} MiB over idle and search within ${SEARCH_BUDGET / MiB} MiB, and both give every descriptor back`, async () => {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const fds = target.fds();
    const idle = anon(target.pid);
    const found = await peakDuring('GET', `/files/find?path=${encodeURIComponent(tree)}&glob=last.txt&max_results=1000000`);
    expect(JSON.parse(found.text).entries.map((entry: { name: string }) => entry.name)).toEqual(['last.txt']);
    const searched = await peakDuring('POST', '/files/search', { path: tree, pattern: 'needle', literal: true });
    const lines = searched.text.trim().split('\n').map((line) => JSON.parse(line));
    expect(lines.at(-1)).toMatchObject({ type: 'summary', files_matched: 1, truncated: false });
    report('200,000-file directory', { findPeakAnonMiB: (found.peak - idle) / MiB, searchPeakAnonMiB: (searched.peak - idle) / MiB });
    expect(found.peak - idle).toBeLessThan(FIND_BUDGET);
    expect(searched.peak - idle).toBeLessThan(SEARCH_BUDGET);
    expect(await settleFds(target, fds)).toBeLessThanOrEqual(fds + 2);
  }, 120_000);
});
