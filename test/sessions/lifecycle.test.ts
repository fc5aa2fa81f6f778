import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';

// How sessions begin and end: bad input, the idle timeout, a client that goes away, leaks.

let user: Awaited<ReturnType<typeof commandUser>>;
let server: TestServer;
const IDLE_MS = 600;
beforeAll(async () => {
  user = await commandUser();
  server = await startServer({ defaultUser: user.user.name, sessionIdleTimeoutMs: IDLE_MS });
});
afterAll(async () => {
  await server?.close();
  user?.remove();
});

const create = async (body: Record<string, unknown> = {}) => {
  const { status, body: answer } = await server.json('POST', '/sessions', body);
  expect(status, JSON.stringify(answer)).toBe(201);
  return answer as { id: string; pid: number; user: string; cwd: string; shell: string };
};

describe('sessions: input, idle timeout, clients that leave', () => {
  it('answers 400 naming the field for bad input, 404 for an unknown session', async () => {
    expect((await server.json('POST', '/sessions', { cwd: 'relative' })).body.message).toContain('body/cwd');
    expect((await server.json('POST', '/sessions', { user: 'no-such-user-here' })).status).toBe(400);
    expect((await server.json('POST', '/sessions', { shell: 'fish' })).status).toBe(400);
    const { id } = await create();
    expect((await server.json('POST', `/sessions/${id}/commands`, { cmd: 'echo \0' })).body).toEqual({ message: 'body/cmd must not contain a NUL byte' });
    expect((await server.json('POST', `/sessions/${id}/commands`, { cmd: 'true', timeout: -1 })).status).toBe(400);
    expect((await server.json('POST', `/sessions/${id}/commands`, { cmd: 'true', extra: 1 })).status).toBe(400);
    expect((await server.json('POST', '/sessions/00000000-0000-4000-8000-000000000000/commands', { cmd: 'true' })).status).toBe(404);
    expect((await server.json('POST', '/sessions/not-an-id/commands', { cmd: 'true' })).status).toBe(400);
    await server.json('DELETE', `/sessions/${id}`);
  });

  it('starts where asked, as the user asked, with the envs given', async () => {
    const session = await create({ cwd: '/tmp', envs: { SESSION_VAR: 'v' } });
    expect(session).toMatchObject({ cwd: '/tmp', user: user.user.name });
    expect((await server.json('POST', `/sessions/${session.id}/commands`, { cmd: 'echo "$SESSION_VAR $(id -un)"' })).body.stdout).toBe(`v ${user.user.name}\n`);
    await server.json('DELETE', `/sessions/${session.id}`);
  });

  it('ends a session idle for --session-idle-timeout, not one that is busy', async () => {
    const { id } = await create();
    // Busy past the idle timeout: not ended under the command.
    expect((await server.json('POST', `/sessions/${id}/commands`, { cmd: `sleep ${(IDLE_MS * 2) / 1000}; echo done` })).body).toMatchObject({ stdout: 'done\n' });
    // Listing does not count as use: only commands do.
    await waitFor(async () => !(await server.json('GET', '/sessions')).body.sessions.some((s: any) => s.id === id), 10_000, 'the idle session to end');
    expect((await server.json('POST', `/sessions/${id}/commands`, { cmd: 'true' })).status).toBe(410);
  });

  it("interrupts the command of a client that goes away, and the session lives on", async () => {
    const { id } = await create();
    const tag = `session-left-${process.pid}`;
    const abort = new AbortController();
    const cut = server.call('POST', `/sessions/${id}/commands`, { cmd: `sleep 300 ${tag} || sleep 300; echo never`.replace(`sleep 300 ${tag}`, `sh -c 'sleep 300; :' ${tag}`) }, { signal: abort.signal }).catch(() => 'cut');
    await waitFor(() => findProcesses(tag).length === 1, 5_000, 'the command');
    abort.abort();
    expect(await cut).toBe('cut');
    await waitFor(() => findProcesses(tag).length === 0, 5_000, 'the command to be interrupted');
    await waitFor(async () => !(await server.json('GET', '/sessions')).body.sessions.find((s: any) => s.id === id).busy, 8_000, 'the session to be idle');
    expect((await server.json('POST', `/sessions/${id}/commands`, { cmd: 'echo here' })).body).toMatchObject({ stdout: 'here\n', exit_code: 0 });
    await server.json('DELETE', `/sessions/${id}`);
  });

  it('leaves no stdin file, record or process behind once ended', async () => {
    const { id, pid } = await create();
    await server.json('POST', `/sessions/${id}/commands`, { cmd: 'cat', stdin: 'secret' });
    expect(readdirSync(process.env.TMPDIR ?? '/tmp').filter((name) => name.startsWith('.envd-session-stdin-'))).toEqual([]);
    await server.json('DELETE', `/sessions/${id}`);
    await waitFor(() => !readdirSync('/proc').includes(String(pid)), 5_000, 'the shell to be gone');
    expect((await server.json('GET', '/commands')).body.processes.map((p: any) => p.pid)).not.toContain(pid);
  });
});
