import { createSocket, type Socket } from 'node:dgram';
import { Writable } from 'node:stream';
import { afterAll, afterEach, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { LoopbackForwarder } from '../../src/ports/loopback-forward.js';
import { PortTable } from '../../src/ports/port-table.js';
import { UdpFlowBudget } from '../../src/ports/udp-forward.js';
import { waitFor } from '../helpers/proc.js';

/** The second loopback address the forward listens on here (the guest's own address in a VM). */
const FORWARD = '127.0.0.2';
const LIMIT = 3;
/** Long enough that a loaded machine keeps LIMIT flows open while the test opens them one after another. */
const IDLE_MS = 1_000;

const lines: string[] = [];
const log = createLogger('info', new Writable({ write: (chunk, _encoding, done) => (lines.push(String(chunk)), done()) }));
const table = new PortTable({ commandOf: () => null, serviceOf: () => null });
const flows = new UdpFlowBudget(LIMIT, IDLE_MS);
const forwarder = new LoopbackForwarder(table, () => [FORWARD], log, undefined, undefined, flows);
forwarder.enable(true);
const sockets: Socket[] = [];
afterEach(() => {
  for (const socket of sockets.splice(0)) socket.close();
});
afterAll(() => forwarder.enable(false));

function udp(type: 'udp4' | 'udp6' = 'udp4'): Socket {
  const socket = createSocket(type);
  sockets.push(socket);
  return socket;
}

/** A UDP server on `address` that answers each datagram with `<its text> from <the sender's port>`; its port, and the peers it saw. */
async function echoServer(address: string): Promise<{ port: number; peers: Set<number>; socket: Socket }> {
  const socket = udp(address.includes(':') ? 'udp6' : 'udp4');
  const peers = new Set<number>();
  socket.on('message', (datagram, from) => {
    peers.add(from.port);
    socket.send(`${datagram} from ${from.port}`, from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, address, resolve));
  return { port: socket.address().port, peers, socket };
}

/**
 * Sends `text` to host:port from `client` and waits up to `ms` for its answer: its text, or undefined.
 * Only the echo of this `text` counts: on a loaded machine the answer to an earlier probe can arrive late.
 */
function ask(client: Socket, host: string, port: number, text: string, ms = 300): Promise<string | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => (client.off('message', onMessage), resolve(undefined)), ms);
    const onMessage = (answer: Buffer) => {
      if (!String(answer).startsWith(`${text} from `)) return;
      clearTimeout(timer);
      client.off('message', onMessage);
      resolve(String(answer));
    };
    client.on('message', onMessage);
    client.send(text, port, host);
  });
}

/** Asks until the forward answers (it starts within a poll of the bind). */
async function forwarded(client: Socket, port: number): Promise<void> {
  await waitFor(async () => (await ask(client, FORWARD, port, 'probe', 100)) !== undefined, 5_000, `${FORWARD}:${port} (udp) to answer`);
}

it('makes a UDP socket bound to 127.0.0.1 reachable on the other address: one flow per client, answers to the client that asked', async () => {
  const server = await echoServer('127.0.0.1');
  const [a, b] = [udp(), udp()];
  await forwarded(a, server.port);
  await forwarded(b, server.port);
  const [answerA, answerB] = await Promise.all([ask(a, FORWARD, server.port, 'from a'), ask(b, FORWARD, server.port, 'from b')]);
  expect(answerA).toMatch(/^from a from \d+$/);
  expect(answerB).toMatch(/^from b from \d+$/);
  // The server saw two peers (the two flows' upstream sockets), and each answer went back to its own client.
  expect(answerA!.split(' ').at(-1)).not.toBe(answerB!.split(' ').at(-1));
  expect(server.peers.size).toBe(2);
  // A large datagram passes whole.
  const big = 'x'.repeat(60_000);
  expect((await ask(a, FORWARD, server.port, big))?.startsWith(big)).toBe(true);
});

it('forwards a ::1 UDP socket too', async () => {
  const server = await echoServer('::1');
  const client = udp();
  await forwarded(client, server.port);
  expect(await ask(client, FORWARD, server.port, 'six')).toMatch(/^six from \d+$/);
});

it(`closes a flow idle for ${IDLE_MS} ms; the client's next datagram opens a new one`, async () => {
  const server = await echoServer('127.0.0.1');
  const client = udp();
  await forwarded(client, server.port);
  const first = await ask(client, FORWARD, server.port, 'one');
  await waitFor(() => flows.open === 0, 5_000, 'the idle flow to close');
  const second = await ask(client, FORWARD, server.port, 'two');
  // A new upstream socket: the server sees another peer port.
  expect(second?.split(' ').at(-1)).not.toBe(first?.split(' ').at(-1));
});

it(`drops the datagrams of new clients past ${LIMIT} flows, says so once, and takes them again once flows end`, async () => {
  await waitFor(() => flows.open === 0, 5_000, 'earlier flows to close');
  const server = await echoServer('127.0.0.1');
  const clients = Array.from({ length: LIMIT }, () => udp());
  for (const client of clients) await forwarded(client, server.port);
  expect(flows.open).toBe(LIMIT);
  const late = udp();
  expect(await ask(late, FORWARD, server.port, 'late')).toBeUndefined();
  expect(await ask(late, FORWARD, server.port, 'late again')).toBeUndefined();
  expect(lines.filter((line) => line.includes('too many forwarded flows')).length).toBe(1);
  // The open flows still work meanwhile.
  expect(await ask(clients[0]!, FORWARD, server.port, 'still')).toMatch(/^still from/);
  await waitFor(() => flows.open === 0, 5_000, 'the flows to go idle');
  expect(await ask(late, FORWARD, server.port, 'now')).toMatch(/^now from/);
});

it("stops at the loopback socket's close: the address and port are free again", async () => {
  const server = await echoServer('127.0.0.1');
  const client = udp();
  await forwarded(client, server.port);
  server.socket.close();
  sockets.splice(sockets.indexOf(server.socket), 1);
  await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        const probe = createSocket('udp4');
        probe.once('error', () => (probe.close(), resolve(false)));
        probe.bind({ port: server.port, address: FORWARD, exclusive: true }, () => (probe.close(), resolve(true)));
      }),
    5_000,
    `${FORWARD}:${server.port} (udp) to be free`,
  );
  await waitFor(() => flows.open === 0, 5_000, 'its flows to close');
});
