import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type TestServer } from '../helpers/server.js';
import { runEnvd } from '../helpers/archives.js';

/** What the corrupting proxy looks for in envd's answers: a run only victim.txt holds. */
const RUN = Buffer.from('A'.repeat(32));

/**
 * A TCP proxy in front of envd that, while `corrupting`, changes one byte of
 * the first run of 'A's that passes from envd to the client on each
 * connection: one changed byte in the middle of a file's data, where tar's
 * own header checksums never look.
 */
async function startCorruptingProxy(target: URL): Promise<{ url: string; corrupting: boolean; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const proxy = { url: '', corrupting: false, close: async () => {} };
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    let changed = false;
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
    }
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      const at = proxy.corrupting && !changed ? chunk.indexOf(RUN) : -1;
      if (at >= 0) {
        chunk[at + RUN.length / 2] = 'B'.charCodeAt(0);
        changed = true;
      }
      client.write(chunk);
    });
    upstream.on('end', () => client.end());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  proxy.close = () =>
    new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
  return proxy;
}

let server: TestServer;
let proxy: Awaited<ReturnType<typeof startCorruptingProxy>>;
let dir: string;
let there: string;

beforeAll(async () => {
  server = await startServer();
  proxy = await startCorruptingProxy(new URL(server.url));
  dir = mkdtempSync(join(tmpdir(), 'envd-cp-sums-'));
  there = join(dir, 'there');
  mkdirSync(join(there, 'src'), { recursive: true });
  for (let index = 0; index < 20; index++) writeFileSync(join(there, 'src', `m${index}.ts`), `export const m${index} = ${index};\n`);
  writeFileSync(join(there, 'src', 'victim.txt'), `${'A'.repeat(100_000)}\n`);
});
afterAll(async () => {
  await proxy?.close();
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** dist/envd VERB… as a child process, talking to envd through the proxy. */
function envd(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runEnvd(args, { url: proxy.url, token: server.token! });
}

describe('envd cp of a tree down checks every file by sha256 (issue 44)', () => {
  it('copies the tree byte-exact through the proxy while nothing is changed on the way', async () => {
    proxy.corrupting = false;
    const target = join(dir, 'clean');
    expect(await envd(['cp', `:${there}`, target])).toMatchObject({ code: 0 });
    expect(readFileSync(join(target, 'src', 'victim.txt')).equals(readFileSync(join(there, 'src', 'victim.txt')))).toBe(true);
    expect(readFileSync(join(target, 'src', 'm7.ts'), 'utf8')).toBe('export const m7 = 7;\n');
  });

  it('fails with a message naming the file when one byte of it changed on the way, and writes nothing', async () => {
    proxy.corrupting = true;
    const target = join(dir, 'corrupted');
    const copied = await envd(['cp', `:${there}`, target]);
    expect(copied.code).toBe(1);
    expect(copied.stderr).toMatch(
      new RegExp(`^envd cp: ${there}: src/victim\\.txt: the bytes received \\(sha256 [0-9a-f]{12}…\\) are not those envd sent \\(sha256 [0-9a-f]{12}…\\); nothing was written: copy again; if it repeats, report it\\n$`, 'm'),
    );
    expect(existsSync(target)).toBe(false);
    expect(readdirSync(dir).filter((name) => name.startsWith('.envd-archive-'))).toEqual([]);
  });
});
