// recursive watch of 10,000 files: one POST /files/watch {recursive: true} on
// a 4,000-directory / 10,000-file tree, against a fresh envd of its own (so
// that RSS is the watch's): time to `ready`, RSS growth while the first client
// watches, RSS after it left; more clients one after another (their median
// ready time, and the RSS they leave until V8's next full collection); then
// 20 clients at once on the tree and on a part of it, sharing. Last, the same
// first watch on a cold envd: the single executable just started from disk,
// nothing done before the watch (issue 29). No baseline: the goals are envd's
// own numbers (issue 13).
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { atMost, makeRow, missingRow, printRow, runIfMain } from './lib/figure.mjs';
import { RouteMissing } from './lib/client.mjs';
import { anonBytes, rssBytes, sampleRss, startEnvd } from './lib/envd-process.mjs';
import { dropFromPageCache, envdFiles } from './lib/page-cache.mjs';
import { median } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';
import { countInotifyWatches, openWatch } from './lib/watch.mjs';
import { TREE_DIRECTORIES, TREE_FILES, writeTree } from './lib/watch-tree.mjs';

const MIB = 1024 * 1024;
const READY_GOAL = atMost(500, 'ms');
const GROWTH_GOAL = atMost(16, 'MiB');
const AFTER_GOAL = atMost(16, 'MiB');
const SETTLE_MS = 2_000;
const EVENT_DEADLINE_MS = 5_000;
const CLIENTS = 20;
const NAME = 'recursive watch of 10,000 files';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves when `onChange` has seen every path in `paths`, or rejects after the deadline. */
function expectChanges(seen, paths) {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + EVENT_DEADLINE_MS;
    const poll = setInterval(() => {
      const missing = paths.filter((p) => !seen.has(p));
      if (missing.length === 0) {
        clearInterval(poll);
        resolve();
      } else if (Date.now() > deadline) {
        clearInterval(poll);
        reject(new Error(`no change event for ${missing.join(', ')} within ${EVENT_DEADLINE_MS} ms`));
      }
    }, 5);
  });
}

/** One watch opened, proved to work (a new file deep down, a new directory filled at once), closed, the tree put back. */
async function watchOnce(server, root, deep, round) {
  const seen = new Set();
  const sampler = sampleRss(server.pid);
  const started = performance.now();
  const watch = await openWatch(server, root, (change) => seen.add(change.path), { recursive: true });
  const readyMs = performance.now() - started;
  const file = join(deep, `new-${round}.txt`);
  const dir = join(root, `new-dir-${round}`);
  const inner = join(dir, 'inner.txt');
  try {
    writeFileSync(file, 'x');
    mkdirSync(dir);
    writeFileSync(inner, 'x');
    await expectChanges(seen, [file, dir, inner]);
    await sleep(SETTLE_MS);
    return { readyMs, peak: sampler.stop(), running: rssBytes(server.pid) };
  } finally {
    await watch.close();
    rmSync(file, { force: true });
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * One small recursive watch (one package of the tree, 100 directories) opened
 * and closed before idle is read. envd maps V8's optimising compilers (~7 MiB
 * of the node binary's code) the first time it does heavy work; until it
 * stopped doing a 4,096-step loop at start, that was at every start. Without
 * this, the first big watch would be charged for that one-time mapping, not
 * for watching: its RSS while watching is the same either way (77.8 MiB).
 */
async function warmUp(server, root) {
  const watch = await openWatch(server, join(root, 'package-0'), () => {}, { recursive: true });
  await watch.close();
}

/**
 * The first recursive watch of the whole tree on a cold envd: dist/envd just
 * started with its files dropped from the page cache, idle for a moment, no
 * warm-up. Its peak also holds what any first heavy work maps once (V8's
 * optimising compiler, when something gets hot enough for it), which the
 * warm figure leaves out. Peak RSS over idle (sampled every 20 ms), and
 * anonymous memory while watching.
 */
async function coldWatch(root) {
  dropFromPageCache(envdFiles());
  const server = await startEnvd({ executable: true });
  try {
    await sleep(SETTLE_MS);
    const idle = rssBytes(server.pid);
    const idleAnon = anonBytes(server.pid);
    const sampler = sampleRss(server.pid);
    const watch = await openWatch(server, root, () => {}, { recursive: true });
    await sleep(SETTLE_MS);
    const peak = Math.max(sampler.stop(), rssBytes(server.pid));
    const anon = anonBytes(server.pid);
    await watch.close();
    return { growth: peak - idle, anonGrowth: anon - idleAnon, idle };
  } finally {
    await server.stop();
  }
}

export async function run({ quick = false } = {}) {
  const rounds = quick ? 2 : 5;
  const coldRounds = quick ? 1 : 3;
  const root = makeTempDir('watch-tree');
  const server = await startEnvd();
  try {
    const directories = writeTree(root);
    await warmUp(server, root);
    await sleep(SETTLE_MS);
    const idle = rssBytes(server.pid);
    const first = await watchOnce(server, root, directories.at(-1), 0);
    await sleep(SETTLE_MS);
    const afterFirst = rssBytes(server.pid);
    const results = [first];
    for (let round = 1; round < rounds; round++) results.push(await watchOnce(server, root, directories.at(-1), round));
    await sleep(SETTLE_MS);
    const afterAll = rssBytes(server.pid);

    const watchesBefore = countInotifyWatches(server.pid);
    const many = [];
    let shared;
    try {
      for (let i = 0; i < CLIENTS; i++) many.push(await openWatch(server, i % 2 ? root : join(root, 'package-0'), () => {}, { recursive: true }));
      await sleep(SETTLE_MS);
      shared = { watches: countInotifyWatches(server.pid) - watchesBefore, rss: rssBytes(server.pid) };
    } finally {
      await Promise.all(many.map((w) => w.close()));
    }
    await sleep(SETTLE_MS);
    const sharedAfter = rssBytes(server.pid);
    const cold = [];
    for (let round = 0; round < coldRounds; round++) cold.push(await coldWatch(root));

    const tree = `${TREE_DIRECTORIES.toLocaleString('en')} directories, ${TREE_FILES.toLocaleString('en')} files`;
    const mib = (bytes) => `${(bytes / MIB).toFixed(1)} MiB`;
    const rows = [
      makeRow({ name: `${NAME}: ready`, unit: 'ms', envd: median(results.map((r) => r.readyMs)), goal: READY_GOAL, note: `${tree}; median of ${rounds} clients one after another (${results.map((r) => r.readyMs.toFixed(0)).join(', ')} ms)` }),
      makeRow({ name: `${NAME}: RSS growth`, unit: 'MiB', envd: (Math.max(first.peak, first.running) - idle) / MIB, goal: GROWTH_GOAL, note: `first client of the whole tree (after one of a package, see warmUp): idle ${mib(idle)}, peak ${mib(first.peak)}, ${SETTLE_MS / 1000} s after ready ${mib(first.running)}` }),
      makeRow({ name: `${NAME}: RSS after close`, unit: 'MiB', envd: (afterFirst - idle) / MIB, goal: AFTER_GOAL, note: `${mib(afterFirst)} ${SETTLE_MS / 1000} s after the first client left (idle ${mib(idle)})` }),
      makeRow({ name: `${NAME}: RSS after ${rounds} clients`, unit: 'MiB', envd: (afterAll - idle) / MIB, note: `${rounds} clients one after another; the closed watches' handles stay until V8's next full collection` }),
      makeRow({ name: `${NAME}: RSS growth, cold envd`, unit: 'MiB', envd: median(cold.map((c) => c.growth)) / MIB, goal: GROWTH_GOAL, note: `dist/envd started from disk, the watch its first work; median of ${coldRounds} (${cold.map((c) => (c.growth / MIB).toFixed(1)).join(', ')} MiB over idle ${mib(cold[0].idle)}; anonymous +${cold.map((c) => (c.anonGrowth / MIB).toFixed(1)).join(', ')} MiB)` }),
      makeRow({ name: `${NAME}: ${CLIENTS} clients, RSS growth`, unit: 'MiB', envd: (shared.rss - idle) / MIB, note: `${CLIENTS} recursive clients at once on the tree and on one package of it: ${shared.watches} inotify watches for ${TREE_DIRECTORIES + 1} directories; ${mib(sharedAfter)} after they left` }),
    ];
    rows.forEach(printRow);
    return rows;
  } catch (error) {
    if (!(error instanceof RouteMissing)) throw error;
    const row = missingRow({ name: `${NAME}: ready`, unit: 'ms', goal: READY_GOAL, note: error.message });
    printRow(row);
    return [row];
  } finally {
    await server.stop();
    removeTempDir(root);
  }
}

await runIfMain(import.meta.url, run);
