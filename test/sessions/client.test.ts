import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnvdClient, EnvdError } from '../../src/client/index.js';
import { commandUser } from '../helpers/command-user.js';
import { startServer, type TestServer } from '../helpers/server.js';

// The client's Session object, and `envd session new|run|ls|rm` (dist/envd as a child process).

let server: TestServer;
let user: Awaited<ReturnType<typeof commandUser>>;
let client: EnvdClient;
beforeAll(async () => {
  user = await commandUser();
  server = await startServer({ defaultUser: user.user.name });
  client = new EnvdClient({ url: server.url, token: server.token });
});
afterAll(async () => {
  await server?.close();
  user?.remove();
});

function envd(args: string[], input = ''): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('dist/envd', args, { env: { ...process.env, ENVD_URL: server.url, ENVD_TOKEN: server.token } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.stdin.end(input);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

describe('the client Session', () => {
  it('runs and streams commands that share the shell, and ends it', async () => {
    const session = await client.sessions.create({ shell: 'bash', cwd: '/tmp' });
    expect(session.created).toMatchObject({ cwd: '/tmp', shell: 'bash' });
    expect(await session.run('cd / && export GREETING=hello')).toMatchObject({ exit_code: 0 });
    expect(await session.run('cat; echo "$GREETING from $PWD"', { stdin: 'in:' })).toMatchObject({ stdout: 'in:hello from /\n', exit_code: 0 });
    const events = [];
    for await (const event of session.stream('echo out; echo err >&2; (exit 2)')) events.push(event);
    // The two streams are separate pipes: their relative order is the holder's reading order.
    expect(events.map((e) => e.event).sort()).toEqual(['exit', 'start', 'stderr', 'stdout']);
    expect([events[0]!.event, events.at(-1)!.event]).toEqual(['start', 'exit']);
    expect(events.at(-1)).toMatchObject({ data: { exit_code: 2 } });
    expect((await client.sessions.list()).map((s) => s.id)).toContain(session.id);
    await session.end();
    await expect(session.run('true')).rejects.toMatchObject({ status: 410 });
    await expect(client.sessions.get('00000000-0000-4000-8000-000000000000').run('true')).rejects.toBeInstanceOf(EnvdError);
  });
});

describe('envd session', () => {
  it('new, run (output, status, --stdin), ls and rm', async () => {
    const created = await envd(['session', 'new', '--shell', 'sh', '-e', 'WHO=cli']);
    expect(created, created.stderr).toMatchObject({ code: 0 });
    const id = created.stdout.trim();
    expect((await envd(['session', 'run', id, '--', 'cd /tmp; X=1'])).code).toBe(0);
    expect(await envd(['session', 'run', id, '--', 'echo "$WHO $X $PWD"; echo e >&2; exit_code=4; (exit 4)'])).toMatchObject({ code: 4, stdout: 'cli 1 /tmp\n', stderr: 'e\n' });
    expect(await envd(['session', 'run', '--stdin', id, '--', 'tr a-z A-Z'], 'piped')).toMatchObject({ code: 0, stdout: 'PIPED' });
    expect((await envd(['session', 'ls'])).stdout).toContain(`${id}\t`);
    expect((await envd(['session', 'rm', id])).code).toBe(0);
    const gone = await envd(['session', 'run', id, '--', 'true']);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toContain('has ended');
    expect((await envd(['session', 'frobnicate'])).code).toBe(2);
  });
});
