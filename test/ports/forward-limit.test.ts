import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { LoopbackForwarder } from '../../src/ports/loopback-forward.js';
import { PortTable } from '../../src/ports/port-table.js';
import { waitFor } from '../helpers/proc.js';

const LIMIT = 3;
const lines: string[] = [];
const log = createLogger('info', new Writable({ write: (chunk, _encoding, done) => (lines.push(String(chunk)), done()) }));
const table = new PortTable({ commandOf: () => null, serviceOf: () => null });
const forwarder = new LoopbackForwarder(table, () => ['127.0.0.2'], log, LIMIT);
const held: Socket[] = [];
const server = createServer((socket) => {
  held.push(socket);
  socket.write('hi');
});
afterAll(() => {
  forwarder.enable(false);
  for (const socket of held) socket.destroy();
  server.close();
});

/** Connects through the forward: 'open' once the server's greeting came, 'reset' if the forward refused it. */
function through(port: number): Promise<{ outcome: 'open' | 'reset'; socket: Socket }> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.2', port });
    socket.once('data', () => resolve({ outcome: 'open', socket }));
    socket.once('error', () => resolve({ outcome: 'reset', socket }));
    socket.once('end', () => resolve({ outcome: 'reset', socket }));
  });
}

it(`resets a forwarded connection past the limit (${LIMIT} here), says so once, and takes new ones when one ends`, async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  forwarder.enable(true);
  await waitFor(() => table.entries().some((entry) => entry.address === '127.0.0.2' && entry.port === port), 5_000, 'the forward');
  const open = [];
  for (let i = 0; i < LIMIT; i++) open.push(await through(port));
  expect(open.map((c) => c.outcome)).toEqual(Array(LIMIT).fill('open'));
  expect(forwarder.connectionCount).toBe(LIMIT);
  expect((await through(port)).outcome).toBe('reset');
  expect((await through(port)).outcome).toBe('reset');
  expect(lines.filter((line) => line.includes('too many open at once'))).toHaveLength(1);
  open[0]!.socket.destroy();
  await waitFor(() => forwarder.connectionCount === LIMIT - 1, 5_000, 'a connection to end');
  const again = await through(port);
  expect(again.outcome).toBe('open');
  again.socket.destroy();
  for (const { socket } of open) socket.destroy();
  await waitFor(() => forwarder.connectionCount === 0, 5_000, 'every connection to end');
});
