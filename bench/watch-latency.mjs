// watch latency: from a file write to the `change` event that names it, over
// an open POST /files/watch stream, one write at a time. No baseline.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { atMost, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { percentile } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';
import { openWatch } from './lib/watch.mjs';

const GOAL = atMost(50, 'ms');
const EVENT_DEADLINE_MS = 5_000;
const GAP_MS = 20;

export async function run({ quick = false, envd } = {}) {
  const writes = quick ? 40 : 200;
  const dir = makeTempDir('watch');
  try {
    const rows = await withEnvd(
      { envd },
      async (server) => {
        const waiting = new Map();
        const watch = await openWatch(server, dir, (change) => waiting.get(change.path)?.(performance.now()));
        const samples = [];
        try {
          for (let i = 0; i < writes; i++) {
            const path = join(dir, `f${i % 10}.txt`);
            const seen = new Promise((resolve, reject) => {
              const timer = setTimeout(() => reject(new Error(`no change event for ${path} within ${EVENT_DEADLINE_MS} ms`)), EVENT_DEADLINE_MS);
              waiting.set(path, (at) => {
                clearTimeout(timer);
                waiting.delete(path);
                resolve(at);
              });
            });
            const start = performance.now();
            writeFileSync(path, `write ${i}\n`);
            samples.push((await seen) - start);
            await new Promise((r) => setTimeout(r, GAP_MS));
          }
        } finally {
          await watch.close();
        }
        const note = `${writes} writes (create, then modify) one at a time; p99 ${percentile(samples, 0.99).toFixed(1)} ms`;
        return [makeRow({ name: 'watch latency p50', unit: 'ms', envd: percentile(samples, 0.5), goal: GOAL, note })];
      },
      (why) => [missingRow({ name: 'watch latency p50', unit: 'ms', goal: GOAL, note: why })],
    );
    rows.forEach(printRow);
    return rows;
  } finally {
    removeTempDir(dir);
  }
}

await runIfMain(import.meta.url, run);
