// RSS growth under output storms, on dist/envd (what guests run): 8 background
// commands printing 100 MB each that nobody reads or waits for, and 60 stream
// clients that stop reading a fast command. Goal: envd's RSS at most 64 MiB over
// its own idle RSS, at the peak, in both.
import { postJson, send } from './lib/client.mjs';
import { stalledStream } from './lib/stalled-stream.mjs';
import { atMost, makeRow, printRow, runIfMain } from './lib/figure.mjs';
import { rssBytes, sampleRss, startEnvd } from './lib/envd-process.mjs';

const GOAL = atMost(64, 'MiB');
// Commands run as a plain user: root's login shell here runs pyenv's rehash under a lock (README, Performance).
const BENCH_USER = 'nobody';
const MIB = 1024 * 1024;
const settle = (ms = 1_000) => new Promise((r) => setTimeout(r, ms));


export async function run({ quick = false } = {}) {
  const bytes = quick ? 30_000_000 : 100_000_000;
  const streams = 60;
  const rows = [];
  const envd = await startEnvd({ executable: true });
  try {
    await settle(1_500);
    const idle = rssBytes(envd.pid);

    const unread = sampleRss(envd.pid);
    const pids = [];
    for (let i = 0; i < 8; i++) pids.push((await postJson(envd, '/commands', { cmd: `yes 'storm line ${i} of printable text' | head -c ${bytes}`, background: true, user: BENCH_USER })).pid);
    const t = performance.now();
    // Nobody reads or waits: poll the listing until all eight have finished.
    for (;;) {
      const { processes } = JSON.parse((await send(envd, 'GET', '/commands')).body);
      if (processes.filter((p) => pids.includes(p.pid) && !p.running).length === pids.length) break;
      await settle(200);
    }
    const unreadMs = performance.now() - t;
    const unreadPeak = unread.stop();
    const metrics = JSON.parse((await send(envd, 'GET', '/metrics')).body);
    for (const pid of pids) await send(envd, 'DELETE', `/commands/${pid}`);
    rows.push(
      makeRow({
        name: 'RSS growth, 8 × 100 MB unread',
        unit: 'MiB',
        envd: (unreadPeak - idle) / MIB,
        baseline: idle / MIB,
        ratio: null,
        goal: GOAL,
        note: `8 × ${bytes / 1e6} MB${quick ? ' (--quick)' : ''} in ${(unreadMs / 1000).toFixed(1)} s; idle ${(idle / MIB).toFixed(1)} MiB, peak ${(unreadPeak / MIB).toFixed(1)} MiB; kept: ${(metrics.output_memory_bytes / MIB).toFixed(1)} MiB memory tier, ${(metrics.output_spool_bytes / MIB).toFixed(1)} MiB spool`,
      }),
    );

    await settle();
    const before = rssBytes(envd.pid);
    const stalled = sampleRss(envd.pid);
    const clients = [];
    for (let i = 0; i < streams; i++) clients.push(await stalledStream(envd, 'yes "stalled stream output line"', BENCH_USER));
    // RSS levels off once every command is blocked on its pipe.
    let last = rssBytes(envd.pid);
    for (let i = 0; i < 20; i++) {
      await settle(500);
      const now = rssBytes(envd.pid);
      if (Math.abs(now - last) < MIB / 2) break;
      last = now;
    }
    const stalledPeak = stalled.stop();
    for (const client of clients) client.close();
    await settle(1_500);
    const after = rssBytes(envd.pid);
    rows.push(
      makeRow({
        name: 'RSS growth, 60 stalled streams',
        unit: 'MiB',
        envd: (stalledPeak - idle) / MIB,
        baseline: idle / MIB,
        ratio: null,
        goal: GOAL,
        note: `${streams} clients not reading \`yes\`; before ${(before / MIB).toFixed(1)} MiB, peak ${(stalledPeak / MIB).toFixed(1)} MiB (${((stalledPeak - before) / streams / 1024).toFixed(0)} KiB per stream), ${(after / MIB).toFixed(1)} MiB after they left`,
      }),
    );
  } finally {
    await envd.stop();
  }
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
