// Ports and the loopback forward (issue 39), on dist/envd:
//  - port event latency: listen()/close() in this process → the `open`/`close` event on GET /ports/watch;
//  - what watching costs: envd's CPU and RSS with a watch open against the same envd idle (forwarding off);
//  - forward throughput: one connection's download through 127.0.0.2 (envd's forward) against 127.0.0.1 direct;
//  - forward round-trip overhead: p50 of a 64-byte echo through the forward less direct;
//  - memory of 1,000 idle forwarded connections: envd's RSS with them open less before.
// The forward figures are taken A/B in the same run: steered in the kernel (BPF sk_lookup, the default) through
// 127.0.0.2, and relayed (a second envd with ENVD_FORWARD_STEERING=off) through 127.0.0.3, interleaved with direct.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { readSse, send } from './lib/client.mjs';
import { rssBytes, startEnvd } from './lib/envd-process.mjs';
import { atLeast, atMost, makeRow, printRow, runIfMain } from './lib/figure.mjs';
import { median, percentile } from './lib/stats.mjs';

const FORWARD = '127.0.0.2';
const RELAYED = '127.0.0.3';
const EVENT_DEADLINE_MS = 5_000;
const MIB = 1024 * 1024;

/** CPU time (user + system) of a process, in ms. */
function cpuMs(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // clock ticks at USER_HZ 100
}

/** Live children of a process. */
function childPids(parent) {
  const pids = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (Number(readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1].split(' ')[1]) === parent) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** The `envd-holder --watch-sockets` child of envd (the netlink watch), or undefined when envd polls /proc/net itself. */
function socketWatcherPid(envdPid) {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1].split(' ')[1]);
      if (ppid === envdPid && readFileSync(`/proc/${name}/cmdline`, 'utf8').includes('--watch-sockets')) return Number(name);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Opens GET /ports/watch; resolves once `ready` came, with { close() }; `onEvent(event, data)` for each open/close. */
async function watchPorts(envd, onEvent) {
  const controller = new AbortController();
  const res = await send(envd, 'GET', '/ports/watch', { read: false, signal: controller.signal });
  if (res.statusCode !== 200) throw new Error(`GET /ports/watch answered ${res.statusCode}`);
  let ready;
  const armed = new Promise((resolve) => (ready = resolve));
  const ended = readSse(res, (event, data) => (event === 'ready' ? ready() : onEvent(event, JSON.parse(data)))).catch(() => {});
  await armed;
  return {
    async close() {
      controller.abort();
      res.destroy();
      await ended;
    },
  };
}

/** A server in its own process on 127.0.0.1: `download BYTES` (each connection gets that many bytes, then FIN), `echo`, or `hold` (accepts and keeps). */
async function startPeer(mode, bytes = 0) {
  const script = `
    const { createServer } = require('node:net');
    const [mode, bytes] = process.argv.slice(1);
    const block = Buffer.alloc(1 << 20, 7);
    const server = createServer({ noDelay: true }, (socket) => {
      socket.on('error', () => {}); // a probe that left at once
      if (mode === 'echo') return socket.pipe(socket);
      if (mode === 'hold') return;
      let left = Number(bytes);
      const more = () => { while (left > 0) { const n = Math.min(left, block.length); left -= n; if (!socket.write(n === block.length ? block : block.subarray(0, n))) return socket.once('drain', more); } socket.end(); };
      more();
    });
    server.listen(0, '127.0.0.1', () => console.log(server.address().port));`;
  const child = spawn(process.execPath, ['-e', script, mode, String(bytes)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = Number(await new Promise((resolve) => createInterface({ input: child.stdout }).once('line', resolve)));
  return { port, stop: () => child.kill('SIGKILL') };
}

async function waitForForward(port, host = FORWARD) {
  const deadline = performance.now() + EVENT_DEADLINE_MS;
  for (;;) {
    const ok = await new Promise((resolve) => {
      const socket = connect({ host, port }, () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (performance.now() > deadline) throw new Error(`${host}:${port} not forwarded within ${EVENT_DEADLINE_MS} ms`);
    await sleep(10);
  }
}

/** Reads one connection's download to its end: bytes per second. */
function download(host, port) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let bytes = 0;
    const socket = connect({ host, port });
    socket.on('data', (chunk) => (bytes += chunk.length));
    socket.once('end', () => resolve(bytes / ((performance.now() - started) / 1000)));
    socket.once('error', reject);
  });
}

/** `count` 64-byte round trips over one connection: each one's time in ms. */
async function roundTrips(host, port, count) {
  const socket = connect({ host, port, noDelay: true });
  await new Promise((resolve) => socket.once('connect', resolve));
  const message = Buffer.alloc(64, 1);
  const samples = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    let got = 0;
    await new Promise((resolve) => {
      const onData = (chunk) => {
        got += chunk.length;
        if (got >= message.length) {
          socket.off('data', onData);
          resolve();
        }
      };
      socket.on('data', onData);
      socket.write(message);
    });
    samples.push(performance.now() - started);
  }
  socket.destroy();
  return samples;
}

async function eventLatency(envd, quick) {
  const rounds = quick ? 20 : 60;
  const waiting = new Map();
  const watch = await watchPorts(envd, (event, data) => waiting.get(`${event} ${data.port}`)?.(performance.now()));
  const opens = [];
  const closes = [];
  const seen = (key) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${key} event within ${EVENT_DEADLINE_MS} ms`)), EVENT_DEADLINE_MS);
      waiting.set(key, (at) => (clearTimeout(timer), waiting.delete(key), resolve(at)));
    });
  try {
    for (let i = 0; i < rounds; i++) {
      const server = createServer();
      const listenedAt = performance.now();
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address();
      opens.push((await seen(`open ${port}`)) - listenedAt);
      const closedAt = performance.now();
      server.close();
      closes.push((await seen(`close ${port}`)) - closedAt);
      // Off the poll's phase: each round starts at another point of the interval.
      await sleep(7 + (i % 5) * 9);
    }
  } finally {
    await watch.close();
  }
  const all = [...opens, ...closes];
  const note = `${rounds} listens and closes; open p50 ${median(opens).toFixed(1)}, close p50 ${median(closes).toFixed(1)}, p99 ${percentile(all, 0.99).toFixed(1)}, max ${Math.max(...all).toFixed(1)} ms`;
  return [makeRow({ name: 'port event latency p50', unit: 'ms', envd: median(all), goal: atMost(50, 'ms'), note })];
}

async function watchCost(quick) {
  const windowMs = quick ? 5_000 : 15_000;
  const envd = await startEnvd({ executable: true, args: ['--forward-loopback', 'off'] });
  try {
    // Once first: what the first watch compiles and allocates for good is no cost of watching.
    await (await watchPorts(envd, () => {})).close();
    await sleep(1_000);
    const idleRss = rssBytes(envd.pid);
    let before = cpuMs(envd.pid);
    await sleep(windowMs);
    const idleCpu = ((cpuMs(envd.pid) - before) / windowMs) * 100;
    let events = 0;
    const watch = await watchPorts(envd, () => events++);
    await sleep(1_000);
    // The watch's cost is envd's and its netlink child's together (none: envd polls /proc/net itself).
    const watcher = socketWatcherPid(envd.pid);
    const bothCpuMs = () => cpuMs(envd.pid) + (watcher ? cpuMs(watcher) : 0);
    before = bothCpuMs();
    const childBefore = watcher ? cpuMs(watcher) : 0;
    events = 0;
    await sleep(windowMs);
    const watchCpu = ((bothCpuMs() - before) / windowMs) * 100;
    const childCpu = watcher ? ((cpuMs(watcher) - childBefore) / windowMs) * 100 : 0;
    // Ports other processes on the machine open and close are events envd looks owners up for: the cost of events, not of waiting for them.
    const eventsSeen = events;
    const watchRss = rssBytes(envd.pid);
    const watcherRss = watcher ? rssBytes(watcher) : 0;
    await watch.close();
    const how = watcher
      ? `envd + its envd-holder --watch-sockets child (netlink; child ${childCpu.toFixed(2)} %, RSS ${(watcherRss / MIB).toFixed(2)} MiB)`
      : 'envd polling /proc/net';
    const cpuNote = `CPU over ${windowMs / 1000} s with one watch open, ${how}; ${eventsSeen} port events meanwhile (other processes on the machine); baseline the same envd idle; 1 tick = ${(100 / (windowMs / 10)).toFixed(2)} %`;
    return [
      makeRow({ name: 'ports watch CPU', unit: '% of a core', envd: watchCpu, baseline: idleCpu, ratio: null, goal: atMost(1, '% of a core'), note: cpuNote }),
      makeRow({ name: 'ports watch memory over idle', unit: 'MiB', envd: (watchRss - idleRss) / MIB, goal: atMost(2, 'MiB'), note: 'RSS with the watch open less before it' }),
    ];
  } finally {
    await envd.stop();
  }
}

async function forwardFigures(quick) {
  const envd = await startEnvd({ executable: true, extraEnv: { ENVD_FORWARD_LOOPBACK: 'on', ENVD_FORWARD_ADDRESS: FORWARD } });
  const relayedEnvd = await startEnvd({ executable: true, extraEnv: { ENVD_FORWARD_LOOPBACK: 'on', ENVD_FORWARD_ADDRESS: RELAYED, ENVD_FORWARD_STEERING: 'off' } });
  const rows = [];
  const ready = async (port) => {
    await waitForForward(port, FORWARD);
    await waitForForward(port, RELAYED);
    // Steering is asked for once envd's own listener is up: a moment after the address first accepts.
    await sleep(200);
  };
  try {
    // Throughput: best of direct, steered, relayed in turn, five times (single downloads on this 2-CPU VM vary 2× run to run).
    const size = (quick ? 256 : 1024) * MIB;
    const downloader = await startPeer('download', size);
    try {
      await ready(downloader.port);
      const direct = [];
      const steered = [];
      const relayed = [];
      for (let i = 0; i < 5; i++) {
        direct.push(await download('127.0.0.1', downloader.port));
        steered.push(await download(FORWARD, downloader.port));
        relayed.push(await download(RELAYED, downloader.port));
      }
      const best = (list) => Math.max(...list) / MIB;
      const note = `${size / MIB} MiB downloads, best of 5 each, direct / steered / relayed in turn; all: direct ${direct.map((b) => (b / MIB).toFixed(0)).join(', ')}, steered ${steered.map((b) => (b / MIB).toFixed(0)).join(', ')}, relayed ${relayed.map((b) => (b / MIB).toFixed(0)).join(', ')} MiB/s`;
      rows.push(
        makeRow({ name: 'forward throughput (steered in the kernel)', unit: 'MiB/s', envd: best(steered), baseline: best(direct), ratio: best(steered) / best(direct), goal: atLeast(0.8), note }),
        makeRow({ name: 'forward throughput (relayed, ENVD_FORWARD_STEERING=off)', unit: 'MiB/s', envd: best(relayed), baseline: best(direct), ratio: best(relayed) / best(direct), goal: atLeast(0.8), note: 'same run' }),
      );
    } finally {
      downloader.stop();
    }

    // Round trips: 64-byte echoes over one connection, direct, steered and relayed in turn.
    const echo = await startPeer('echo');
    try {
      await ready(echo.port);
      const count = quick ? 500 : 2_000;
      const direct = [];
      const steered = [];
      const relayed = [];
      for (let i = 0; i < 2; i++) {
        direct.push(...(await roundTrips('127.0.0.1', echo.port, count)));
        steered.push(...(await roundTrips(FORWARD, echo.port, count)));
        relayed.push(...(await roundTrips(RELAYED, echo.port, count)));
      }
      const row = (name, list) => makeRow({ name, unit: 'ms', envd: median(list) - median(direct), goal: atMost(0.2, 'ms'), note: `64-byte echo: p50 ${median(list).toFixed(3)} ms forwarded, ${median(direct).toFixed(3)} ms direct` });
      rows.push(row('forward round-trip overhead p50 (steered)', steered), row('forward round-trip overhead p50 (relayed)', relayed));
    } finally {
      echo.stop();
    }

    // Memory: 1,000 idle connections through each forward.
    const holder = await startPeer('hold');
    try {
      await ready(holder.port);
      rows.push(await idleMemory(envd, FORWARD, holder.port, 'steered'));
      rows.push(await idleMemory(relayedEnvd, RELAYED, holder.port, 'relayed'));
    } finally {
      holder.stop();
    }

    rows.unshift(...(await eventLatency(envd, quick)));
  } finally {
    await envd.stop();
    await relayedEnvd.stop();
  }
  return rows;
}

/** envd's (and its relay's) memory growth with 1,000 idle connections open through `host`. */
async function idleMemory(envd, host, port, how) {
  const sockets = [];
  const openIdle = async () => {
    for (let i = 0; i < 1_000; i++) {
      const socket = connect({ host, port });
      socket.on('error', () => {});
      sockets.push(socket);
      await new Promise((resolve) => socket.once('connect', resolve));
    }
  };
  try {
    // Once first, opened and closed: the heap's growth to take a thousand accepts at all is paid once in envd's
    // life, not per idle connection.
    const cold = rssBytes(envd.pid);
    await openIdle();
    for (const socket of sockets.splice(0)) socket.destroy();
    await sleep(1_000);
    const warm = rssBytes(envd.pid);
    // Relayed connections live in envd's splice relay (envd-holder --forward): its memory counts too.
    const relayPid = () => childPids(envd.pid).find((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--forward'));
    const relayRss = () => (relayPid() ? rssBytes(relayPid()) : 0);
    const fds = (pid) => (pid ? readdirSync(`/proc/${pid}/fd`).length : 0);
    const before = rssBytes(envd.pid);
    const relayBefore = relayRss();
    const fdsBefore = fds(envd.pid) + fds(relayPid());
    await openIdle();
    await sleep(2_000);
    const after = rssBytes(envd.pid);
    const relayAfter = relayRss();
    // Steered connections never reach envd or its relay: their descriptors stay as they were.
    const fdsAfter = fds(envd.pid) + fds(relayPid());
    const grown = after - before + (relayAfter - relayBefore);
    const note = `envd's RSS ${(before / MIB).toFixed(1)} → ${(after / MIB).toFixed(1)} MiB (${(cold / MIB).toFixed(1)} → ${(warm / MIB).toFixed(1)} MiB over a first thousand opened and closed), its relay's ${(relayBefore / MIB).toFixed(2)} → ${(relayAfter / MIB).toFixed(2)} MiB (counted together); their descriptors ${fdsBefore} → ${fdsAfter}`;
    return makeRow({ name: `memory of 1,000 idle forwarded connections (${how})`, unit: 'MiB', envd: grown / MIB, goal: atMost(8, 'MiB'), note });
  } finally {
    for (const socket of sockets) socket.destroy();
  }
}

export async function run({ quick = false } = {}) {
  const rows = [...(await forwardFigures(quick)), ...(await watchCost(quick))];
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
