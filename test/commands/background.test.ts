import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { useCommandServer } from '../helpers/command-user.js';
import { startServer, type TestServer } from '../helpers/server.js';

const fixture = useCommandServer();

const NOT_FOUND = { stdout: '', stderr: 'process not found', exit_code: 1, reason: 'exited' };

const startBackground = async (body: Record<string, unknown>): Promise<number> => {
  const { status, body: answer } = await fixture.server.json('POST', '/commands', { ...body, background: true });
  expect(status).toBe(200);
  expect(answer).toEqual({ pid: expect.any(Number) });
  return answer.pid;
};

const finished = (pid: number) => waitFor(() => fixture.server.app.envd.processes.get(pid)?.running === false, 10_000, `pid ${pid} to finish`);

describe('background commands', () => {
  it('keep their output while nobody listens: a command printing more than a pipe holds still finishes', async () => {
    const pid = await startBackground({ cmd: 'head -c 3000000 /dev/zero | tr "\\0" "d"; echo; echo done >&2' });
    await finished(pid);
    const { body } = await fixture.server.json('GET', `/commands/${pid}/wait`);
    expect(body.stdout).toBe(`${'d'.repeat(3_000_000)}\n`);
    expect(body.stderr).toBe('done\n');
    expect(body.exit_code).toBe(0);
  });

  it('wait blocks until exit and returns the result, then forgets the pid: wait, attach, /output and DELETE find it no more', async () => {
    const pid = await startBackground({ cmd: 'sleep 0.5; echo late; exit 3' });
    const result = { stdout: 'late\n', stderr: '', exit_code: 3, reason: 'exited' };
    expect((await fixture.server.json('GET', `/commands/${pid}/wait`)).body).toEqual(result);
    // The spec: "The process is then removed from the tracked list."
    expect(await fixture.server.json('GET', `/commands/${pid}/wait`)).toEqual({ status: 200, body: NOT_FOUND });
    expect((await fixture.server.json('GET', '/commands?finished=true')).body.processes.map((p: any) => p.pid)).not.toContain(pid);
    expect((await fixture.server.call('GET', `/commands/${pid}/stream`)).status).toBe(404);
    expect((await fixture.server.call('GET', `/commands/${pid}/output`)).status).toBe(404);
    expect(await fixture.server.json('DELETE', `/commands/${pid}`)).toEqual({ status: 200, body: { killed: false } });
    expect(fixture.server.app.envd.processes.get(pid)).toBeUndefined();
  });

  it('wait answers "process not found" for an untracked pid and 400 for a pid that is not an integer', async () => {
    expect(await fixture.server.json('GET', '/commands/4194303/wait')).toEqual({ status: 200, body: NOT_FOUND });
    for (const pid of ['abc', '1e99', '0x10', '-1', '12a', ' 12']) {
      const bad = await fixture.server.json('GET', `/commands/${encodeURIComponent(pid)}/wait`);
      expect(bad.status, pid).toBe(400);
      expect(bad.body.message).toMatch(/params\/pid/);
    }
    const del = await fixture.server.json('DELETE', '/commands/1e99');
    expect(del.status).toBe(400);
    expect(del.body.message).toMatch(/pid/);
  });

  it('lists tracked processes with their details', async () => {
    const running = await startBackground({ cmd: 'sleep 1000', stdin: true, cwd: '/tmp' });
    const done = await startBackground({ cmd: 'exit 5' });
    await finished(done);
    const { body } = await fixture.server.json('GET', '/commands');
    const byPid = new Map(body.processes.map((p: any) => [p.pid, p]));
    expect(byPid.get(running)).toEqual({
      pid: running,
      cmd: 'sleep 1000',
      cwd: '/tmp',
      user: fixture.user.name,
      background: true,
      stdin: true,
      started_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      running: true,
    });
    expect(byPid.get(done)).toMatchObject({ pid: done, running: false, exit_code: 5, stdin: false, cwd: fixture.user.home });
    expect(Math.abs(Date.parse((byPid.get(running) as any).started_at) - Date.now())).toBeLessThan(60_000);
    await fixture.server.json('DELETE', `/commands/${running}`);
    await fixture.server.json('GET', `/commands/${done}/wait`);
    expect((await fixture.server.json('GET', '/commands')).body.processes.filter((p: any) => p.pid === running || p.pid === done)).toEqual([]);
  });
});

describe('stdin', () => {
  it('round-trips: reserve, write lines, close for EOF', async () => {
    const pid = await startBackground({ cmd: 'while read -r line; do echo "got:$line"; done; echo eof', stdin: true });
    expect(await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'first\n' })).toEqual({ status: 200, body: {} });
    expect(await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'sécond\nthird\n' })).toEqual({ status: 200, body: {} });
    expect(await fixture.server.json('DELETE', `/commands/${pid}/stdin`)).toEqual({ status: 200, body: {} });
    expect((await fixture.server.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: 'got:first\ngot:sécond\ngot:third\neof\n', stderr: '', exit_code: 0, reason: 'exited' });
  });

  it('is 409 after it was closed, and closing twice is fine', async () => {
    const pid = await startBackground({ cmd: 'cat > /dev/null; sleep 1000', stdin: true });
    await fixture.server.json('DELETE', `/commands/${pid}/stdin`);
    expect((await fixture.server.json('DELETE', `/commands/${pid}/stdin`)).status).toBe(200);
    const late = await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'x' });
    expect(late.status).toBe(409);
    expect(late.body.message).toMatch(/closed/);
    await fixture.server.json('DELETE', `/commands/${pid}`);
  });

  it('is 409 without stdin: true (stdin is /dev/null then)', async () => {
    const pid = await startBackground({ cmd: 'cat; sleep 1000' });
    for (const [method, body] of [['POST', { data: 'x' }], ['DELETE', undefined]] as const) {
      const answer = await fixture.server.json(method, `/commands/${pid}/stdin`, body);
      expect(answer.status).toBe(409);
      expect(answer.body.message).toMatch(/stdin: true/);
    }
    await fixture.server.json('DELETE', `/commands/${pid}`);
  });

  it('is 409 once the process has ended', async () => {
    const pid = await startBackground({ cmd: 'true', stdin: true });
    await finished(pid);
    expect((await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'x' })).status).toBe(409);
    await fixture.server.json('GET', `/commands/${pid}/wait`);
  });

  it('is 404 for an untracked pid and 400 without data', async () => {
    expect((await fixture.server.json('POST', '/commands/4194303/stdin', { data: 'x' })).status).toBe(404);
    expect((await fixture.server.json('DELETE', '/commands/4194303/stdin')).status).toBe(404);
    const missing = await fixture.server.json('POST', '/commands/4194303/stdin', {});
    expect(missing.status).toBe(400);
    expect(missing.body.message).toMatch(/data/);
  });
});

describe('the output cap (--max-output-bytes 1000)', () => {
  let small: TestServer;
  beforeAll(async () => {
    small = await startServer({ defaultUser: fixture.user.name, maxOutputBytes: 1000 });
  });
  afterAll(async () => small?.close());

  const print = (cmd: string) => small.json('POST', '/commands', { cmd }).then((answer) => answer.body);

  it('keeps exactly the cap without a truncation flag', async () => {
    const body = await print('head -c 1000 /dev/zero | tr "\\0" "e"');
    expect(body).toEqual({ stdout: 'e'.repeat(1000), stderr: '', exit_code: 0, reason: 'exited' });
  });

  it('keeps the first cap bytes of a longer output and says it truncated', async () => {
    const body = await print('head -c 1001 /dev/zero | tr "\\0" "e"');
    expect(body).toEqual({ stdout: 'e'.repeat(1000), stderr: '', exit_code: 0, reason: 'exited', stdout_truncated: true });
  });

  it('never cuts a character in half at the cap', async () => {
    const body = await print(`head -c 998 /dev/zero | tr "\\0" "e"; printf '😀tail'`);
    expect(body.stdout).toBe('e'.repeat(998));
    expect(body.stdout_truncated).toBe(true);
  });

  it('caps each stream on its own and does not block the process', async () => {
    const body = await print('head -c 5000000 /dev/zero | tr "\\0" "f"; head -c 3000 /dev/zero | tr "\\0" "g" >&2; echo after');
    expect(body.stdout).toBe('f'.repeat(1000));
    expect(body.stderr).toBe('g'.repeat(1000));
    expect(body).toMatchObject({ exit_code: 0, reason: 'exited', stdout_truncated: true, stderr_truncated: true });
  });
});
