import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { MAX_POLL_INTERVAL_MS } from '../../src/ports/port-table.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';

const LISTENER = join(import.meta.dirname, 'listener.mjs');

interface Listener {
  child: ChildProcess;
  port: number;
  /** The `sleep` that shares the socket (--share). */
  sharer?: number;
}

const started: number[] = [];

async function listen(protocol: 'tcp' | 'udp', host: string, share = false): Promise<Listener> {
  const child = spawn(process.execPath, [LISTENER, protocol, host, ...(share ? ['--share'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] });
  started.push(child.pid!);
  const line = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`listener exited with ${code}`)));
    createInterface({ input: child.stdout! }).once('line', resolve);
  });
  const [port, sharer] = line.split(' ').map(Number);
  if (sharer) started.push(sharer);
  return { child, port: port!, sharer };
}

function kill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** `ss -ltnup` (listening TCP, unconnected UDP, with their processes): one `protocol address port` per socket any of `pids` holds. */
function ssSockets(pids: Set<number>): string[] {
  const out = execFileSync('ss', ['-ltnupH'], { encoding: 'utf8' });
  const found: string[] = [];
  for (const line of out.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 6) continue;
    const holders = [...line.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));
    if (!holders.some((pid) => pids.has(pid))) continue;
    const local = fields[4]!;
    const colon = local.lastIndexOf(':');
    const address = local.slice(0, colon).replace(/^\[|\]$/g, '').replace(/%.*$/, '');
    found.push(`${fields[0]} ${address} ${local.slice(colon + 1)}`);
  }
  return found.sort();
}

let envd: TestServer;
let dir: string;
beforeAll(async () => {
  envd = await startServer();
  dir = mkdtempSync(join(tmpdir(), 'envd-ports-'));
});
afterAll(async () => {
  started.forEach(kill);
  await envd?.close();
  rmSync(dir, { recursive: true, force: true });
});

const ports = async () => (await envd.json<{ ports: any[] }>('GET', '/ports')).body.ports;

describe('GET /ports', () => {
  it('lists TCP over IPv4 and IPv6 and bound UDP sockets with their process, command line and user, as ss -ltnup does', async () => {
    const listeners = await Promise.all([listen('tcp', '127.0.0.1'), listen('tcp', '::1'), listen('udp', '127.0.0.1'), listen('udp', '::1'), listen('tcp', '0.0.0.0')]);
    const pids = new Set(listeners.map((l) => l.child.pid!));
    const listed = (await ports()).filter((p) => pids.has(p.pid));
    const expected = [
      ['tcp', '127.0.0.1', listeners[0]!.port],
      ['tcp', '::1', listeners[1]!.port],
      ['udp', '127.0.0.1', listeners[2]!.port],
      ['udp', '::1', listeners[3]!.port],
      ['tcp', '0.0.0.0', listeners[4]!.port],
    ];
    for (const [protocol, address, port] of expected) {
      const entry = listed.find((p) => p.protocol === protocol && p.address === address && p.port === port);
      expect(entry, `${protocol} ${address} ${port}`).toMatchObject({ command_pid: null, service: null, user: 'root' });
      expect(entry.cmd).toContain('listener.mjs');
    }
    expect(listed.map((p) => `${p.protocol} ${p.address} ${p.port}`).sort()).toEqual(ssSockets(pids));
  });

  it('names the topmost process when a process shares its socket with a child it started after the bind, and the child once the parent is gone', async () => {
    const listener = await listen('tcp', '127.0.0.1', true);
    const entry = (await ports()).find((p) => p.port === listener.port && p.protocol === 'tcp');
    expect(entry.pid).toBe(listener.child.pid);
    expect(ssSockets(new Set([listener.sharer!]))).toEqual([`tcp 127.0.0.1 ${listener.port}`]);
    kill(listener.child.pid!);
    await waitFor(async () => (await ports()).find((p) => p.port === listener.port)?.pid === listener.sharer, 5_000, 'the sharer named');
    expect((await ports()).find((p) => p.port === listener.port).cmd).toBe('sleep 300');
  });

  it("names the command whose tree holds it: a listener in a child of a child of a command", async () => {
    const portFile = join(dir, 'port');
    const cmd = `sh -c '${process.execPath} ${LISTENER} tcp 127.0.0.1 --port-file ${portFile}; true'`;
    const run = await envd.json('POST', '/commands', { cmd, background: true });
    expect(run.status).toBe(200);
    const commandPid = run.body.pid;
    await waitFor(() => {
      try {
        return readFileSync(portFile, 'utf8').endsWith('\n');
      } catch {
        return false;
      }
    }, 10_000, 'the port file');
    const port = Number(readFileSync(portFile, 'utf8'));
    const entry = (await ports()).find((p) => p.port === port);
    expect(entry.pid).not.toBe(commandPid);
    expect(entry.command_pid).toBe(commandPid);
    await envd.call('DELETE', `/commands/${commandPid}`);
  });

  it("names the service whose current run holds it", async () => {
    const portFile = join(dir, 'service-port');
    const put = await envd.json('PUT', '/services/ports-web', { cmd: `${process.execPath} ${LISTENER} tcp 127.0.0.1 --port-file ${portFile}`, restart: 'no' });
    expect(put.status).toBe(201);
    try {
      await waitFor(() => {
        try {
          return readFileSync(portFile, 'utf8').endsWith('\n');
        } catch {
          return false;
        }
      }, 10_000, 'the port file');
      const port = Number(readFileSync(portFile, 'utf8'));
      await waitFor(async () => (await ports()).find((p) => p.port === port)?.service === 'ports-web', 5_000, 'the port named by its service');
      const entry = (await ports()).find((p) => p.port === port);
      expect(entry.command_pid).toBe((await envd.json('GET', '/services/ports-web')).body.pid);
    } finally {
      await envd.call('DELETE', '/services/ports-web');
    }
  });

  it('leaves out sockets that are gone', async () => {
    const listener = await listen('tcp', '127.0.0.1');
    expect((await ports()).some((p) => p.port === listener.port)).toBe(true);
    kill(listener.child.pid!);
    await waitFor(async () => !(await ports()).some((p) => p.port === listener.port), 5_000, 'the port gone');
  });
});

describe('GET /ports/watch', () => {
  it('sends ready with the open ports, then open and close as listeners come and go, each within a poll', async () => {
    const before = await listen('tcp', '127.0.0.1');
    const abort = new AbortController();
    const response = await envd.call('GET', '/ports/watch', undefined, { signal: abort.signal });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
    const events = readEvents(response);
    const next = async (): Promise<SseEvent> => (await events.next()).value as SseEvent;
    const ready = await next();
    expect(ready.event).toBe('ready');
    expect((ready.data as any).ports.some((p: any) => p.port === before.port && p.pid === before.child.pid)).toBe(true);
    expect(envd.app.envd.ports.table.polling).toBe(true);

    // The listener's own event: other processes on this machine may use the same port number elsewhere.
    const until = async (event: string, port: number, pid: number) => {
      for (;;) {
        const got = await next();
        if (got.event === event && (got.data as any).port === port && (got.data as any).pid === pid) return { data: got.data as any, at: performance.now() };
      }
    };
    const listenedAt = performance.now();
    const udp = await listen('udp', '::1');
    const opened = await until('open', udp.port, udp.child.pid!);
    expect(opened.data).toMatchObject({ protocol: 'udp', address: '::1', pid: udp.child.pid });
    // The process start is inside this figure; a poll waits at most MAX_POLL_INTERVAL_MS (on a big
    // host, where /proc/net is slow: 40 ms in a small guest). Generous: a loaded CI machine makes it.
    expect(opened.at - listenedAt).toBeLessThan(MAX_POLL_INTERVAL_MS + 3_000);
    const killedAt = performance.now();
    kill(udp.child.pid!);
    const closed = await until('close', udp.port, udp.child.pid!);
    expect(closed.data).toMatchObject({ protocol: 'udp', address: '::1', pid: udp.child.pid });
    expect(closed.at - killedAt).toBeLessThan(MAX_POLL_INTERVAL_MS + 2_000);
    abort.abort();
    await waitFor(() => !envd.app.envd.ports.table.polling, 5_000, 'polling to stop with the last watch');
  });
});

describe('the poll interval', () => {
  it('stretches past POLL_INTERVAL_MS only as far as keeps polling under POLL_CPU_SHARE of a core, and never past MAX_POLL_INTERVAL_MS', async () => {
    const { PortTable, POLL_INTERVAL_MS, POLL_CPU_SHARE } = await import('../../src/ports/port-table.js');
    const lookups = { commandOf: () => null, serviceOf: () => null };
    const timed = (ms: number) => {
      // A read that takes `ms` by the table's clock: the clock moves that much while it runs.
      let clock = 0;
      const table = new PortTable(
        lookups,
        () => {
          clock += ms;
          return [];
        },
        POLL_INTERVAL_MS,
        () => clock,
      );
      table.refresh();
      return table.nextIntervalMs;
    };
    expect(timed(0)).toBe(POLL_INTERVAL_MS);
    expect(timed(POLL_INTERVAL_MS * POLL_CPU_SHARE)).toBe(POLL_INTERVAL_MS);
    expect(timed(3)).toBe(3 / POLL_CPU_SHARE);
    expect(timed(50)).toBe(MAX_POLL_INTERVAL_MS);
  });
});

describe('the tracking limit', () => {
  it('keeps at most its limit of sockets, reads no further, and says the list is truncated', async () => {
    const { PortTable } = await import('../../src/ports/port-table.js');
    const { readBoundSockets } = await import('../../src/ports/proc-net.js');
    const asked: number[] = [];
    // Inodes no process holds: owners are looked for once, and not found.
    const fake = (limit: number) => {
      asked.push(limit);
      return Array.from({ length: Math.min(limit, 8) }, (_, i) => ({ protocol: 'udp' as const, address: '127.0.0.1', port: 40_000 + i, inode: 4_000_000_000 + i, uid: 0 }));
    };
    const table = new PortTable({ commandOf: () => null, serviceOf: () => null }, fake, 40, () => performance.now(), 5);
    const listed = table.list();
    expect(listed.map((p) => p.port)).toEqual([40_000, 40_001, 40_002, 40_003, 40_004]);
    expect(table.truncated).toBe(true);
    expect(asked).toEqual([6]);
    // The real reader stops at its limit too.
    expect(readBoundSockets(1).length).toBeLessThanOrEqual(1);
    const all = await envd.json('GET', '/ports');
    expect(all.body.truncated).toBeUndefined();
  });
});
