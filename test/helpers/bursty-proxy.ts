import { createServer, connect, type Server, type Socket } from 'node:net';
import { seededRandom } from './random.js';

export interface BurstyProxy {
  url: string;
  close(): Promise<void>;
}

/**
 * A TCP proxy in front of `target` (host:port) that reads both ways in
 * bursts: after each read it stops reading for 0-`maxPauseMs` ms at random,
 * so the writer on either side meets backpressure now and then, at places
 * that change from one connection to the next.
 */
export async function startBurstyProxy(target: URL, seed = 1, maxPauseMs = 3): Promise<BurstyProxy> {
  const random = seededRandom(seed);
  const sockets = new Set<Socket>();
  const relay = (from: Socket, to: Socket) => {
    from.on('data', (chunk) => {
      to.write(chunk);
      from.pause();
      setTimeout(() => from.resume(), Math.floor(random() * (maxPauseMs + 1)));
    });
    from.on('end', () => to.end());
    from.on('error', () => to.destroy());
    from.on('close', () => to.destroy());
  };
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    }
    relay(client, upstream);
    relay(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
