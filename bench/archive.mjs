// directories as tar (issue 27): a 10,000-file / 200 MiB tree each way through
// envd (GET /files/archive read to the end; PUT /files/archive from the tar
// file) against GNU tar piped over a loopback TCP socket (tar -c → socket →
// discard; file → socket → tar -x), on dist/envd; ratio = envd's throughput /
// tar's (goal ≥ 0.8), and envd's RSS growth over idle sampled every 20 ms
// (goal ≤ 32 MiB). Both sides extract into tmpfs (/dev/shm where there is
// one): on this host's disk the same `tar -x` took 0.46 s to 7.7 s depending
// on writeback left by the run before, which measures the disk, not envd.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { send } from './lib/client.mjs';
import { atLeast, atMost, makeRow, printRow, runIfMain } from './lib/figure.mjs';
import { rssBytes, sampleRss, startEnvd } from './lib/envd-process.mjs';
import { median } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';
import { readSource } from './lib/source.mjs';

const MIB = 1024 * 1024;

/** 10,000 files in 100 directories, 200 MiB: 9,990 of ~10 KiB and 10 of ~10 MiB. */
function writeTree(root, quick) {
  const small = quick ? 1_990 : 9_990;
  const smallBytes = Math.floor((quick ? 20 : 100) * MIB / small);
  const block = randomBytes(smallBytes);
  for (let i = 0; i < small; i++) {
    const dir = join(root, `d${i % 100}`);
    if (i < 100) mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `f${i}.txt`), block);
  }
  for (let i = 0; i < 10; i++) writeFileSync(join(root, `big${i}.bin`), randomBytes((quick ? 2 : 10) * MIB));
}

/** tar -c of the tree through a loopback socket into nothing; ms. */
async function tarOut(tree) {
  const started = performance.now();
  const server = createServer((socket) => socket.resume().on('end', () => socket.end()));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const socket = connect(server.address().port, '127.0.0.1');
  const tar = spawn('tar', ['-cf', '-', '-C', tree, '.'], { stdio: ['ignore', 'pipe', 'inherit'] });
  tar.stdout.pipe(socket);
  await new Promise((r) => socket.on('close', r));
  server.close();
  return performance.now() - started;
}

/** The tar file through a loopback socket into tar -x; ms. */
async function tarIn(file, target) {
  mkdirSync(target);
  const started = performance.now();
  const done = new Promise((resolve) => {
    const server = createServer((socket) => {
      const tar = spawn('tar', ['-xf', '-', '-C', target], { stdio: ['pipe', 'ignore', 'inherit'] });
      socket.pipe(tar.stdin);
      tar.on('exit', () => (server.close(), resolve()));
    });
    server.listen(0, '127.0.0.1', () => readSource(file).pipe(connect(server.address().port, '127.0.0.1')));
  });
  await done;
  return performance.now() - started;
}

async function envdOut(envd, tree) {
  const started = performance.now();
  const res = await send(envd, 'GET', `/files/archive?path=${encodeURIComponent(tree)}`, { read: false });
  let bytes = 0;
  for await (const chunk of res) bytes += chunk.length;
  if (res.statusCode !== 200) throw new Error(`GET /files/archive answered ${res.statusCode}`);
  return { ms: performance.now() - started, bytes };
}

async function envdIn(envd, file, target) {
  const started = performance.now();
  const { status, body } = await send(envd, 'PUT', `/files/archive?path=${encodeURIComponent(target)}`, {
    body: readSource(file),
    headers: { 'content-type': 'application/x-tar', 'content-length': statSync(file).size },
  });
  if (status !== 200) throw new Error(`PUT /files/archive answered ${status}: ${body.slice(0, 200)}`);
  return performance.now() - started;
}

export async function run({ quick = false, envd: given } = {}) {
  // Five: both sides pass 200 MiB through the bench's own Node process (the client, and tar's relay),
  // whose pace on this 2-CPU VM moves single rounds by ±25 % (450-800 ms for tar's side in one run).
  const rounds = quick ? 2 : 5;
  const dir = makeTempDir('archive');
  // dist/envd as a guest runs it, unless the caller (bench/profile.mjs) gives one.
  const envd = given ?? (await startEnvd({ executable: true }));
  try {
    const tree = join(dir, 'tree');
    writeTree(tree, quick);
    const file = join(dir, 'tree.tar');
    await new Promise((r) => spawn('tar', ['-cf', file, '-C', tree, '.']).on('exit', r));
    const size = statSync(file).size;
    // The tree and the tar are 400 MiB of dirty pages on the temp dir's disk: written out now, their
    // writeback cannot take a CPU from whichever side runs when it would.
    execFileSync('sync');
    // Warm-up: the page cache holds the tree and the tar, for both sides alike.
    await tarOut(tree);
    await envdOut(envd, tree);
    await new Promise((r) => setTimeout(r, 2_000));
    const idle = rssBytes(envd.pid);
    const sampler = sampleRss(envd.pid);
    const out = { envd: [], tar: [] };
    const into = { envd: [], tar: [] };
    const scratch = existsSync('/dev/shm') ? mkdtempSync('/dev/shm/envd-archive-bench-') : dir;
    for (let i = 0; i < rounds; i++) {
      out.envd.push((await envdOut(envd, tree)).ms);
      out.tar.push(await tarOut(tree));
      into.envd.push(await envdIn(envd, file, join(scratch, `in-envd-${i}`)));
      into.tar.push(await tarIn(file, join(scratch, `in-tar-${i}`)));
      rmSync(join(scratch, `in-envd-${i}`), { recursive: true, force: true });
      rmSync(join(scratch, `in-tar-${i}`), { recursive: true, force: true });
    }
    const peak = sampler.stop();
    if (scratch !== dir) rmSync(scratch, { recursive: true, force: true });

    const mbps = (ms) => size / 1e6 / (ms / 1000);
    const note = `${quick ? '2,000 files / 40 MiB (--quick)' : '10,000 files / 200 MiB'}, tar ${(size / MIB).toFixed(0)} MiB, median of ${rounds}`;
    const rows = [
      makeRow({ name: 'directory download (tar)', unit: 'MB/s', envd: mbps(median(out.envd)), baseline: mbps(median(out.tar)), goal: atLeast(0.8), note: `${note}; GNU tar -c piped over loopback` }),
      makeRow({ name: 'directory upload (tar)', unit: 'MB/s', envd: mbps(median(into.envd)), baseline: mbps(median(into.tar)), goal: atLeast(0.8), note: `${note}; the tar file piped over loopback into tar -x; both into ${scratch === dir ? 'the temp dir' : 'tmpfs'}` }),
      makeRow({ name: 'directory transfer RSS growth', unit: 'MiB', envd: (peak - idle) / MIB, ratio: null, goal: atMost(32, 'MiB'), note: `peak over idle ${(idle / MIB).toFixed(1)} MiB, sampled every 20 ms` }),
    ];
    return rows;
  } finally {
    if (!given) await envd.stop();
    removeTempDir(dir);
  }
}

runIfMain(import.meta.url, async (opts) => (await run(opts)).forEach(printRow));
