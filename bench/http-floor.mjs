// HTTP floor: GET /health requests per second with 10 connections (autocannon,
// in this process) against a bare fastify app with one route, in turn. Twice:
// straight after envd starts, and on an envd that was idle first, as a guest's
// envd is when its first work comes: by then envd's memory reclaim has learned
// its idle floor (src/memory-reclaim.ts), and a reclaim that mistook steady load
// for "after load" showed only there (0.57-0.68x).
import autocannon from 'autocannon';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { atLeast, makeRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { startEnvd, startServer } from './lib/envd-process.mjs';
import { interleave, median } from './lib/stats.mjs';

const GOAL = atLeast(0.8);
const CONNECTIONS = 10;
const BARE = fileURLToPath(new URL('./lib/bare-fastify.mjs', import.meta.url));
/** Longer than the reclaim's first tick (2 s) plus its first wait (4 s). */
const IDLE_FIRST_MS = 8_000;

async function requestsPerSecond(url, seconds) {
  const result = await autocannon({ url: `${url}/health`, connections: CONNECTIONS, duration: seconds });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return result.requests.average;
}

export async function run({ quick = false, envd } = {}) {
  // Many short turns rather than a few long ones: on a shared machine the
  // neighbours' load comes and goes, and short turns spread it over both sides.
  const seconds = quick ? 1 : 2;
  const rounds = quick ? 5 : 15;
  const bare = await startServer({ args: [BARE], usePortFlag: false });
  const measure = async (name, server) => {
    const samples = await interleave({ rounds, warmup: 1, a: () => requestsPerSecond(server.url, seconds), b: () => requestsPerSecond(bare.url, seconds) });
    const note = `autocannon, ${CONNECTIONS} connections, ${rounds} × ${seconds} s per side`;
    return makeRow({ name, unit: 'req/s', envd: median(samples.a), baseline: median(samples.b), goal: GOAL, note });
  };
  try {
    const rows = await withEnvd({ envd }, async (server) => [await measure('HTTP floor (GET /health)', server)], () => []);
    const idle = await startEnvd();
    try {
      await sleep(IDLE_FIRST_MS);
      rows.push(await measure(`HTTP floor after ${IDLE_FIRST_MS / 1000} s idle`, idle));
    } finally {
      await idle.stop();
    }
    rows.forEach(printRow);
    return rows;
  } finally {
    await bare.stop();
  }
}

await runIfMain(import.meta.url, run);
