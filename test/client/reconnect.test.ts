// The typed client's reconnect (issue 28) against connections that really
// drop: a TCP proxy in front of a real envd cuts every connection after
// 128 KiB from envd, mid-event. attach() with `reconnect` must still hand
// over exactly the command's output, once and in order, then its exit.
// stream() the same for what the command printed: by the contract a streamed
// command is killed when its connection drops, so when a cut comes before it
// ends, what the client gets is exactly what envd kept up to the kill.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnvdClient, EnvdError, type CommandEvent } from '../../src/client/index.js';
import { commandUser } from '../helpers/command-user.js';
import { startServer, type TestServer } from '../helpers/server.js';

const CUT_AFTER_BYTES = 128 * 1024;
/** `seq 1 N`: 1,008,895 bytes, so the stream is cut some ten times. */
const N = 160_000;
const expected = Array.from({ length: N }, (_, i) => `${i + 1}\n`).join('');

let server: TestServer;
let proxy: Server;
let proxyUrl: string;
let cuts = 0;
const sockets = new Set<Socket>();

/** Forwards to envd; closes the client's connection (and envd's) once CUT_AFTER_BYTES came back on it. */
function startCuttingProxy(target: URL): Promise<string> {
  proxy = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    let sent = 0;
    const cut = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => {
      const room = CUT_AFTER_BYTES - sent;
      sent += chunk.length;
      if (sent <= CUT_AFTER_BYTES) return void client.write(chunk);
      cuts++;
      client.write(chunk.subarray(0, Math.max(0, room)), cut);
    });
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
  });
  return new Promise((resolve) => proxy.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(proxy.address() as { port: number }).port}/`)));
}

let removeUser = () => {};

beforeAll(async () => {
  // A plain user (when root): a streamed command is killed at the first cut, and a root login shell
  // killed while it starts leaves pyenv's lock behind here, which stalls every later one for 60 s.
  const made = await commandUser();
  removeUser = made.remove;
  server = await startServer({ defaultUser: made.user.name });
  proxyUrl = await startCuttingProxy(new URL(server.url));
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => proxy?.close(resolve));
  await server.close();
  removeUser();
});

async function collect(events: AsyncIterable<CommandEvent>): Promise<{ stdout: string; exit: CommandEvent | undefined; starts: number }> {
  let stdout = '';
  let exit: CommandEvent | undefined;
  let starts = 0;
  for await (const event of events) {
    if (event.event === 'start') starts++;
    if (event.event === 'stdout') stdout += event.data.data;
    if (event.event === 'exit') exit = event;
    if (event.event === 'truncated') throw new Error(`a truncated event: ${JSON.stringify(event)}`);
  }
  return { stdout, exit, starts };
}

describe('the client across dropped connections', () => {
  it('stream() with reconnect delivers all the command printed once, in order, across connections cut mid-event', async () => {
    const client = new EnvdClient({ url: proxyUrl, token: server.token });
    cuts = 0;
    let pid = 0;
    const events = client.commands.stream({ cmd: `seq 1 ${N}` }, { reconnect: 3 });
    const { stdout, exit, starts } = await collect(
      (async function* () {
        for await (const event of events) {
          if (event.event === 'start') pid = event.data.pid;
          yield event;
        }
      })(),
    );
    expect(cuts).toBeGreaterThan(3);
    expect(starts).toBe(1);
    // What envd kept of the command is exactly what the client was handed, whether it ran to its end or the first cut killed it.
    // A command whose first stream sent its exit whole into the proxy before the cut reached it is collected by then
    // (resumable by id for a while, hidden from /output): it ran to its end, so all of seq's output is what was kept.
    const direct = new EnvdClient({ url: `${server.url}/`, token: server.token });
    const kept = await direct.commands.output(pid, { stream: 'stdout' }).then(
      (bytes) => Buffer.from(bytes).toString(),
      (error: EnvdError) => {
        if (error.status !== 404) throw error;
        return expected;
      },
    );
    expect(stdout.length).toBe(kept.length);
    expect(stdout === kept).toBe(true);
    expect(expected.startsWith(stdout)).toBe(true);
    if (stdout.length === expected.length) expect(exit).toMatchObject({ data: { exit_code: 0 } });
    else expect(exit).toMatchObject({ data: { signal: 'SIGKILL', reason: 'killed' } });
  });

  it('attach() with reconnect does the same for a background command, and without reconnect says the stream broke', async () => {
    const direct = new EnvdClient({ url: `${server.url}/`, token: server.token });
    const { pid } = await direct.commands.start({ cmd: `seq 1 ${N}` });
    // Ended but not collected (a wait would forget it).
    while ((await direct.commands.list()).some((p) => p.pid === pid && p.running)) await new Promise((resolve) => setTimeout(resolve, 20));
    const client = new EnvdClient({ url: proxyUrl, token: server.token });
    cuts = 0;
    const { stdout, exit } = await collect(client.commands.attach(pid, { reconnect: 3 }));
    expect(cuts).toBeGreaterThan(3);
    expect(stdout === expected).toBe(true);
    expect(exit).toMatchObject({ data: { exit_code: 0 } });
    await expect(collect(client.commands.attach(pid))).rejects.toThrow();
  });
});
