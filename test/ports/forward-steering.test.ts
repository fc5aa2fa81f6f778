import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';

// Addresses of this file's own: forward.test.ts (127.0.0.2) runs at the same time, and its envd forwards every loopback listener too.
const FORWARD = '127.0.0.3';
const RELAYED = '127.0.0.4';

const envds: TestServer[] = [];
const servers: Server[] = [];
afterAll(async () => {
  for (const server of servers) server.close();
  for (const envd of envds) await envd.close();
});

async function startEnvd(address: string, forwardSteering = true): Promise<TestServer> {
  const envd = await startServer({ forwardLoopback: true, forwardAddresses: [address], forwardSteering });
  envds.push(envd);
  return envd;
}

/** What the server saw of each connection: its peer and its own end. */
interface Seen {
  remoteAddress: string;
  remotePort: number;
  localAddress: string;
}

/** A 127.0.0.1 server that greets every connection and records what it saw of it. */
async function greeter(): Promise<{ port: number; seen: Seen[]; server: Server }> {
  const seen: Seen[] = [];
  const server = createServer((socket) => {
    socket.on('error', () => {});
    seen.push({ remoteAddress: socket.remoteAddress!, remotePort: socket.remotePort!, localAddress: socket.localAddress! });
    socket.end('hello');
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as AddressInfo).port, seen, server };
}

/** Connects and reads to the end: the text and the client's own address and port, or 'refused' / 'reset'. */
function fetchGreeting(host: string, port: number): Promise<{ text: string; local?: { address: string; port: number } }> {
  return new Promise((resolve) => {
    const socket: Socket = connect({ host, port });
    let text = '';
    let local: { address: string; port: number } | undefined;
    socket.once('connect', () => (local = { address: socket.localAddress!, port: socket.localPort! }));
    socket.setEncoding('utf8').on('data', (chunk) => (text += chunk));
    socket.once('end', () => resolve({ text, local }));
    socket.once('error', (error: NodeJS.ErrnoException) => resolve({ text: error.code === 'ECONNREFUSED' ? 'refused' : 'reset', local }));
  });
}

const steered = (envd: TestServer, address: string, port: number) => envd.app.envd.ports.forwarder.steering.isSteered(address, port);

/** Our own children that are forward relays. */
function relays(): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number).filter((pid) => {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return Number(fields[1]) === process.pid && fields[0] !== 'Z' && readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes('--forward');
    } catch {
      return false;
    }
  });
}

/** The BPF objects a process holds (anon_inode:bpf-map, anon_inode:bpf_link, ...). */
function bpfFds(pid: number): string[] {
  try {
    return readdirSync(`/proc/${pid}/fd`).map((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        return '';
      }
    }).filter((target) => target.startsWith('anon_inode:bpf'));
  } catch {
    return [];
  }
}

describe('loopback forward steered in the kernel', () => {
  it("hands a connection to the user's own listener: the server sees the client's real address and port, and nothing of envd's holds it", async () => {
    const envd = await startEnvd(FORWARD);
    const { port, seen } = await greeter();
    await waitFor(() => steered(envd, FORWARD, port), 5_000, 'the port to be steered');
    const { text, local } = await fetchGreeting(FORWARD, port);
    expect(text).toBe('hello');
    expect(seen).toEqual([{ remoteAddress: local!.address, remotePort: local!.port, localAddress: FORWARD }]);
    // No relay, no second connection: envd never accepted it, so it counts none.
    expect(envd.app.envd.ports.forwarder.connectionCount).toBe(0);
  });

  it('relays the same listener with --forward-steering off: the server sees the relay (a loopback address, another port)', async () => {
    const envd = await startEnvd(RELAYED, false);
    const { port, seen } = await greeter();
    await waitFor(async () => (await fetchGreeting(RELAYED, port)).text === 'hello', 5_000, 'the relayed forward');
    const { local } = await fetchGreeting(RELAYED, port);
    expect(steered(envd, RELAYED, port)).toBe(false);
    expect(seen.at(-1)!.localAddress).toBe('127.0.0.1');
    expect(seen.at(-1)!.remotePort).not.toBe(local!.port);
    // Gone before the next test: two envds on different 127.x addresses take each other's listeners for loopback
    // servers, and each one's would keep the other's forward of a closed server open.
    await envds.pop()!.close();
  });

  it('takes a closed listener out of the kernel at once: the very next connection is not steered, and the forward stops', async () => {
    const envd = envds[0]!;
    const { port, server, seen } = await greeter();
    await waitFor(() => steered(envd, FORWARD, port), 5_000, 'the port to be steered');
    await new Promise((resolve) => server.close(resolve));
    // envd's own listener may still be there for a poll: it takes the connection and the relay finds nothing to connect to.
    expect(['refused', 'reset', '']).toContain((await fetchGreeting(FORWARD, port)).text);
    // envd's listener goes at the port table's next look (a deadline for a loaded machine; bench/ports.mjs measures it).
    await waitFor(async () => (await fetchGreeting(FORWARD, port)).text === 'refused', 5_000, 'the forward to stop');
    expect(steered(envd, FORWARD, port)).toBe(false);
    expect(seen).toEqual([]);
  });

  it('leaves a port another envd already forwards on the address alone: the first one steers it, the second says so once', async () => {
    const first = envds[0]!;
    const second = await startEnvd(FORWARD);
    const { port, seen } = await greeter();
    await waitFor(() => steered(first, FORWARD, port) || steered(second, FORWARD, port), 5_000, 'one envd to steer the port');
    const [owner, other] = steered(first, FORWARD, port) ? [first, second] : [second, first];
    await waitFor(() => other.logs.some((line) => line.includes('something already listens') && line.includes(`"port":${port}`)), 5_000, 'the other to log it');
    expect(steered(other, FORWARD, port)).toBe(false);
    const { text, local } = await fetchGreeting(FORWARD, port);
    expect(text).toBe('hello');
    expect(seen.at(-1)!.remotePort).toBe(local!.port);
    expect(owner).toBeDefined();
  });

  it('leaves nothing in the kernel when envd exits: its relay, BPF link and map are gone, and the forward address refuses', async () => {
    for (const envd of envds.splice(0)) await envd.close();
    await waitFor(() => relays().length === 0, 5_000, 'the earlier relays to end');
    const envd = await startEnvd(FORWARD);
    const { port } = await greeter();
    await waitFor(() => steered(envd, FORWARD, port), 5_000, 'the port to be steered');
    const [relay] = relays();
    await waitFor(() => bpfFds(relay!).includes('anon_inode:bpf_link'), 5_000, 'the relay to hold its link');
    expect(bpfFds(relay!)).toContain('anon_inode:bpf-map');
    expect(bpfFds(process.pid)).toEqual([]); // envd itself holds none
    expect((await fetchGreeting(FORWARD, port)).text).toBe('hello');
    await envds.pop()!.close();
    await waitFor(() => relays().length === 0, 5_000, 'the relay to end');
    // The listener is still there on 127.0.0.1; a link left attached would still hand it 127.0.0.3's connections.
    expect((await fetchGreeting('127.0.0.1', port)).text).toBe('hello');
    expect((await fetchGreeting(FORWARD, port)).text).toBe('refused');
  });
});
