import { spawn } from 'node:child_process';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnvdClient } from '../../src/client/index.js';
import { startServer, type TestServer } from '../helpers/server.js';

let server: TestServer;
const listeners: Server[] = [];

beforeAll(async () => {
  server = await startServer();
});
afterAll(async () => {
  for (const listener of listeners) listener.close();
  await server.close();
});

async function listen(host: string): Promise<{ listener: Server; port: number }> {
  const listener = createServer();
  listeners.push(listener);
  await new Promise<void>((resolve) => listener.listen(0, host, resolve));
  return { listener, port: (listener.address() as AddressInfo).port };
}

function envd(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('dist/envd', args, { env: { ...process.env, ENVD_URL: server.url, ENVD_TOKEN: server.token } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

describe('envd ports (dist/envd as a child process) and the typed client', () => {
  it('lists each port as a line: protocol, address:port, pid, owner, user, command line; --json the entries', async () => {
    const { port } = await listen('::1');
    const r = await envd(['ports']);
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe('PROTO\tADDRESS\tPID\tOWNER\tUSER\tCMD');
    expect(r.stdout).toContain(`tcp\t[::1]:${port}\t${process.pid}\t-\troot\t`);
    const json = JSON.parse((await envd(['ports', '--json'])).stdout);
    expect(json).toEqual(expect.arrayContaining([expect.objectContaining({ protocol: 'tcp', address: '::1', port, pid: process.pid })]));
    expect((await envd(['ports', 'extra'])).code).toBe(2);
  });

  it('-w prints what is open, then + for an open and - for a close', async () => {
    const child = spawn('dist/envd', ['ports', '-w'], { env: { ...process.env, ENVD_URL: server.url, ENVD_TOKEN: server.token } });
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    expect((await lines.next()).value).toBe('PROTO\tADDRESS\tPID\tOWNER\tUSER\tCMD');
    // After the header come the open ports; one opened now is a + line, its close a - line.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const { listener, port } = await listen('127.0.0.1');
    const seen = async (prefix: string) => {
      for (;;) {
        const { value, done } = await lines.next();
        if (done) throw new Error('envd ports -w ended');
        if (value.startsWith(prefix) && value.includes(`127.0.0.1:${port}\t`)) return value;
      }
    };
    expect(await seen('+ tcp')).toContain(`\t${process.pid}\t`);
    listener.close();
    expect(await seen('- tcp')).toContain(`127.0.0.1:${port}`);
    child.kill('SIGINT');
  });

  it('client.ports.watch yields ready, then open with the same fields as client.ports.list', async () => {
    const client = new EnvdClient({ url: server.url, token: server.token });
    const abort = new AbortController();
    const events = client.ports.watch({ signal: abort.signal });
    const ready = await events.next();
    expect(ready.value?.event).toBe('ready');
    const { port } = await listen('127.0.0.1');
    for (;;) {
      const { value } = await events.next();
      if (value?.event === 'open' && value.data.port === port) {
        const listed = (await client.ports.list()).find((entry) => entry.port === port);
        expect(value.data).toEqual(listed);
        break;
      }
    }
    abort.abort();
  });
});
