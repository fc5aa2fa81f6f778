// Issue 36, item 10: 10,000 `wait` long-polls whose clients hung up held 75 MiB until their command
// ended. Each parked wait may take at most 1 MiB while its client is there, and nothing once it left.
// Measured on dist/envd (the single executable, its deployed V8 flags): its own RSS and anonymous memory.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startEnvdExecutable, waitFor, type EnvdProcess } from '../helpers/proc.js';

/** Parked waits at once: enough that the 7.5 KiB each held before the fix (~37 MiB) stands far above the noise. */
const PARKED = 5_000;
/** The budget per open connection (issue 36). */
const PER_CONNECTION_BYTES = 1024 * 1024;
/**
 * What may stay above idle once every client has gone: allocator noise, not per-connection state
 * (before the fix: +36 MiB anonymous, +42 MiB resident). Resident memory also counts file pages of
 * code first touched meanwhile, hence its looser bound.
 */
const AFTER_ANON_BOUND = 8 * 1024 * 1024;
const AFTER_RSS_BOUND = 16 * 1024 * 1024;
const MiB = 1024 * 1024;

const token = randomBytes(16).toString('hex');
let envd: EnvdProcess;
beforeAll(async () => {
  envd = await startEnvdExecutable([], { ENVD_ACCESS_TOKEN: token });
});
afterAll(async () => {
  await envd?.stop();
});

/** Resident and anonymous resident memory of a process, from /proc/PID/status. */
function memory(pid: number): { rss: number; anon: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { rss: field('VmRSS'), anon: field('RssAnon') };
}

const call = (method: string, path: string, body?: unknown) =>
  fetch(`${envd.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });

/** A raw connection that asks for the wait and never reads: a client that will simply hang up. */
function parkWait(port: number, pid: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(`GET /commands/${pid}/wait HTTP/1.1\r\nhost: envd\r\nauthorization: Bearer ${token}\r\n\r\n`);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

it(`frees every abandoned wait long-poll on hang-up: ${PARKED} parked waits, then their clients gone, while the command runs on`, async () => {
  const envdPid = envd.child.pid!;
  const port = Number(new URL(envd.url).port);
  const started = await call('POST', '/commands', { cmd: 'sleep 600', background: true });
  const { pid } = (await started.json()) as { pid: number };
  try {
    // Warm up the wait path (its code loaded and optimised), so that it is not counted.
    const warm = await Promise.all(Array.from({ length: 200 }, () => parkWait(port, pid)));
    await sleep(500);
    for (const socket of warm) socket.destroy();
    // Idle: envd's reclaim gives the warm-up's garbage back after two quiet ticks (src/memory-reclaim.ts).
    await sleep(8_000);
    const idle = memory(envdPid);

    const sockets: Socket[] = [];
    for (let i = 0; i < PARKED; i += 500) sockets.push(...(await Promise.all(Array.from({ length: Math.min(500, PARKED - i) }, () => parkWait(port, pid)))));
    // Every request has been read once a later one has its 408: envd reads connections in turn.
    expect((await call('GET', `/commands/${pid}/wait?timeout_ms=1`)).status).toBe(408);
    await sleep(1_000);
    const during = memory(envdPid);

    for (const socket of sockets) socket.destroy();
    let after = memory(envdPid);
    // The reclaim's collection comes within ~6 s of the end of load (old code kept it all until the command
    // ended): wait for it to bring anonymous memory back to idle, then judge what is left against the bounds.
    await waitFor(() => (after = memory(envdPid)).anon - idle.anon < 2 * MiB, 30_000, 'memory back at idle after the clients left').catch(() => {});
    await sleep(1_000);
    after = memory(envdPid);
    const mib = (bytes: number) => (bytes / MiB).toFixed(1);
    const delta = (bytes: number) => `${bytes < 0 ? '' : '+'}${mib(bytes)}`;
    console.log(
      `[wait long-polls] ${PARKED} parked: idle RSS ${mib(idle.rss)} MiB (anon ${mib(idle.anon)}), ` +
        `during ${delta(during.rss - idle.rss)} MiB (anon ${delta(during.anon - idle.anon)}, ${((during.anon - idle.anon) / PARKED / 1024).toFixed(1)} KiB each), ` +
        `after hang-up ${delta(after.rss - idle.rss)} MiB (anon ${delta(after.anon - idle.anon)})`,
    );
    expect(during.rss - idle.rss).toBeLessThan(PARKED * PER_CONNECTION_BYTES);
    expect(after.anon - idle.anon).toBeLessThan(AFTER_ANON_BOUND);
    expect(after.rss - idle.rss).toBeLessThan(AFTER_RSS_BOUND);
    // The command ran on, uncollected: its wait still answers it.
    const listed = (await (await call('GET', '/commands')).json()) as { processes: { pid: number; running: boolean }[] };
    expect(listed.processes.find((p) => p.pid === pid)?.running).toBe(true);
  } finally {
    await call('DELETE', `/commands/${pid}`);
  }
}, 90_000);
