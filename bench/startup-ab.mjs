// `node bench/startup-ab.mjs [--rounds N] <dir> <dir> …`: start-up and idle RSS
// of several builds, interleaved (a start of each build in turn, N rounds),
// for before/after comparisons. Each <dir> holds an envd.js (run with the
// package.json node flags) and, if built, the single executable envd; copy
// dist/ aside before a change to keep the "before". Prints medians; idle RSS
// is read 1 s after the first 200 on every other round.
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { ENVD_NODE_FLAGS, rssBytes, startServer } from './lib/envd-process.mjs';
import { median } from './lib/stats.mjs';

const args = process.argv.slice(2);
const roundsAt = args.indexOf('--rounds');
const rounds = roundsAt >= 0 ? Number(args.splice(roundsAt, 2)[1]) : 8;
if (args.length === 0 || !Number.isInteger(rounds) || rounds < 1) {
  console.error('usage: node bench/startup-ab.mjs [--rounds N] <dir with envd.js [and envd]> …');
  process.exit(2);
}
const MIB = 1024 * 1024;
const token = () => ({ ENVD_ACCESS_TOKEN: randomBytes(16).toString('hex') });
const sides = [];
for (const dir of args.map((d) => resolve(d))) {
  sides.push({ name: `${dir}/envd.js`, start: () => startServer({ args: [...ENVD_NODE_FLAGS, `${dir}/envd.js`, '--log-level', 'warn'], env: token() }), ms: [], rss: [] });
  if (existsSync(`${dir}/envd`)) sides.push({ name: `${dir}/envd`, start: () => startServer({ command: `${dir}/envd`, args: ['--log-level', 'warn'], env: token() }), ms: [], rss: [] });
}
// One warm-up start of each (disk cache), then the builds in turn.
for (let round = -1; round < rounds; round++) {
  for (const side of sides) {
    const server = await side.start();
    try {
      if (round < 0) continue;
      side.ms.push(server.startMs);
      if (round % 2 === 0) {
        await new Promise((r) => setTimeout(r, 1_000));
        side.rss.push(rssBytes(server.pid) / MIB);
      }
    } finally {
      await server.stop();
    }
  }
}
for (const side of sides) {
  console.log(`${side.name}: start-up ${median(side.ms).toFixed(0)} ms (best ${Math.min(...side.ms).toFixed(0)}), idle RSS ${median(side.rss).toFixed(1)} MiB (best ${Math.min(...side.rss).toFixed(1)})`);
}
