// `envd services`, `envd logs SERVICE` (dist/envd as a child process) and the typed client's services methods.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnvdClient } from '../../src/client/index.js';
import { findProcesses } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { until } from './helpers.js';
import { runEnvd } from '../helpers/archives.js';

let server: TestServer;
let client: EnvdClient;
const marker = `svc-cli-${process.pid}`;
beforeAll(async () => {
  server = await startServer();
  client = new EnvdClient({ url: server.url, token: server.token });
});
afterAll(async () => {
  await server.close();
  for (const pid of findProcesses(marker)) process.kill(pid, 'SIGKILL');
});

function envd(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runEnvd(args, { url: server.url, token: server.token! });
}

describe('services through the client and the CLI', () => {
  it('defines, lists, reads and stops a service; logs takes a service name', async () => {
    const record = await client.services.put('greeter', { cmd: '/bin/sh', args: ['-c', `echo hello; echo oops >&2; sleep 900 # ${marker}`], ready: { log: 'hello' } });
    expect(record).toMatchObject({ name: 'greeter', state: 'starting' });
    await until(server, 'greeter', (r) => r.state === 'ready', 'ready');
    expect((await client.commands.ready(record.pid!)).after_ms).toBeGreaterThanOrEqual(0);
    expect((await client.services.list()).map((s) => s.name)).toEqual(['greeter']);
    const listed = await envd(['services']);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(new RegExp(`^NAME\\tSTATE\\tPID\\tRESTARTS\\tLAST EXIT\\tCMD\\ngreeter\\tready\\t${record.pid}\\t0\\t-\\t/bin/sh -c `));
    expect(JSON.parse((await envd(['services', '--json', 'greeter'])).stdout)).toMatchObject({ name: 'greeter', state: 'ready' });
    expect(await envd(['logs', 'greeter'])).toMatchObject({ code: 0, stdout: 'hello\n', stderr: 'oops\n' });
    const page = await client.services.logs('greeter');
    expect(page).toMatchObject({ stdout: 'hello\n', stderr: 'oops\n', cursor: '6-5' });
    const following = envd(['logs', '-f', 'greeter']);
    await new Promise((r) => setTimeout(r, 500));
    expect((await client.services.control('greeter', 'stop')).state).toBe('stopped');
    const followed = await following;
    expect(followed).toMatchObject({ stdout: 'hello\n', stderr: 'oops\n' });
    expect(followed.code).toBe(143);
    expect(await envd(['services', 'nope'])).toMatchObject({ code: 1, stderr: expect.stringContaining('no service named "nope"') });
    await client.services.delete('greeter');
    expect(await client.services.list()).toEqual([]);
  });
});
