// The netlink port watch (envd-holder --watch-sockets, src/ports/socket-watch.ts)
// against the /proc/net reader it replaces while someone watches: the same
// sockets, changes seen, and the fallback to polling where netlink fails.
import { spawn } from 'node:child_process';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOLDER_BINARY } from '../helpers/holder.js';
import { PortTable, type PortEntry } from '../../src/ports/port-table.js';
import { readBoundSockets, type BoundSocket } from '../../src/ports/proc-net.js';
import { parseSocketLine, socketWatcher } from '../../src/ports/socket-watch.js';

const keyOf = (s: BoundSocket) => `${s.protocol} ${s.address} ${s.port} ${s.inode} ${s.uid}`;
const keys = (sockets: BoundSocket[]) => sockets.map(keyOf).sort();

const servers: Server[] = [];
const udps: UdpSocket[] = [];

function tcp(host: string): Promise<number> {
  const server = createServer();
  servers.push(server);
  return new Promise((resolve) => server.listen(0, host, () => resolve((server.address() as { port: number }).port)));
}

function udp(host: string): Promise<number> {
  const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
  udps.push(socket);
  return new Promise((resolve) => socket.bind(0, host, () => resolve(socket.address().port)));
}

/** Runs a watch until `done(set)` is true for one of its sets (or 5 s pass): that set. */
async function watchUntil(done: (set: BoundSocket[]) => boolean): Promise<BoundSocket[]> {
  let stop = () => {};
  const found = new Promise<BoundSocket[]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no such set within 5 s')), 5_000);
    const watch = socketWatcher(HOLDER_BINARY)(10, 65_536, {
      onSet: (set) => done(set) && (clearTimeout(timer), resolve(set)),
      onFail: (reason) => reject(new Error(reason)),
    });
    stop = () => watch.stop();
  });
  try {
    return await found;
  } finally {
    stop();
  }
}

let ports: Record<string, number>;

beforeAll(async () => {
  ports = {
    tcp4: await tcp('127.0.0.1'),
    tcp6: await tcp('::1'),
    tcpAny: await tcp('::'),
    udp4: await udp('127.0.0.1'),
    udp6: await udp('::1'),
  };
});

afterAll(() => {
  for (const server of servers) server.close();
  for (const socket of udps) socket.close();
});

describe('envd-holder --watch-sockets', () => {
  it('lists the same sockets as /proc/net: protocol, address text, port, inode and uid', async () => {
    // Other processes on the machine open and close sockets meanwhile: a set equal to a read of /proc/net just after it is what is asked.
    let proc: BoundSocket[] = [];
    const set = await watchUntil((candidate) => {
      proc = readBoundSockets();
      return keys(candidate).join('\n') === keys(proc).join('\n');
    });
    expect(keys(set)).toEqual(keys(proc));
    // (Another envd on this machine may forward these loopback sockets to its own addresses: only the addresses bound here count.)
    const bound = ['127.0.0.1', '::1', '::'];
    const mine = set.filter((s) => Object.values(ports).includes(s.port) && bound.includes(s.address)).map((s) => `${s.protocol} ${s.address} ${s.port}`);
    expect(mine.sort()).toEqual(
      [`tcp 127.0.0.1 ${ports.tcp4}`, `tcp ::1 ${ports.tcp6}`, `tcp :: ${ports.tcpAny}`, `udp 127.0.0.1 ${ports.udp4}`, `udp ::1 ${ports.udp6}`].sort(),
    );
  });

  it('writes a new set when a socket opens and when it closes', async () => {
    const port = await tcp('127.0.0.1');
    await watchUntil((set) => set.some((s) => s.port === port && s.protocol === 'tcp'));
    await new Promise((resolve) => servers.pop()!.close(resolve));
    await watchUntil((set) => !set.some((s) => s.port === port && s.protocol === 'tcp'));
  });

  it('writes at most MAX_SOCKETS lines a set', async () => {
    const child = spawn(HOLDER_BINARY, ['--watch-sockets', '40', '1'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines: string[] = [];
    await new Promise<void>((resolve) => {
      const input = createInterface({ input: child.stdout });
      input.on('line', (line) => (lines.push(line), line === '.' && (input.close(), resolve())));
    });
    child.kill('SIGKILL');
    expect(lines).toHaveLength(2);
    expect(parseSocketLine(lines[0]!)).toBeDefined();
  });

  it('ends when its stdin (envd) closes', async () => {
    const child = spawn(HOLDER_BINARY, ['--watch-sockets', '1000', '10'], { stdio: ['pipe', 'ignore', 'inherit'] });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    await new Promise((resolve) => setTimeout(resolve, 100));
    child.stdin.end();
    // Well before its 1 s wait would end on its own (it never would: the wait repeats).
    expect(await exited).toBe(0);
  });

  it.each([[[]], [['0', '10']], [['40', '0']], [['40', 'x']], [['1001', '10']], [['40', '10', 'more']]])('refuses arguments %j with status 2', async (args) => {
    const child = spawn(HOLDER_BINARY, ['--watch-sockets', ...args], { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    expect(await new Promise((resolve) => child.once('close', resolve))).toBe(2);
    expect(stderr).toMatch(/^usage: envd-holder --watch-sockets/);
  });
});

describe('parseSocketLine', () => {
  it('takes PROTOCOL ADDRESS PORT INODE UID and nothing else', () => {
    expect(parseSocketLine('udp ::ffff:127.0.0.1 53 4242 1000')).toEqual({ protocol: 'udp', address: '::ffff:127.0.0.1', port: 53, inode: 4242, uid: 1000 });
    for (const bad of ['', '.', 'sctp ::1 1 2 3', 'tcp ::1 1 2', 'tcp ::1 1 2 3 4', 'tcp ::1 x 2 3', 'tcp ::1 -1 2 3']) expect(parseSocketLine(bad)).toBeUndefined();
  });
});

describe('PortTable with the netlink watch', () => {
  it('sees a listen() through the watch, not by polling', async () => {
    const table = new PortTable({ commandOf: () => null, serviceOf: () => null });
    table.startSocketWatch = socketWatcher(HOLDER_BINARY);
    const opened: PortEntry[] = [];
    const unsubscribe = table.subscribe({ onOpen: (entry) => opened.push(entry), onClose: () => {} });
    try {
      expect(table.polling).toBe(true);
      const port = await tcp('127.0.0.1');
      await expect.poll(() => opened.some((entry) => entry.port === port), { timeout: 5_000 }).toBe(true);
      expect(opened.find((entry) => entry.port === port)).toMatchObject({ protocol: 'tcp', address: '127.0.0.1', pid: process.pid });
    } finally {
      unsubscribe();
    }
    expect(table.polling).toBe(false);
  });

  it('falls back to polling /proc/net, told once, when the watch cannot start', async () => {
    const table = new PortTable({ commandOf: () => null, serviceOf: () => null });
    table.startSocketWatch = socketWatcher('/nonexistent/envd-holder');
    const failures: string[] = [];
    table.onSocketWatchFailed = (reason) => failures.push(reason);
    const opened: number[] = [];
    const unsubscribe = table.subscribe({ onOpen: (entry) => opened.push(entry.port), onClose: () => {} });
    try {
      await expect.poll(() => failures.length, { timeout: 5_000 }).toBe(1);
      expect(table.polling).toBe(true);
      const port = await udp('127.0.0.1');
      await expect.poll(() => opened.includes(port), { timeout: 5_000 }).toBe(true);
    } finally {
      unsubscribe();
    }
    // A later watcher polls at once rather than trying netlink again.
    const again = table.subscribe({ onOpen: () => {}, onClose: () => {} });
    again();
    expect(failures).toHaveLength(1);
  });
});
