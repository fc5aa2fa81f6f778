import { createHash, randomBytes } from 'node:crypto';
import { Agent, createServer as createHttpServer, get, type Server as HttpServer } from 'node:http';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';

/** The second loopback address the forward listens on here (the guest's own address in a VM). */
const FORWARD = '127.0.0.2';

let envd: TestServer;
const servers: (Server | HttpServer)[] = [];

/** Every connection the test servers accepted, to end them all at the last test. */
const accepted: Socket[] = [];

async function listening<T extends Server | HttpServer>(server: T, host: string, port = 0): Promise<number> {
  servers.push(server);
  server.on('connection', (socket: Socket) => {
    accepted.push(socket);
    // A probe (accepts()) resets at once; steered, the reset reaches the test's own server, not a relay.
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return (server.address() as AddressInfo).port;
}

/** Whether something accepts a connection at host:port now. */
function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

const forwarded = (port: number) => waitFor(() => accepts(FORWARD, port), 5_000, `${FORWARD}:${port} to accept`);

function getText(url: string, agent?: Agent): Promise<string> {
  return new Promise((resolve, reject) => {
    get(url, { agent }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => (text += chunk));
      response.on('end', () => resolve(text));
    }).once('error', reject);
  });
}

/** Live children of a process. */
function childrenOf(parent: number): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number).filter((pid) => {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return Number(fields[1]) === parent && fields[0] !== 'Z';
    } catch {
      return false;
    }
  });
}

const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');

/** The inodes of the sockets a process holds. */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (target.startsWith('socket:[')) inodes.add(target.slice(8, -1));
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** Whether the TCP connection from `clientPort` to host:port is held (its accepted end) by a socket of envd's process or of the relay: true when the relay's. */
async function answersFrom(host: string, port: number, clientPort: number): Promise<boolean> {
  const hex = (n: number) => n.toString(16).toUpperCase().padStart(4, '0');
  const local = `${host.split('.').map(Number).reverse().map((n) => n.toString(16).toUpperCase().padStart(2, '0')).join('')}:${hex(port)}`;
  const line = readFileSync('/proc/net/tcp', 'utf8').split('\n').find((row) => {
    const fields = row.trim().split(/\s+/);
    return fields[1] === local && fields[2]?.endsWith(`:${hex(clientPort)}`);
  });
  const inode = line?.trim().split(/\s+/)[9];
  const relay = childrenOf(process.pid).find((pid) => cmdline(pid).includes('--forward'))!;
  return inode !== undefined && socketInodes(relay).has(inode) && !socketInodes(process.pid).has(inode);
}

// Every behaviour holds on both paths: steered into the listener in the kernel (BPF sk_lookup), and relayed (--forward-steering off, or a kernel without BPF).
describe.each([
  { path: 'steered in the kernel', forwardSteering: true },
  { path: 'relayed', forwardSteering: false },
])('loopback forward, $path', ({ forwardSteering }) => {
  beforeAll(async () => {
    envd = await startServer({ forwardLoopback: true, forwardAddresses: [FORWARD], forwardSteering });
  });
  afterAll(async () => {
    for (const server of servers.splice(0)) server.close();
    await envd?.close();
  });

  it('makes a 127.0.0.1 HTTP server reachable on the other address within a poll, with keep-alive on one connection', async () => {
    const peers = new Set<number | undefined>();
    const server = createHttpServer((request, response) => {
      peers.add(request.socket.remotePort);
      response.end(`hello ${request.url}`);
    });
    const listenedAt = performance.now();
    const port = await listening(server, '127.0.0.1');
    await forwarded(port);
    // Generous for a loaded CI machine; the bench measures the real figure.
    expect(performance.now() - listenedAt).toBeLessThan(2_000);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    expect(await getText(`http://${FORWARD}:${port}/a`, agent)).toBe('hello /a');
    expect(await getText(`http://${FORWARD}:${port}/b`, agent)).toBe('hello /b');
    // Both requests came over one upstream connection: the forward kept the client's.
    expect(peers.size).toBe(1);
    agent.destroy();
    // envd's own forwarding listener is plumbing, not a port of the guest's.
    // (Other envds on this machine may forward the same listener to its own addresses: only this process's count.)
    const listed = (await envd.json('GET', '/ports')).body.ports.filter((p: any) => p.port === port && p.pid === process.pid);
    expect(listed.map((p: any) => p.address)).toEqual(['127.0.0.1']);
    expect(listed[0].pid).toBe(process.pid);
  });

  it('stops at the close: the other address refuses once the loopback listener is gone', async () => {
    const server = createServer();
    const port = await listening(server, '127.0.0.1');
    await forwarded(port);
    await new Promise((resolve) => server.close(resolve));
    await waitFor(async () => !(await accepts(FORWARD, port)), 5_000, 'the forward to stop');
  });

  it(
    forwardSteering
      ? 'hands a connection to the listener itself: the server sees the client as its peer, and the relay does not hold it'
      : "copies in the splice relay, not in envd's event loop: the relay child holds both sockets of a connection, envd none",
    async () => {
      const peers: (number | undefined)[] = [];
      const server = createServer((socket) => {
        peers.push(socket.remotePort);
        socket.pipe(socket);
      });
      const port = await listening(server, '127.0.0.1');
      await forwarded(port);
      if (forwardSteering) await waitFor(() => envd.app.envd.ports.forwarder.steering.isSteered(FORWARD, port), 5_000, 'the port to be steered');
      const client = connect({ host: FORWARD, port });
      client.write('ping');
      await new Promise((resolve) => client.once('data', resolve));
      const relay = childrenOf(process.pid).find((pid) => cmdline(pid).includes('--forward'));
      expect(relay, 'an envd-holder --forward child').toBeDefined();
      const { localPort } = client;
      if (forwardSteering) {
        expect(peers.at(-1)).toBe(localPort); // (the earlier ones are forwarded()'s probes)
        // Its accepted end is the test server's own socket, not one of the relay's.
        expect(await answersFrom(FORWARD, port, localPort!)).toBe(false);
      } else {
        // The relay holds the client's socket (taken from envd) and its own connection to the listener.
        expect(socketInodes(relay!).size).toBeGreaterThanOrEqual(2);
        expect(await answersFrom(FORWARD, port, localPort!)).toBe(true);
      }
      client.destroy();
    },
  );

  it('leaves a server on another 127.x address alone (a resolver stub on 127.0.0.53 is not for the outside)', async () => {
    const stub = createServer();
    const port = await listening(stub, '127.0.0.4');
    await waitFor(async () => (await envd.json('GET', '/ports')).body.ports.some((p: any) => p.port === port && p.address === '127.0.0.4'), 5_000, 'the 127.0.0.4 listener to be listed');
    // A 127.0.0.1 server opened after it is forwarded: by then the forward has seen the first one too.
    const later = await listening(createServer(), '127.0.0.1');
    await forwarded(later);
    expect(await accepts(FORWARD, port)).toBe(false);
  });

  it('forwards a ::1 listener too', async () => {
    const server = createHttpServer((_request, response) => response.end('six'));
    const port = await listening(server, '::1');
    await forwarded(port);
    expect(await getText(`http://${FORWARD}:${port}/`)).toBe('six');
  });

  it('passes a half-close and 1 GiB unchanged: the server answers the sha256 of what it got after the client sent its FIN', { timeout: 180_000 }, async () => {
    const server = createServer({ allowHalfOpen: true }, (socket) => {
      const hash = createHash('sha256');
      socket.on('data', (chunk) => hash.update(chunk));
      socket.on('end', () => socket.end(hash.digest('hex')));
    });
    const port = await listening(server, '127.0.0.1');
    await forwarded(port);
    const block = randomBytes(1024 * 1024);
    const sent = createHash('sha256');
    const socket = connect({ host: FORWARD, port, allowHalfOpen: true });
    let reply = '';
    socket.setEncoding('utf8');
    socket.on('data', (text) => (reply += text));
    const ended = new Promise((resolve) => socket.once('end', resolve));
    for (let i = 0; i < 1024; i++) {
      // Every block differs: a dropped or repeated block changes the hash.
      block.writeUInt32LE(i, 0);
      sent.update(block);
      if (!socket.write(Buffer.from(block))) await new Promise((resolve) => socket.once('drain', resolve));
    }
    socket.end();
    await ended;
    expect(reply).toBe(sent.digest('hex'));
    await waitFor(() => envd.app.envd.ports.forwarder.buffers.held === 0, 5_000, 'the forward to hold nothing');
  });

  it('carries a websocket: the upgrade, then frames both ways', async () => {
    const server = createHttpServer();
    server.on('upgrade', (request, socket: Socket) => {
      const accept = createHash('sha1').update(`${request.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
      socket.on('data', (frame: Buffer) => {
        // One small masked text frame from the client: unmask it, answer unmasked.
        const length = frame[1]! & 0x7f;
        const mask = frame.subarray(2, 6);
        const text = Buffer.from(frame.subarray(6, 6 + length).map((byte, i) => byte ^ mask[i % 4]!)).toString();
        const answer = Buffer.from(`echo:${text}`);
        socket.write(Buffer.concat([Buffer.from([0x81, answer.length]), answer]));
      });
    });
    const port = await listening(server, '127.0.0.1');
    await forwarded(port);
    const ws = new WebSocket(`ws://${FORWARD}:${port}/`);
    const message = new Promise<string>((resolve, reject) => {
      ws.onmessage = (event) => resolve(String(event.data));
      ws.onerror = () => reject(new Error('websocket failed'));
    });
    await new Promise((resolve) => (ws.onopen = resolve));
    ws.send('hello');
    expect(await message).toBe('echo:hello');
    ws.close();
  });

  it('leaves an address where the port is already held alone, and says so once', async () => {
    const holder = createServer((socket) => socket.end('held'));
    const port = await listening(holder, FORWARD);
    const server = createServer((socket) => socket.end('loopback'));
    await listening(server, '127.0.0.1', port);
    const said = () => envd.logs.filter((line) => line.includes('something already listens') && line.includes(`"port":${port}`)).length;
    await waitFor(() => said() > 0, 5_000, 'the log line');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(said()).toBe(1);
    const answer = await new Promise<string>((resolve) => {
      let text = '';
      connect({ host: FORWARD, port }).setEncoding('utf8').on('data', (chunk) => (text += chunk)).once('end', () => resolve(text));
    });
    expect(answer).toBe('held');
  });

  it('is switched off and on again by /init forward_loopback', async () => {
    const server = createServer((socket) => socket.end('ok'));
    const port = await listening(server, '127.0.0.1');
    await forwarded(port);
    expect((await envd.call('POST', '/init', { forward_loopback: false })).status).toBe(204);
    // Steered, the relay is told to delete the key after the answer was written: a moment later at most.
    await waitFor(async () => !(await accepts(FORWARD, port)), 2_000, 'the forward to stop');
    expect((await envd.call('POST', '/init', { forward_loopback: true })).status).toBe(204);
    await forwarded(port);
    expect((await envd.call('POST', '/init', { forward_loopback: 'no' })).status).toBe(400);
  });

  it('ends with its connections: nothing left open once the clients and servers are done', async () => {
    // Servers that never answered a probe hold half-closed connections open, as they may: end them.
    for (const socket of accepted.splice(0)) socket.destroy();
    await waitFor(() => envd.app.envd.ports.forwarder.connectionCount === 0, 5_000, 'no forwarded connection left');
  });
});
