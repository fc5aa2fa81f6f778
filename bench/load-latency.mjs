// /health and POST /commands latency under issue 36's stress load, on dist/envd
// (or ENVD_BENCH_EXECUTABLE: run two builds interleaved for an A/B).
//
//   node bench/load-latency.mjs [--rounds 4] [--concurrency 200] [--runs 1] [--cpu-prof DIR]
//
// The load is test/stress/hostile-files.test.ts's: rounds of 200 concurrent
// archive downloads (a quarter tar.gz), raw uploads, raw reads and sha256
// checksums of a name that a plain user (nobody) swaps between a file, a FIFO
// and a symlink. Probes in a process of their own (bench/lib/latency-probes.mjs)
// time GET /health (every 50 ms) and POST /commands `true` as COMMAND_USER
// (every 200 ms), and beside them the baselines of the same window: the bare
// `bash -l -c true` a command runs, and a bare fastify app's /health. Prints
// one JSON line per run: p50/p99 of each, envd's idle and peak RSS and
// anonymous memory, and the load average; with ENVD_LATENCY_PROBE=1 envd's
// own event-loop delay and GC lines go to stderr.
import { spawn } from 'node:child_process';
import { chownSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { anonBytes, ENVD_SEA, rssBytes, startEnvd, startServer } from './lib/envd-process.mjs';
import { percentile } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';
import { COMMAND_USER } from './lib/spawn-direct.mjs';

const { values: opts } = parseArgs({ options: { rounds: { type: 'string', default: '4' }, concurrency: { type: 'string', default: '200' }, runs: { type: 'string', default: '1' }, 'cpu-prof': { type: 'string' } } });
const NOBODY = 65534;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const q = (path) => `path=${encodeURIComponent(path)}`;

// The user's side: swap/x turns between a file, a FIFO and a symlink, and envd's temporary names are taken.
const SWAPPER = `
const fs = require('node:fs'), path = require('node:path');
const dir = process.env.DIR, swap = path.join(dir, 'swap'), x = path.join(swap, 'x');
let n = 0;
const quietly = (f) => { try { f(); } catch {} };
function tick() {
  n++;
  quietly(() => fs.rmSync(x, { force: true }));
  if (n % 3 === 0) quietly(() => fs.writeFileSync(x, 'data'));
  else if (n % 3 === 1) quietly(() => require('node:child_process').execFileSync('mkfifo', [x]));
  else quietly(() => fs.symlinkSync('/etc/shadow', x));
  for (const name of fs.readdirSync(path.join(dir, 'up'))) {
    if (/\\.envd-/.test(name)) quietly(() => fs.renameSync(path.join(dir, 'up', name), path.join(dir, 'up', 'taken-' + n)));
  }
  setTimeout(tick, 1);
}
tick();
`;

async function oneRun() {
  const dir = makeTempDir('load-latency');
  for (const sub of ['tree/sub', 'swap', 'up', 'safe']) mkdirSync(join(dir, sub), { recursive: true });
  for (let i = 1; i <= 40; i++) writeFileSync(join(dir, 'tree', `small-${i}`), randomBytes(3000));
  writeFileSync(join(dir, 'tree', 'large'), randomBytes(300_000));
  for (let i = 1; i <= 10; i++) writeFileSync(join(dir, 'tree', 'sub', `s${i}`), 's\n');
  for (const sub of ['', 'tree', 'tree/sub', 'swap', 'up', 'safe']) chownSync(join(dir, sub), NOBODY, NOBODY);
  const extraEnv = opts['cpu-prof'] ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${opts['cpu-prof']}` } : {};
  if (process.env.ENVD_LATENCY_PROBE) extraEnv.ENVD_LATENCY_PROBE = process.env.ENVD_LATENCY_PROBE;
  // LOAD_ENVD_ENV: more of envd's environment, as JSON (an experiment: {"UV_THREADPOOL_SIZE":"8"}).
  Object.assign(extraEnv, JSON.parse(process.env.LOAD_ENVD_ENV ?? '{}'));
  const envd = await startEnvd({ executable: true, extraEnv });
  // The probe's lines (ENVD_LATENCY_PROBE) come on envd's stderr.
  envd.child.stderr.on('data', (chunk) => process.stderr.write(chunk));
  const swapper = spawn(process.execPath, ['-e', SWAPPER], { uid: NOBODY, gid: NOBODY, env: { DIR: dir }, stdio: 'ignore' });
  const call = (method, path, init = {}) => fetch(`${envd.url}${path}`, { method, ...init, headers: { authorization: `Bearer ${envd.token}`, ...init.headers } });
  await sleep(1_000);
  // Anonymous memory too: RSS counts the pages of the 110 MB runtime that are mapped, which depend on the page cache
  // (one copy of dist/ measured 18 MiB above another of the same build).
  const idleRss = rssBytes(envd.pid);
  const idleAnon = anonBytes(envd.pid);
  let peak = idleRss;
  let peakAnon = idleAnon;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssBytes(envd.pid));
    peakAnon = Math.max(peakAnon, anonBytes(envd.pid));
  }, 100);
  const bare = await startServer({ args: [new URL('./lib/bare-fastify.mjs', import.meta.url).pathname], usePortFlag: false });
  const probes = spawn(process.execPath, [new URL('./lib/latency-probes.mjs', import.meta.url).pathname, envd.url, envd.token, COMMAND_USER.name, bare.url], { stdio: ['ignore', 'pipe', 'inherit'] });
  let probeOutput = '';
  probes.stdout.on('data', (chunk) => (probeOutput += chunk));
  while (!probeOutput.startsWith('ready\n')) await sleep(20);
  const swallow = (promise) => promise.then((r) => r.arrayBuffer()).catch(() => {});
  const kinds = [
    (i) => call('GET', `/files/archive?${q(join(dir, 'tree'))}${i % 4 === 0 ? '&format=tar.gz' : ''}`),
    (i) => call('PUT', `/files/raw?${q(join(dir, i % 2 ? 'up' : 'safe', `file-${i % 10}`))}`, { body: randomBytes(20_000), headers: { 'content-type': 'application/octet-stream' } }),
    () => call('GET', `/files/raw?${q(join(dir, 'swap', 'x'))}`),
    () => call('GET', `/files/info?checksum=sha256&${q(join(dir, 'swap', 'x'))}`),
    () => call('GET', `/files/raw?${q(join(dir, 'tree', 'sub', 's1'))}`),
  ];
  const concurrency = Number(opts.concurrency);
  // The same /health timed from this process, whose event loop runs the load: what the probes' own process avoids.
  const fromLoad = [];
  let timingFromLoad = true;
  const timeFromLoad = (async () => {
    while (timingFromLoad) {
      const at = performance.now();
      await (await call('GET', '/health')).arrayBuffer();
      fromLoad.push(performance.now() - at);
      await sleep(50);
    }
  })();
  const started = Date.now();
  for (let round = 0; round < Number(opts.rounds); round++) {
    await Promise.all(Array.from({ length: concurrency }, (_, i) => swallow(kinds[i % kinds.length](i))));
  }
  const seconds = (Date.now() - started) / 1000;
  timingFromLoad = false;
  await timeFromLoad;
  const probesDone = new Promise((resolve) => probes.once('exit', resolve));
  probes.kill('SIGTERM');
  await probesDone;
  const latencies = JSON.parse(probeOutput.slice('ready\n'.length));
  clearInterval(sampler);
  swapper.kill('SIGKILL');
  await envd.stop();
  await bare.stop();
  removeTempDir(dir);
  const ms = (v) => Math.round(v * 10) / 10;
  return {
    executable: process.env.ENVD_BENCH_EXECUTABLE ?? ENVD_SEA,
    seconds,
    healthP50: ms(percentile(latencies.health, 0.5)), healthP99: ms(percentile(latencies.health, 0.99)), healthN: latencies.health.length,
    healthFromLoadGeneratorP50: ms(percentile(fromLoad, 0.5)), healthFromLoadGeneratorP99: ms(percentile(fromLoad, 0.99)),
    commandP50: ms(percentile(latencies.command, 0.5)), commandP95: ms(percentile(latencies.command, 0.95)), commandP99: ms(percentile(latencies.command, 0.99)), commandN: latencies.command.length,
    bareShellP50: ms(percentile(latencies.bare, 0.5)), bareShellP99: ms(percentile(latencies.bare, 0.99)),
    bareHealthP50: ms(percentile(latencies.bareHealth, 0.5)), bareHealthP99: ms(percentile(latencies.bareHealth, 0.99)),
    idleRssMiB: ms(idleRss / 2 ** 20), peakRssMiB: ms(peak / 2 ** 20), idleAnonMiB: ms(idleAnon / 2 ** 20), peakAnonMiB: ms(peakAnon / 2 ** 20),
    load: readFileSync('/proc/loadavg', 'utf8').split(' ')[0],
  };
}

for (let run = 0; run < Number(opts.runs); run++) console.log(JSON.stringify(await oneRun()));
