import { spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { request, type ClientRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerClient } from '../helpers/bearer-client.js';
import { countFds, rssBytes, startEnvdExecutable, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { createTestUser, isRoot, type TestUser } from '../helpers/users.js';
import { MiB, report } from './harness.js';
import { makeCanaries } from '../helpers/canaries.js';
import { startLatencyProbes } from './latency-probes.js';

/**
 * Issue 36 under load, on the single executable dist/envd: stalled downloads
 * stay within 1 MiB each (item 9), and a plain user who swaps files, FIFOs and
 * symlinks and renames envd's temporary names under hundreds of concurrent
 * transfers hangs nothing, reaches nothing outside, and breaks no budget.
 */

/** What one client that stopped reading may cost envd (issue 36, "Memory per connection is bounded"). */
const STALLED_CLIENT_BUDGET = 1 * MiB;

/** Anonymous memory (heap, buffers: what a stalled client can pin), as /proc/<pid>/status says. */
function anonBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('RssAnon:'));
  return Number(line?.split(/\s+/)[1]) * 1024;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** envd's CPU time so far, in clock ticks (/proc/<pid>/stat utime + stime). */
function cpuTicks(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** Until envd is idle (streams that stalled have filled what they will fill): < 5 % of a core over half a second. */
async function settled(pid: number): Promise<void> {
  for (let last = cpuTicks(pid), i = 0; i < 60; i++) {
    await sleep(500);
    const now = cpuTicks(pid);
    if (now - last < 3) return;
    last = now;
  }
}

interface Target {
  envd: EnvdProcess;
  pid: number;
  token: string;
  dir: string;
  user: TestUser;
  call(method: string, path: string, body?: unknown, init?: RequestInit): Promise<Response>;
  stop(): Promise<void>;
}

async function startTarget(): Promise<Target> {
  const token = randomBytes(16).toString('hex');
  const user = await createTestUser();
  const dir = mkdtempSync(join(tmpdir(), 'envd-hostile-'));
  chownSync(dir, user.uid, user.gid);
  // A budget for clients (issue 45) large enough for the 120 stalled downloads measured below: what each costs is
  // measured here; how many the default budget admits at once is test/memory-budget.test.ts's.
  const envd = await startEnvdExecutable(['--default-workdir', dir, '--default-user', user.name, '--client-memory-bytes', String(1024 * MiB)], { ENVD_ACCESS_TOKEN: token });
  const { call } = bearerClient(envd.url, token);
  return {
    envd, pid: envd.child.pid!, token, dir, user, call,
    async stop() {
      // An envd wedged by what a test did (a FIFO on the event loop, before issue 36) ignores SIGTERM.
      const killer = setTimeout(() => envd.child.kill('SIGKILL'), 10_000);
      await envd.stop();
      clearTimeout(killer);
      rmSync(dir, { recursive: true, force: true });
      user.remove();
    },
  };
}

/** A GET whose response is read up to its headers, then not at all: a client that stalled. Resolves once the headers came. */
function stalledGet(target: Target, path: string): Promise<ClientRequest> {
  return new Promise((resolve, reject) => {
    const req = request(target.envd.url + path, { agent: false, headers: { authorization: `Bearer ${target.token}` } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${path}: ${res.statusCode}`));
      res.pause();
      resolve(req);
    });
    req.on('error', () => {});
    req.end();
  });
}

const q = (path: string) => `path=${encodeURIComponent(path)}`;

describe.runIf(isRoot())('hostile files under load (dist/envd)', () => {
  let target: Target;
  beforeAll(async () => {
    target = await startTarget();
  }, 60_000);
  afterAll(async () => target?.stop());

  it(`60 stalled raw downloads, 30 stalled tar and 30 stalled tar.gz downloads cost at most ${STALLED_CLIENT_BUDGET / MiB} MiB each, all given back on hang-up (36, item 9)`, async () => {
    const big = join(target.dir, 'big.bin');
    writeFileSync(big, randomBytes(64 * MiB));
    const tree = join(target.dir, 'tree');
    mkdirSync(tree);
    for (let i = 0; i < 8; i++) writeFileSync(join(tree, `part-${i}.bin`), randomBytes(8 * MiB));
    await sleep(1_000);
    const before = { rss: rssBytes(target.pid), anon: anonBytes(target.pid), fds: countFds(target.pid) };
    const clients: ClientRequest[] = [];
    // Each kind's share, for the report: measured once its streams have filled what they will fill.
    const shares: Record<string, number> = {};
    let last = before.anon;
    for (const [kind, path, count] of [
      ['raw', `/files/raw?${q(big)}`, 60],
      ['tar', `/files/archive?${q(tree)}`, 30],
      ['tar.gz', `/files/archive?${q(tree)}&format=tar.gz`, 30],
    ] as const) {
      const these: ClientRequest[] = [];
      for (let i = 0; i < count; i++) these.push(await stalledGet(target, path));
      await settled(target.pid);
      const now = anonBytes(target.pid);
      shares[`${kind}KiBEach`] = (now - last) / count / 1024;
      last = now;
      clients.push(...these);
    }
    const during = { rss: rssBytes(target.pid), anon: anonBytes(target.pid) };
    // envd still answers meanwhile.
    expect((await target.call('GET', '/health')).status).toBe(200);
    for (const client of clients) client.destroy();
    await waitFor(() => countFds(target.pid) <= before.fds + 2, 10_000, 'every stalled download closed');
    // envd's reclaim (src/memory-reclaim.ts) collects once load has stopped; after collections that gave back little it waits longer (its back-off).
    await waitFor(() => anonBytes(target.pid) - before.anon < 16 * MiB, 60_000, 'memory given back').catch(() => {});
    const after = { rss: rssBytes(target.pid), anon: anonBytes(target.pid) };
    const perClient = (during.rss - before.rss) / clients.length;
    report('stalled downloads', {
      beforeRssMiB: before.rss / MiB, duringRssMiB: during.rss / MiB, afterRssMiB: after.rss / MiB,
      beforeAnonMiB: before.anon / MiB, duringAnonMiB: during.anon / MiB, afterAnonMiB: after.anon / MiB,
      perClientKiB: perClient / 1024, ...shares,
    });
    expect(shares.rawKiBEach! * 1024).toBeLessThan(STALLED_CLIENT_BUDGET);
    expect(shares.tarKiBEach! * 1024).toBeLessThan(STALLED_CLIENT_BUDGET);
    // zlib's own state (~190 KiB at level 6, memLevel 7) on top of 64 KiB tar pieces and 16 KiB slices and
    // output (archive-pack.ts): measured 0.81-0.83 MiB (1.4-1.5 MiB with 272 KiB pieces and 64 KiB slices, 3.4 before).
    expect(shares['tar.gzKiBEach']! * 1024).toBeLessThan(STALLED_CLIENT_BUDGET);
    // Given back: what glibc and V8 keep of 120 freed streams is a few MiB, not the streams.
    expect(after.anon - before.anon).toBeLessThan(16 * MiB);
  }, 120_000);
});


/** The user's attack, as the user: swaps files, FIFOs and symlinks, and renames envd's temporary names, as fast as it can. */
const SWAPPER = `
const fs = require('fs'); const path = require('path');
const { DIR, CANARY_FILE, CANARY_DIR } = process.env;
const at = (...names) => path.join(DIR, ...names);
const quietly = (f) => { try { f(); } catch {} };
let n = 0;
function tick() {
  n++;
  // swap/x: a regular file, a FIFO, a symlink to root's file, in turn.
  quietly(() => fs.rmSync(at('swap', 'x'), { force: true }));
  quietly(() => { if (n % 3 === 0) fs.writeFileSync(at('swap', 'x'), 'a file\\n'); else if (n % 3 === 1) require('child_process').execFileSync('mkfifo', [at('swap', 'x')]); else fs.symlinkSync(CANARY_FILE, at('swap', 'x')); });
  // tree/f swapped with a FIFO by rename (the archive writer's lstat-then-open race), tree/sub with a symlink to root's directory.
  quietly(() => { fs.renameSync(at('tree', 'f'), at('f.away')); fs.renameSync(at('fifo'), at('tree', 'f')); fs.renameSync(at('tree', 'f'), at('fifo')); fs.renameSync(at('f.away'), at('tree', 'f')); });
  quietly(() => { fs.renameSync(at('tree', 'sub'), at('sub.away')); fs.symlinkSync(CANARY_DIR, at('tree', 'sub')); fs.unlinkSync(at('tree', 'sub')); fs.renameSync(at('sub.away'), at('tree', 'sub')); });
  // envd's temporary names, renamed away and replaced by symlinks to root's things.
  for (const dir of [at('up'), DIR]) {
    let names = [];
    quietly(() => (names = fs.readdirSync(dir)));
    for (const name of names) {
      if (!/\\.envd-/.test(name)) continue;
      quietly(() => { fs.renameSync(path.join(dir, name), path.join(dir, 'taken-' + n)); fs.symlinkSync(name.startsWith('.envd-archive') ? CANARY_DIR : CANARY_FILE, path.join(dir, name)); });
    }
  }
  // A millisecond between rounds: a thousand swaps a second, without taking one of the machine's two cores from envd.
  setTimeout(tick, 1);
}
tick();
`;

/**
 * envd's descriptors of files and directories in the user's tree and the
 * canaries (not sockets, whose keep-alive connections close at their own
 * pace, nor the spool and state files that commands keep).
 */
function fileFds(pid: number, ...under: string[]): string[] {
  const open: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const path = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (under.some((dir) => path.startsWith(dir))) open.push(path);
    } catch {
      // closed while we looked
    }
  }
  return open;
}

/** The p-th percentile of `values` (0-100). */
function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

describe.runIf(isRoot())('a hostile user under concurrent transfers (dist/envd)', () => {
  let target: Target;
  let canaries: ReturnType<typeof makeCanaries>;
  let swapper: ChildProcess | undefined;
  beforeAll(async () => {
    target = await startTarget();
    canaries = makeCanaries();
  }, 60_000);
  afterAll(async () => {
    // Also when the test timed out (a hang): the attacker is stopped before its user is removed.
    if (swapper) await stop(swapper);
    await target?.stop();
    if (canaries) rmSync(canaries.root, { recursive: true, force: true });
  });

  it('200 concurrent archive downloads, uploads, raw reads and checksums while a user swaps files, FIFOs and symlinks: no hang, nothing outside changes, /health and commands answer, RSS in budget (36, proof)', async () => {
    const before = canaries.snapshot();
    const { uid, gid } = target.user;
    // The user's tree, made as the user.
    const asUser = (script: string) => {
      const child = spawn('runuser', ['-u', target.user.name, '--', 'sh', '-c', script], { stdio: 'ignore' });
      return new Promise<void>((resolve) => child.once('exit', () => resolve()));
    };
    await asUser(
      `cd ${target.dir} && mkdir -p tree/sub swap up safe && for i in $(seq 1 40); do head -c 3000 /dev/urandom > tree/small-$i; done && head -c 300000 /dev/urandom > tree/large && echo f > tree/f && mkfifo fifo && for i in $(seq 1 10); do echo s > tree/sub/s$i; done`,
    );
    swapper = spawn(process.execPath, ['-e', SWAPPER], { uid, gid, env: { ...process.env, DIR: target.dir, CANARY_FILE: canaries.file, CANARY_DIR: canaries.dir }, stdio: 'ignore' });

    await sleep(1_000);
    const treeFds = () => fileFds(target.pid, target.dir, canaries.root);
    const idle = { rss: rssBytes(target.pid) };
    let peak = idle.rss;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(target.pid))), 100);

    // Probes: /health and POST /commands, one after another, all through the load, from a process of their own.
    const probes = await startLatencyProbes(target.envd.url, target.token);

    const outcomes: Record<string, number> = {};
    const hung: string[] = [];
    const one = async (label: string, send: () => Promise<Response>) => {
      try {
        const response = await send();
        await response.arrayBuffer();
        outcomes[`${label} ${response.status}`] = (outcomes[`${label} ${response.status}`] ?? 0) + 1;
      } catch (error) {
        // A body cut short (the tree changed under a download) is an answer; a timeout is a hang.
        if ((error as Error).name === 'TimeoutError') hung.push(label);
        else outcomes[`${label} aborted`] = (outcomes[`${label} aborted`] ?? 0) + 1;
      }
    };
    const timeout = () => AbortSignal.timeout(60_000);
    const kinds = [
      (i: number) => one('archive', () => target.call('GET', `/files/archive?${q(join(target.dir, 'tree'))}${i % 4 === 0 ? '&format=tar.gz' : ''}`, undefined, { signal: timeout() })),
      // Half into up/, whose temporary names the user takes (409), half into tree/safe/, which it leaves alone.
      (i: number) => one('upload', () => target.call('PUT', `/files/raw?${q(join(target.dir, i % 2 ? 'up' : 'safe', `file-${i % 10}`))}`, undefined, { signal: timeout(), body: randomBytes(20_000), headers: { 'content-type': 'application/octet-stream' } })),
      () => one('read', () => target.call('GET', `/files/raw?${q(join(target.dir, 'swap', 'x'))}`, undefined, { signal: timeout() })),
      () => one('checksum', () => target.call('GET', `/files/info?checksum=sha256&${q(join(target.dir, 'swap', 'x'))}`, undefined, { signal: timeout() })),
      () => one('read-f', () => target.call('GET', `/files/raw?${q(join(target.dir, 'tree', 'f'))}`, undefined, { signal: timeout() })),
    ];
    const started = Date.now();
    for (let round = 0; round < 4; round++) {
      await Promise.all(Array.from({ length: 200 }, (_, i) => kinds[i % kinds.length]!(i)));
    }
    const elapsed = Date.now() - started;
    const latencies = await probes.stop();
    clearInterval(sampler);
    await stop(swapper!);

    await waitFor(() => treeFds().length === 0, 10_000, 'no file of the tree open').catch(() => {});
    report('hostile user under 4 × 200 concurrent requests', {
      seconds: elapsed / 1000,
      healthP99Ms: percentile(latencies.health, 99), healthN: latencies.health.length,
      commandP99Ms: percentile(latencies.command, 99), commandN: latencies.command.length,
      idleRssMiB: idle.rss / MiB, peakRssMiB: peak / MiB, treeFdsAfter: treeFds().length, loadAverage: readFileSync('/proc/loadavg', 'utf8').split(' ')[0],
      ...outcomes,
    });
    expect(hung).toEqual([]);
    expect(latencies.failed).toEqual([]);
    expect(Object.keys(outcomes).filter((key) => / 5\d\d$/.test(key))).toEqual([]);
    expect(canaries.snapshot()).toBe(before);
    // Generous bounds for a loaded 2-core machine (the issue's goal is 100 ms; measured 0.7-1.2 s and
    // 1.5-2.2 s at a load average of 16 on 2 cores; a wedged pool or event loop never answers).
    expect(percentile(latencies.health, 99)).toBeLessThan(5_000);
    expect(percentile(latencies.command, 99)).toBeLessThan(10_000);
    expect(peak - idle.rss).toBeLessThan(64 * MiB);
    expect(treeFds()).toEqual([]);
  }, 180_000);
});

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}
