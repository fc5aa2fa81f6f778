// start-up: from exec to the first 200 from /health (polled as fast as
// connections are refused), for `node dist/envd.js` and the single executable
// `dist/envd`, against `node -e` of an empty http server; then each one's idle
// RSS a second after it answered.
import { existsSync } from 'node:fs';
import { atMost, makeRow, missingRow, printRow, runIfMain } from './lib/figure.mjs';
import { anonBytes, ENVD_SEA, rssBytes, startEnvd, startServer } from './lib/envd-process.mjs';
import { dropFromPageCache, envdFiles } from './lib/page-cache.mjs';
import { median } from './lib/stats.mjs';

// Issue 29: ratios to bare Node in the same run, and the Bun-based peer's published idle (44.4 MiB).
const START_GOAL = atMost(2.0);
const RSS_GOAL = { text: '≤ bare Node + 4 MiB and ≤ 44 MiB', check: (row) => row.envd <= row.baseline + 4 && row.envd <= 44 };
const ANON_GOAL = atMost(12, 'MiB');
const MIB = 1024 * 1024;
const EMPTY_SERVER = "require('http').createServer((q, s) => s.end('ok')).listen(+process.env.PORT, '127.0.0.1')";
const SETTLE_MS = 1_000;
/** Idle RSS is read on this many of the last rounds; the row gives their median. */
const RSS_ROUNDS = 3;

/** Starts a server, keeps its time to first 200, and on the last rounds its RSS once settled. */
async function measure(start, samples, readRss) {
  const server = await start();
  try {
    samples.ms.push(server.startMs);
    if (readRss) {
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      samples.rss.push(rssBytes(server.pid));
      samples.anon.push(anonBytes(server.pid));
    }
  } finally {
    await server.stop();
  }
}

export async function run({ quick = false } = {}) {
  const rounds = quick ? 5 : 20;
  const hasSea = existsSync(ENVD_SEA);
  const sides = {
    bundle: { ms: [], rss: [], anon: [], start: () => startEnvd() },
    sea: hasSea ? { ms: [], rss: [], anon: [], start: () => startEnvd({ executable: true }) } : undefined,
    baseline: { ms: [], rss: [], anon: [], start: () => startServer({ args: ['-e', EMPTY_SERVER], usePortFlag: false }) },
  };
  dropFromPageCache([...envdFiles(), process.execPath]);
  // One warm-up start of each (disk cache), then the sides in turn.
  for (let round = -1; round < rounds; round++) {
    for (const side of Object.values(sides)) {
      if (!side) continue;
      const samples = round < 0 ? { ms: [], rss: [], anon: [] } : side;
      await measure(side.start, samples, round >= rounds - RSS_ROUNDS);
    }
  }
  const base = sides.baseline;
  const note = `${rounds} starts each, median`;
  const rssNote = `VmRSS ${SETTLE_MS} ms after the first 200, median of the last ${RSS_ROUNDS} starts (files dropped from the page cache first)`;
  const rows = [
    makeRow({ name: 'start-up (node dist/envd.js)', unit: 'ms', envd: median(sides.bundle.ms), baseline: median(base.ms), goal: START_GOAL, note }),
    hasSea
      ? makeRow({ name: 'start-up (dist/envd)', unit: 'ms', envd: median(sides.sea.ms), baseline: median(base.ms), goal: START_GOAL, note })
      : missingRow({ name: 'start-up (dist/envd)', unit: 'ms', goal: START_GOAL, baseline: median(base.ms), note: 'dist/envd missing: no single executable built' }),
    makeRow({ name: 'idle RSS (node dist/envd.js)', unit: 'MiB', envd: median(sides.bundle.rss) / MIB, baseline: median(base.rss) / MIB, goal: RSS_GOAL, note: rssNote }),
    hasSea
      ? makeRow({ name: 'idle RSS (dist/envd)', unit: 'MiB', envd: median(sides.sea.rss) / MIB, baseline: median(base.rss) / MIB, goal: RSS_GOAL, note: rssNote })
      : missingRow({ name: 'idle RSS (dist/envd)', unit: 'MiB', goal: RSS_GOAL, baseline: median(base.rss) / MIB, note: 'dist/envd missing: no single executable built' }),
    makeRow({ name: 'idle anonymous memory (node dist/envd.js)', unit: 'MiB', envd: median(sides.bundle.anon) / MIB, baseline: median(base.anon) / MIB, goal: ANON_GOAL, note: 'RssAnon: the part no page cache shares' }),
    ...(hasSea
      ? [makeRow({ name: 'idle anonymous memory (dist/envd)', unit: 'MiB', envd: median(sides.sea.anon) / MIB, baseline: median(base.anon) / MIB, goal: ANON_GOAL, note: 'RssAnon: the part no page cache shares' })]
      : []),
  ];
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
