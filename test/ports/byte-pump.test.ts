import { createHash } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, expect, it } from 'vitest';
import { ForwardBuffers, pump } from '../../src/ports/byte-pump.js';
import { waitFor } from '../helpers/proc.js';

const CONNECTIONS = 6;
const BYTES_EACH = 24 * 1024 * 1024;
const LIMIT = 256 * 1024;
/** libuv's read size: what one direction may deliver past the limit before everything pauses. */
const CHUNK = 64 * 1024;

const servers: Server[] = [];
afterAll(() => servers.forEach((server) => server.close()));

async function serve(onConnection: (socket: Socket) => void): Promise<number> {
  const server = createServer(onConnection);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Deterministic bytes: block i of every stream is the same, and differs from every other block. */
function block(i: number): Buffer {
  const bytes = Buffer.alloc(64 * 1024, i % 251);
  bytes.writeUInt32LE(i, 0);
  return bytes;
}

it('holds at most the limit and one chunk over all forwards while their readers stall, and then delivers every byte', { timeout: 120_000 }, async () => {
  const buffers = new ForwardBuffers(LIMIT);
  const expected = createHash('sha256');
  for (let i = 0; i < BYTES_EACH / CHUNK; i++) expected.update(block(i));
  const digest = expected.digest('hex');

  const sourcePort = await serve(async (socket) => {
    for (let i = 0; i < BYTES_EACH / CHUNK; i++) if (!socket.write(block(i))) await new Promise((resolve) => socket.once('drain', resolve));
    socket.end();
  });
  const sinks: Socket[] = [];
  const received: Promise<string>[] = [];
  const sinkPort = await serve((socket) => {
    socket.pause(); // a reader that stalls
    sinks.push(socket);
    const hash = createHash('sha256');
    received.push(
      new Promise((resolve) => {
        socket.on('data', (chunk) => hash.update(chunk));
        socket.once('end', () => resolve(hash.digest('hex')));
      }),
    );
  });
  for (let i = 0; i < CONNECTIONS; i++) {
    const from = connect({ host: '127.0.0.1', port: sourcePort });
    const to = connect({ host: '127.0.0.1', port: sinkPort });
    pump(from, to, buffers);
  }
  await waitFor(() => sinks.length === CONNECTIONS, 5_000, 'the sinks');

  let peak = 0;
  const sampler = setInterval(() => (peak = Math.max(peak, buffers.held)), 2);
  // While the readers stall, the kernel's buffers fill, then envd's, up to the limit.
  await waitFor(() => buffers.held > LIMIT / 2, 20_000, 'the forwards to fill up');
  await new Promise((resolve) => setTimeout(resolve, 300));
  peak = Math.max(peak, buffers.held);
  expect(peak).toBeGreaterThan(LIMIT / 2);
  expect(peak).toBeLessThanOrEqual(LIMIT + CHUNK);

  for (const sink of sinks) sink.resume();
  const digests = await Promise.all(received);
  clearInterval(sampler);
  expect(peak).toBeLessThanOrEqual(LIMIT + CHUNK);
  expect(digests).toEqual(Array(CONNECTIONS).fill(digest));
  await waitFor(() => buffers.held === 0, 5_000, 'nothing held');
});
