import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { startEnvdProcess } from '../helpers/proc.js';
import { makeEnvdDirs, startServer } from '../helpers/server.js';

// A session is a command underneath: its holder owns the shell, so envd's death loses nothing of the
// session's state, and the next envd finds the session again by its record.

let user: Awaited<ReturnType<typeof commandUser>>;
beforeAll(async () => {
  user = await commandUser();
});
afterAll(() => user?.remove());

describe.each(['bash', 'sh'] as const)('a session in %s across a restart of envd', (shell) => {
  it('lives on through kill -9 of envd between two of its commands, state and all', async () => {
    const own = makeEnvdDirs();
    try {
      const args = ['--state-dir', own.stateDir, '--spool-dir', own.spoolDir, '--default-user', user.user.name];
      const env = { ENVD_ACCESS_TOKEN: 'tok' };
      const call = async (url: string, method: string, path: string, body?: unknown) => {
        const res = await fetch(url + path, { method, headers: { authorization: 'Bearer tok', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
        return { status: res.status, body: await res.json() };
      };
      const first = await startEnvdProcess(args, env);
      const created = await call(first.url, 'POST', '/sessions', { shell });
      expect(created.status).toBe(201);
      const { id, pid } = created.body;
      expect((await call(first.url, 'POST', `/sessions/${id}/commands`, { cmd: 'cd /tmp; export BEFORE=kept; f() { echo "f $1"; }' })).body).toMatchObject({ exit_code: 0 });
      await first.stop('SIGKILL');
      const second = await startEnvdProcess(args, env);
      try {
        const listed = (await call(second.url, 'GET', '/sessions')).body.sessions;
        expect(listed).toEqual([expect.objectContaining({ id, pid, cwd: '/tmp', busy: false, shell })]);
        const after = await call(second.url, 'POST', `/sessions/${id}/commands`, { cmd: 'pwd; echo "$BEFORE"; f x; exit 6' });
        expect(after.body).toEqual({ stdout: '/tmp\nkept\nf x\n', stderr: '', exit_code: 6, reason: 'exited', session_ended: true });
        expect((await call(second.url, 'POST', `/sessions/${id}/commands`, { cmd: 'true' })).status).toBe(410);
      } finally {
        await second.stop();
      }
    } finally {
      own.remove();
    }
  });

  it('is found again after a restart (detach), and a command that was running when envd went finishes for nobody', async () => {
    const dirs = makeEnvdDirs();
    try {
      const first = await startServer({ defaultUser: user.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
      const { id } = (await first.json('POST', '/sessions', { shell })).body;
      await first.json('POST', `/sessions/${id}/commands`, { cmd: 'N=1' });
      // In flight when envd goes: its request dies with envd, the shell finishes it regardless.
      const orphan = first.json('POST', `/sessions/${id}/commands`, { cmd: 'sleep 0.5; N=2; echo orphan' }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
      await first.detach();
      await orphan;
      const second = await startServer({ defaultUser: user.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
      try {
        const { body } = await second.json('POST', `/sessions/${id}/commands`, { cmd: 'echo "N=$N"' });
        expect(body).toEqual({ stdout: 'N=2\n', stderr: '', exit_code: 0, reason: 'exited' });
        expect((await second.json('DELETE', `/sessions/${id}`)).body).toEqual({ ended: true });
        expect((await second.json('GET', '/sessions')).body.sessions).toEqual([]);
      } finally {
        await second.close();
      }
    } finally {
      dirs.remove();
    }
  });
});
