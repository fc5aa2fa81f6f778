import { describe, expect, it } from 'vitest';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { useCommandServer } from '../helpers/command-user.js';
import { readEvents } from '../helpers/sse.js';

const fixture = useCommandServer();
const PTY = { cols: 100, rows: 30 };

const run = (body: Record<string, unknown>) => fixture.server.json('POST', '/commands', body);
const startShell = async (extra: Record<string, unknown> = {}) => {
  const { status, body } = await run({ pty: PTY, background: true, ...extra });
  expect(status, JSON.stringify(body)).toBe(200);
  return body.pid as number;
};
const type = async (pid: number, data: string) => {
  const { status, body } = await fixture.server.json('POST', `/commands/${pid}/stdin`, { data });
  expect(status, JSON.stringify(body)).toBe(200);
};

/** Follows a command's output (attach) and resolves when `pattern` shows up in it. */
function follow(pid: number) {
  let text = '';
  let exit: any;
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  const done = (async () => {
    const response = await fixture.server.call('GET', `/commands/${pid}/stream`);
    for await (const event of readEvents(response)) {
      if (event.event === 'stdout') text += event.data.data;
      if (event.event === 'exit') exit = event.data;
      for (const waiter of waiters.splice(0)) if (waiter.pattern.test(text)) waiter.resolve();
      else waiters.push(waiter);
    }
  })();
  return {
    get text() {
      return text;
    },
    get exit() {
      return exit;
    },
    done,
    until(pattern: RegExp, timeoutMs = 10_000) {
      if (pattern.test(text)) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${pattern} in: ${JSON.stringify(text.slice(-500))}`)), timeoutMs);
        waiters.push({ pattern, resolve: () => (clearTimeout(timer), resolve()) });
      });
    },
  };
}

describe('commands on a pty', () => {
  it('run on a terminal of the asked size, with TERM=xterm-256color, stdout only', async () => {
    const { status, body } = await run({ cmd: 'tty; stty size; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-ttys; echo "$TERM"; echo err >&2', pty: PTY });
    expect(status).toBe(200);
    expect(body.stdout).toMatch(/^\/dev\/pts\/\d+\r\n30 100\r\nall-ttys\r\nxterm-256color\r\nerr\r\n$/);
    expect(body.stderr).toBe('');
    expect(body.exit_code).toBe(0);
  });

  it('keeps a TERM the request sets', async () => {
    const { body } = await run({ cmd: 'echo "$TERM"', pty: PTY, envs: { TERM: 'vt100' } });
    expect(body.stdout).toBe('vt100\r\n');
  });

  it('drives an interactive login shell: typing, resize with SIGWINCH, Ctrl-C of a job, exit code', async () => {
    const pid = await startShell();
    const out = follow(pid);
    await type(pid, 'trap "echo got-winch" WINCH; echo ready-$((6*7))\n');
    await out.until(/ready-42/);
    expect((await fixture.server.json('POST', `/commands/${pid}/resize`, { cols: 120, rows: 40 })).body).toEqual({});
    const listed = (await fixture.server.json('GET', '/commands')).body.processes.find((p: any) => p.pid === pid);
    expect(listed.pty).toEqual({ cols: 120, rows: 40 });
    await type(pid, 'stty size\n');
    await out.until(/40 120/);
    await type(pid, 'sleep 100\n');
    await waitFor(() => findProcesses('sleep 100').length > 0, 5_000, 'sleep to start');
    await type(pid, '\u0003');
    await waitFor(() => findProcesses('sleep 100').length === 0, 5_000, 'Ctrl-C to end the sleep');
    await type(pid, 'echo still-$((1+1))\n');
    await out.until(/still-2/);
    await type(pid, 'exit 5\n');
    await out.done;
    expect(out.exit).toEqual({ exit_code: 5, reason: 'exited' });
    expect((await fixture.server.json('GET', `/commands/${pid}/wait`)).body).toMatchObject({ exit_code: 5, stderr: '' });
  });

  it('sends EOF (Ctrl-D) on DELETE stdin', async () => {
    const pid = await startShell({ cmd: 'cat; echo cat-ended' });
    await type(pid, 'typed\n');
    expect((await fixture.server.json('DELETE', `/commands/${pid}/stdin`)).body).toEqual({});
    const { body } = await fixture.server.json('GET', `/commands/${pid}/wait`);
    expect(body.stdout).toContain('typed\r\n');
    expect(body.stdout).toContain('cat-ended');
    expect(body.exit_code).toBe(0);
  });

  it('runs a full-screen program that draws and quits on q', async () => {
    const pid = await startShell({ cmd: 'top -d 0.2' });
    const out = follow(pid);
    await out.until(/load average/);
    await type(pid, 'q');
    await out.done;
    expect(out.exit).toEqual({ exit_code: 0, reason: 'exited' });
    // Escape sequences arrive as they are.
    expect(out.text).toContain('\u001b[');
  });

  it('runs as the requested user with their groups, on a terminal that is theirs', async () => {
    const { body } = await run({ cmd: 'id -un; id -G; stat -c %U:%a "$(tty)"', pty: PTY });
    const [name, groups, terminal] = body.stdout.split('\r\n');
    expect(name).toBe(fixture.user.name);
    if (fixture.created) {
      expect(groups!.split(' ').map(Number).sort()).toEqual([fixture.user.gid, fixture.created.extraGroup.gid].sort());
      expect(terminal).toBe(`${fixture.user.name}:620`);
    }
  });

  it('kills a streamed pty command (and what it started) when the client disconnects', async () => {
    const marker = `pty-stream-${process.pid}`;
    fixture.markers.push(marker);
    const controller = new AbortController();
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: `(exec -a ${marker}-child sleep 1000) & exec -a ${marker} sleep 1000`, pty: PTY }, { signal: controller.signal });
    const events = readEvents(response);
    expect((await events.next()).value!.event).toBe('start');
    await waitFor(() => findProcesses(marker).length >= 2, 5_000, 'the command and its child to start');
    controller.abort();
    await waitFor(() => findProcesses(marker).length === 0, 5_000, 'the command to be killed');
  });

  it('replays a terminal\'s output to a late attacher', async () => {
    const pid = await startShell({ cmd: 'echo first-line; sleep 0.5; echo second-line' });
    await new Promise((r) => setTimeout(r, 200));
    const out = follow(pid);
    await out.done;
    expect(out.text).toBe('first-line\r\nsecond-line\r\n');
    expect(out.exit).toEqual({ exit_code: 0, reason: 'exited' });
    await fixture.server.json('GET', `/commands/${pid}/wait`);
  });

  it('answers resize with 409 without a pty, 404 for an untracked pid, 400 out of range', async () => {
    const plain = (await run({ cmd: 'sleep 1000', background: true })).body.pid;
    const noPty = await fixture.server.json('POST', `/commands/${plain}/resize`, { cols: 80, rows: 24 });
    expect(noPty.status).toBe(409);
    expect(noPty.body.message).toMatch(/pty|terminal/);
    await fixture.server.json('DELETE', `/commands/${plain}`);
    expect((await fixture.server.json('POST', '/commands/4194303/resize', { cols: 80, rows: 24 })).status).toBe(404);
    const shell = await startShell({ cmd: 'sleep 1000' });
    for (const size of [{ cols: 0, rows: 24 }, { cols: 80, rows: 1001 }, { cols: 80 }, { cols: 1.5, rows: 2 }, { cols: 80, rows: 24, extra: 1 }]) {
      const bad = await fixture.server.json('POST', `/commands/${shell}/resize`, size);
      expect(bad.status, JSON.stringify(size)).toBe(400);
      expect(bad.body.message).toMatch(/body/);
    }
    for (const pty of [{ cols: 0, rows: 1 }, { cols: 1001, rows: 1 }, { rows: 5 }]) {
      expect((await run({ cmd: 'true', pty })).status, JSON.stringify(pty)).toBe(400);
    }
    expect((await fixture.server.json('DELETE', `/commands/${shell}`)).body).toEqual({ killed: true });
  });

  it('still requires cmd without a pty', async () => {
    const missing = await run({});
    expect(missing.status).toBe(400);
    expect(missing.body.message).toMatch(/cmd/);
    expect((await run({ cmd: '' })).status).toBe(400);
  });
});
