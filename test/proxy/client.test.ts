// Issue 28: the typed client and the CLI through nginx with a path prefix, as the control plane forwards.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EnvdClient, EnvdError } from '../../src/client/index.js';
import { startProxiedEnvd, type ProxiedEnvd } from './fixture.js';
import type { Nginx } from './nginx.js';

let proxied: ProxiedEnvd | undefined;
let nginx: Nginx;
let dir: string;
let token: string;

beforeAll(async () => {
  // As root: the client and the CLI as a developer points them at a sandbox; none of these commands is killed while it starts.
  proxied = await startProxiedEnvd('proxy-client', { plainUser: false });
  ({ nginx, dir, token } = proxied);
});
afterAll(async () => {
  await proxied?.stop();
});

it('the client runs, streams with resume, and reads files through the prefix', async () => {
  const client = new EnvdClient({ url: nginx.url, token });
  expect((await client.commands.run({ cmd: 'echo via-proxy' })).stdout).toBe('via-proxy\n');
  let out = '';
  for await (const event of client.commands.stream({ cmd: 'seq 1 1000' }, { reconnect: 3 })) if (event.event === 'stdout') out += event.data.data;
  expect(out).toBe(Array.from({ length: 1000 }, (_, i) => `${i + 1}\n`).join(''));
  await client.files.write({ path: join(dir, 'f'), data: 'x' });
  expect((await client.files.read(join(dir, 'f'))).data).toBe('x');
  await expect(new EnvdClient({ url: nginx.url, token: 'bad' }).commands.list()).rejects.toBeInstanceOf(EnvdError);
});

it('envd exec through the prefix passes the exit status through', async () => {
  const result = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
    const child = spawn('dist/envd', ['exec', '--url', nginx.url, '--token', token, '--', 'sh', '-c', 'echo proxied; exit 4']);
    let stdout = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stdin.end();
    child.on('close', (code) => resolve({ code, stdout }));
  });
  expect(result).toEqual({ code: 4, stdout: 'proxied\n' });
});
