import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { countInotifyWatches } from '../helpers/files.js';
import { countFds, rssBytes, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { callEnvd, openWatch, writeTree, type Call } from './watch-client.js';

// envd as its own process (the built bundle, its deployed V8 flags), so that
// its RSS, descriptors and inotify watches are its own.

/** Issue 13's bound: one recursive watch of 4,000 directories and 10,000 files, over idle, while it runs and after. */
const RSS_BOUND = 16 * 1024 * 1024;
const MiB = 1024 * 1024;

const token = randomBytes(16).toString('hex');
let envd: EnvdProcess;
let call: Call;
let dir: string;
beforeAll(async () => {
  envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: token });
  call = callEnvd(envd, token);
  dir = mkdtempSync(join(tmpdir(), 'envd-watch-mem-'));
});
// Removing the trees of 10,000 directories and stopping an envd that watched them takes more
// than vitest's 30 s default on a loaded 2-core machine.
afterAll(async () => {
  await envd?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 120_000);

const pid = () => envd.child.pid!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it('shares one inotify watch per directory among 20 clients on the same and overlapping trees', async () => {
  const root = join(dir, 'shared');
  const directories = writeTree(root, 2, 100);
  const before = countInotifyWatches(pid());
  const watches = [];
  try {
    for (let i = 0; i < 20; i++) {
      // The whole tree or one package of it, recursive or only its direct children.
      watches.push(await openWatch(call, i % 2 ? root : join(root, 'package-1'), i % 4 !== 3));
    }
    // One per directory, and one on the tree's parent (to see a client's root removed).
    expect(countInotifyWatches(pid()) - before).toBe(directories.length + 2);
    // A direct child of package-1: every client sees it but the five flat ones on the whole tree.
    const file = join(root, 'package-1/new.txt');
    writeFileSync(file, 'x');
    const seeing = watches.filter((_, i) => i % 2 === 0 || i % 4 !== 3);
    expect(seeing).toHaveLength(15);
    await waitFor(() => seeing.every((w) => w.has('create', file)), 5_000, 'the change seen by the 15 clients it concerns');
  } finally {
    await Promise.all(watches.map((w) => w.close()));
  }
  await waitFor(() => countInotifyWatches(pid()) === before, 10_000, 'inotify watches released');
});

it('holds 200 concurrent watches and releases them all: descriptors and inotify watches back to before', async () => {
  const root = join(dir, 'many');
  for (let i = 0; i < 10; i++) mkdirSync(join(root, `d${i}/e`), { recursive: true });
  const fdsBefore = countFds(pid());
  const watchesBefore = countInotifyWatches(pid());
  const watches = await Promise.all(Array.from({ length: 200 }, (_, i) => openWatch(call, i % 3 ? join(root, `d${i % 10}`) : root, i % 2 === 0)));
  expect(countInotifyWatches(pid()) - watchesBefore).toBe(22);
  const file = join(root, 'd3/e/f.txt');
  writeFileSync(file, 'x');
  await waitFor(() => watches.some((w) => w.has('create', file)), 5_000, 'a change seen');
  await Promise.all(watches.map((w) => w.close()));
  await waitFor(() => countInotifyWatches(pid()) === watchesBefore, 10_000, 'inotify watches released');
  await waitFor(() => countFds(pid()) <= fdsBefore, 10_000, `descriptors back to ${fdsBefore}`);
}, 60_000);

it('keeps envd within 16 MiB of idle RSS while it watches 4,000 directories and 10,000 files, and after the client left', async () => {
  const root = join(dir, 'big');
  const directories = writeTree(root, 40, 10_000);
  expect(directories).toHaveLength(4_000);
  // Warm up the watch path on a small directory, so that loading its code is not counted.
  const warm = join(dir, 'warm');
  mkdirSync(warm);
  await (await openWatch(call, warm, true)).close();
  await sleep(1_000);
  const idle = rssBytes(pid());
  const watchesBefore = countInotifyWatches(pid());
  let peak = idle;
  const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid()))), 20);
  try {
    const watch = await openWatch(call, root, true);
    expect(countInotifyWatches(pid()) - watchesBefore).toBe(4_002);
    const deep = join(directories.at(-1)!, 'deep.txt');
    writeFileSync(deep, 'x');
    await waitFor(() => watch.has('create', deep), 5_000, 'a change deep in the tree');
    await sleep(1_000);
    await watch.close();
  } finally {
    clearInterval(sampler);
  }
  await waitFor(() => countInotifyWatches(pid()) === watchesBefore, 10_000, 'inotify watches released');
  await sleep(1_000);
  const after = rssBytes(pid());
  console.log(`[watch] 4,000 directories: idle ${(idle / MiB).toFixed(1)} MiB, peak +${((peak - idle) / MiB).toFixed(1)} MiB, after close +${((after - idle) / MiB).toFixed(1)} MiB`);
  expect(peak - idle).toBeLessThan(RSS_BOUND);
  expect(after - idle).toBeLessThan(RSS_BOUND);
}, 60_000);
