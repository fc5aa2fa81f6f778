// start-up: from exec to the first 200 from /health (polled as fast as
// connections are refused), for `node dist/envd.js` and the single executable
// `dist/envd`, against `node -e` of an empty http server; then each one's idle
// RSS a second after it answered.
import { existsSync, statSync } from 'node:fs';
import { atMost, makeRow, missingRow, printRow, runIfMain } from './lib/figure.mjs';
import { ENVD_SEA, rssBytes, startEnvd, startServer } from './lib/envd-process.mjs';
import { median } from './lib/stats.mjs';

const START_GOAL = atMost(150, 'ms');
const RSS_GOAL = atMost(60, 'MiB');
const MIB = 1024 * 1024;
const EMPTY_SERVER = "require('http').createServer((q, s) => s.end('ok')).listen(+process.env.PORT, '127.0.0.1')";
const SETTLE_MS = 1_000;
/** A freshly written executable maps more of its own pages for a few minutes (README, Performance). */
const FRESH_BUILD_S = 300;

/** Starts a server, keeps its time to first 200, and on the last round its RSS once settled. */
async function measure(start, samples, last) {
  const server = await start();
  try {
    samples.ms.push(server.startMs);
    if (last) {
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      samples.rss = rssBytes(server.pid);
    }
  } finally {
    await server.stop();
  }
}

export async function run({ quick = false } = {}) {
  const rounds = quick ? 5 : 20;
  const hasSea = existsSync(ENVD_SEA);
  const sides = {
    bundle: { ms: [], start: () => startEnvd() },
    sea: hasSea ? { ms: [], start: () => startEnvd({ executable: true }) } : undefined,
    baseline: { ms: [], start: () => startServer({ args: ['-e', EMPTY_SERVER], usePortFlag: false }) },
  };
  // One warm-up start of each (disk cache), then the sides in turn.
  for (let round = -1; round < rounds; round++) {
    for (const side of Object.values(sides)) {
      if (!side) continue;
      const samples = round < 0 ? { ms: [] } : side;
      await measure(side.start, samples, round === rounds - 1);
    }
  }
  const base = sides.baseline;
  const note = `${rounds} starts each, median`;
  const rows = [
    makeRow({ name: 'start-up (node dist/envd.js)', unit: 'ms', envd: median(sides.bundle.ms), baseline: median(base.ms), goal: START_GOAL, note }),
    hasSea
      ? makeRow({ name: 'start-up (dist/envd)', unit: 'ms', envd: median(sides.sea.ms), baseline: median(base.ms), goal: START_GOAL, note })
      : missingRow({ name: 'start-up (dist/envd)', unit: 'ms', goal: START_GOAL, baseline: median(base.ms), note: 'dist/envd missing: no single executable built' }),
    makeRow({ name: 'idle RSS (node dist/envd.js)', unit: 'MiB', envd: sides.bundle.rss / MIB, baseline: base.rss / MIB, goal: RSS_GOAL, note: `VmRSS ${SETTLE_MS} ms after the first 200` }),
    hasSea
      ? makeRow({ name: 'idle RSS (dist/envd)', unit: 'MiB', envd: sides.sea.rss / MIB, baseline: base.rss / MIB, goal: RSS_GOAL, note: `VmRSS ${SETTLE_MS} ms after the first 200${freshBuildNote()}` })
      : missingRow({ name: 'idle RSS (dist/envd)', unit: 'MiB', goal: RSS_GOAL, baseline: base.rss / MIB, note: 'dist/envd missing: no single executable built' }),
  ];
  rows.forEach(printRow);
  return rows;
}

/** Says so when dist/envd was written minutes ago: it then reads up to ~18 MiB high. */
function freshBuildNote() {
  const ageS = (Date.now() - statSync(ENVD_SEA).mtimeMs) / 1000;
  return ageS < FRESH_BUILD_S ? `; dist/envd was written ${Math.round(ageS)} s ago and reads high until its page cache settles (~${FRESH_BUILD_S / 60} min)` : '';
}

await runIfMain(import.meta.url, run);
