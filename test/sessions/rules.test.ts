import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { collectEvents, readEvents } from '../helpers/sse.js';

// The rules of issue 40, each on bash and on the host's POSIX sh (dash); test/sessions/busybox.test.ts
// runs them again in a busybox-only root.
const fixture = useCommandServer();

const SHELLS = ['bash', 'sh'] as const;

async function newSession(shell: 'bash' | 'sh', body: Record<string, unknown> = {}): Promise<string> {
  const { status, body: answer } = await fixture.server.json('POST', '/sessions', { shell, ...body });
  expect(status, JSON.stringify(answer)).toBe(201);
  expect(answer.shell).toBe(shell);
  return answer.id as string;
}
const run = (id: string, cmd: string, extra: Record<string, unknown> = {}) => fixture.server.json('POST', `/sessions/${id}/commands`, { cmd, ...extra });
const end = (id: string) => fixture.server.json('DELETE', `/sessions/${id}`);

describe.each(SHELLS)('a session in %s', (shell) => {
  it('carries cwd, variables, functions, aliases, umask and set -o from one command to the next', async () => {
    const id = await newSession(shell);
    expect((await run(id, 'cd /tmp && export A=1 && B=2 && f() { echo "f:$1"; } && alias hi="echo alias-hi" && umask 027 && set -u')).body).toMatchObject({ exit_code: 0 });
    const { body } = await run(id, 'pwd; echo "$A $B"; f x; hi; umask; case $- in *u*) echo nounset;; esac');
    expect(body).toEqual({ stdout: '/tmp\n1 2\nf:x\nalias-hi\n0027\nnounset\n', stderr: '', exit_code: 0, reason: 'exited' });
    const listed = (await fixture.server.json('GET', '/sessions')).body.sessions.find((s: any) => s.id === id);
    expect(listed).toMatchObject({ cwd: '/tmp', busy: false, shell });
    await end(id);
  });

  it('carries $? from one command to the next: a failure, a syntax error, a timeout', async () => {
    const id = await newSession(shell);
    expect((await run(id, 'echo "first=$?"')).body).toMatchObject({ stdout: 'first=0\n', exit_code: 0 });
    expect((await run(id, '(exit 7)')).body).toMatchObject({ exit_code: 7 });
    expect((await run(id, 'echo "after=$?"')).body).toMatchObject({ stdout: 'after=7\n', exit_code: 0 });
    expect((await run(id, 'echo "then=$?"')).body).toMatchObject({ stdout: 'then=0\n' });
    expect((await run(id, 'if then')).body.exit_code).toBe(2);
    expect((await run(id, 'echo "syntax=$?"')).body).toMatchObject({ stdout: 'syntax=2\n' });
    expect((await run(id, 'sleep 30', { timeout: 0.3 })).body).toMatchObject({ exit_code: 124, timed_out: true });
    // The shell saw the interrupted command return 130, as at a terminal after Ctrl-C.
    expect((await run(id, 'echo "interrupted=$?"')).body).toMatchObject({ stdout: 'interrupted=130\n' });
    await run(id, 'false');
    expect((await run(id, 'echo "false=$?"; f() { return "$1"; }; f 9; echo "$?"')).body).toMatchObject({ stdout: 'false=1\n9\n', exit_code: 0 });
    await end(id);
  });

  it("traces only the user's own lines under set -x, never the session's", async () => {
    const id = await newSession(shell);
    await run(id, 'set -x');
    const { body } = await run(id, 'echo traced');
    expect(body.stdout).toBe('traced\n');
    expect(body.stderr).toMatch(/echo traced/);
    expect(body.stderr).not.toMatch(/__envd/);
    await run(id, 'set +x');
    expect((await run(id, 'echo quiet')).body).toMatchObject({ stdout: 'quiet\n', stderr: '' });
    await end(id);
  });

  it('answers each command its own exit code, stdout and stderr, also without a final newline', async () => {
    const id = await newSession(shell);
    expect((await run(id, 'printf out; printf err >&2; false')).body).toEqual({ stdout: 'out', stderr: 'err', exit_code: 1, reason: 'exited' });
    expect((await run(id, 'echo next')).body).toEqual({ stdout: 'next\n', stderr: '', exit_code: 0, reason: 'exited' });
    await end(id);
  });

  it("is not fooled by a command that prints the session's markers", async () => {
    const id = await newSession(shell);
    const fake = "printf '\\036envd:00000000000000000000000000000000:e:0\\036'; printf '\\036envd:%s:e\\036' x >&2; echo after; exit_is_not_here=1";
    const { body } = await run(id, `${fake}; (exit 5)`);
    expect(body.exit_code).toBe(5);
    expect(body.stdout).toBe('\x1eenvd:00000000000000000000000000000000:e:0\x1eafter\n');
    expect(body.stderr).toBe('\x1eenvd:x:e\x1e');
    await end(id);
  });

  it('keeps its frames whatever a command does to its own descriptors or to printf', async () => {
    const id = await newSession(shell);
    expect((await run(id, 'printf() { echo hijacked; }; exec 2>/dev/null; echo gone-to-null >&2; (exit 9)')).body).toMatchObject({ stdout: '', stderr: '', exit_code: 9 });
    expect((await run(id, 'echo out; echo err >&2; unset -f printf')).body).toMatchObject({ stdout: 'out\n', stderr: '', exit_code: 0 });
    expect((await run(id, 'exec >/dev/null; echo hidden; (exit 4)')).body).toMatchObject({ stdout: '', exit_code: 4 });
    await end(id);
  });

  it('gives commands an empty stdin unless stdin is given, then exactly those bytes', async () => {
    const id = await newSession(shell);
    expect((await run(id, 'cat; read x; echo "read=$?"')).body).toMatchObject({ stdout: 'read=1\n', exit_code: 0 });
    expect((await run(id, 'cat', { stdin: 'a\nb' })).body).toMatchObject({ stdout: 'a\nb', exit_code: 0 });
    expect((await run(id, 'wc -c', { stdin: 'xyz' })).body.stdout.trim()).toBe('3');
    await end(id);
  });

  it('runs heredocs, multi-line commands, syntax errors and a command that reads the rest of its input', async () => {
    const id = await newSession(shell);
    expect((await run(id, 'cat <<EOF\nline $((1+1))\nEOF\nfor i in 1 2; do\n  echo "i$i"\ndone')).body).toMatchObject({ stdout: 'line 2\ni1\ni2\n', exit_code: 0 });
    const syntax = (await run(id, 'if then')).body;
    expect(syntax.exit_code).toBe(2);
    expect(syntax.stderr).toMatch(/syntax error/i);
    expect((await run(id, `${shell} -c 'cat; echo done'`)).body).toMatchObject({ stdout: 'done\n', exit_code: 0 });
    expect((await run(id, 'echo alive')).body).toMatchObject({ stdout: 'alive\n' });
    await end(id);
  });

  it('ends the session on exit 3 and on a failure under set -e; later calls are 410', async () => {
    const id = await newSession(shell);
    const pid = (await fixture.server.json('GET', '/sessions')).body.sessions.find((s: any) => s.id === id).pid;
    expect((await run(id, 'echo bye; exit 3')).body).toEqual({ stdout: 'bye\n', stderr: '', exit_code: 3, reason: 'exited', session_ended: true });
    expect((await run(id, 'echo again')).status).toBe(410);
    expect((await end(id)).status).toBe(410);
    await waitFor(() => !existsSync(`/proc/${pid}`) || readState(pid) === 'Z', 5_000, 'the shell to exit');
    const second = await newSession(shell);
    expect((await run(second, 'set -e; false; echo not-here')).body).toMatchObject({ stdout: '', exit_code: 1, session_ended: true });
    expect((await run(second, 'true')).status).toBe(410);
    // Stricter than a terminal (docs/api.md): the command runs through eval, whose status 1 is itself a failure.
    const third = await newSession(shell);
    await run(third, 'set -e');
    expect((await run(third, 'false && true')).body).toMatchObject({ exit_code: 1, session_ended: true });
  });

  it('times out a command with SIGINT to its foreground job; the session lives on with its state', async () => {
    const id = await newSession(shell);
    await run(id, 'KEEP=kept');
    const { body } = await run(id, 'echo before; sleep 30; echo not-after', { timeout: 0.5 });
    expect(body).toMatchObject({ stdout: 'before\n', exit_code: 124, timed_out: true });
    expect((await run(id, 'echo "$KEEP"')).body).toMatchObject({ stdout: 'kept\n', exit_code: 0 });
    await end(id);
  });

  it('lives on through a timeout under set -e, which stays on', async () => {
    const id = await newSession(shell);
    await run(id, 'set -e');
    const { body } = await run(id, 'echo before; sleep 30; echo not-after', { timeout: 0.3 });
    expect(body).toMatchObject({ stdout: 'before\n', exit_code: 124, timed_out: true });
    expect(body.session_ended).toBeUndefined();
    expect((await run(id, 'echo "$?"; case $- in *e*) echo errexit;; esac')).body).toMatchObject({ stdout: '130\nerrexit\n', exit_code: 0 });
    expect((await run(id, 'false; echo not-here')).body).toMatchObject({ stdout: '', exit_code: 1, session_ended: true });
  });

  it('kills a foreground job that ignores SIGINT 2 s after it, and the session lives on', async () => {
    const id = await newSession(shell);
    const { body } = await run(id, `${shell} -c "trap '' INT; sleep 30"`, { timeout: 0.3 });
    expect(body).toMatchObject({ exit_code: 124, timed_out: true });
    expect(body.session_ended).toBeUndefined();
    expect((await run(id, 'echo ok')).body).toMatchObject({ stdout: 'ok\n' });
    await end(id);
  });

  it('answers 409 naming the running command while one runs', async () => {
    const id = await newSession(shell);
    const slow = run(id, 'sleep 1; echo slow');
    await waitFor(async () => (await fixture.server.json('GET', '/sessions')).body.sessions.find((s: any) => s.id === id).busy, 5_000, 'busy');
    const refused = await run(id, 'echo second');
    expect(refused.status).toBe(409);
    expect(refused.body.message).toContain('sleep 1; echo slow');
    expect((await slow).body).toMatchObject({ stdout: 'slow\n', exit_code: 0 });
    await end(id);
  });

  it('does not hold a command open for its background job, which lives until the session ends; nohup and setsid ones outlive it', async () => {
    const id = await newSession(shell);
    const tag = `session-bg-${shell}-${process.pid}`;
    fixture.markers.push(tag);
    const { body } = await run(id, `sleep 300 ${tag}-amp & nohup sleep 301 ${tag}-nohup >/dev/null 2>&1 & setsid sleep 302 ${tag}-setsid >/dev/null 2>&1 & echo started`.replaceAll(/sleep (\d+) (\S+)/g, `${shell} -c 'sleep $1; :' $2`));
    expect(body).toMatchObject({ stdout: 'started\n', exit_code: 0 });
    await waitFor(() => findProcesses(`${tag}-setsid`).length === 1, 5_000, 'the setsid job');
    // Waited for, not read once: each tagged shell forks its `sleep`, and until that child execs it
    // is a copy carrying the tag (a second process for a moment, seen on a loaded machine).
    await waitFor(() => findProcesses(`${tag}-amp`).length === 1 && findProcesses(`${tag}-nohup`).length === 1, 5_000, 'the & and nohup jobs, one process each');
    expect((await run(id, 'echo later')).body).toMatchObject({ stdout: 'later\n' });
    expect(findProcesses(`${tag}-amp`)).toHaveLength(1);
    expect((await end(id)).body).toEqual({ ended: true });
    await waitFor(() => findProcesses(`${tag}-amp`).length === 0, 5_000, 'the & job to end with the session');
    expect(findProcesses(`${tag}-nohup`)).toHaveLength(1);
    expect(findProcesses(`${tag}-setsid`)).toHaveLength(1);
  });

  it('streams the same events as /commands/stream, with exact bytes in base64', async () => {
    const id = await newSession(shell);
    const res = await fixture.server.call('POST', `/sessions/${id}/commands/stream`, { cmd: "printf '\\377\\000\\001'; echo e >&2; (exit 4)", encoding: 'base64' });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = await collectEvents(res);
    expect(events[0]).toMatchObject({ event: 'start' });
    const bytes = (stream: string) => Buffer.concat(events.filter((e) => e.event === stream).map((e) => Buffer.from((e.data as any).data, 'base64')));
    expect([...bytes('stdout')]).toEqual([0xff, 0, 1]);
    expect(bytes('stderr').toString()).toBe('e\n');
    expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 4, reason: 'exited' } });
    expect((await run(id, 'echo still')).body).toMatchObject({ stdout: 'still\n' });
    await end(id);
  });

  it('streams output as the command writes it, before the command ends', async () => {
    const id = await newSession(shell);
    const dir = mkdtempSync(join(tmpdir(), 'envd-session-live-'));
    chmodSync(dir, 0o755);
    const go = join(dir, 'go');
    try {
      // The command cannot end before the test has seen its first line: it waits for a file made only then.
      const res = await fixture.server.call('POST', `/sessions/${id}/commands/stream`, { cmd: `echo first; while [ ! -e ${go} ]; do sleep 0.05; done; echo second` });
      const events = readEvents(res);
      expect((await events.next()).value).toMatchObject({ event: 'start' });
      expect((await events.next()).value).toMatchObject({ event: 'stdout', data: { data: 'first\n' } });
      writeFileSync(go, '');
      const rest = [];
      for await (const event of events) rest.push(event);
      expect(rest).toEqual([
        { event: 'stdout', data: { stream: 'stdout', data: 'second\n' } },
        { event: 'exit', data: { exit_code: 0, reason: 'exited' } },
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    await end(id);
  });

  it('answers 10 MiB of output whole', async () => {
    const id = await newSession(shell);
    const { body } = await run(id, 'head -c 10485760 /dev/zero | tr "\\0" a');
    expect(body.exit_code).toBe(0);
    expect(body.stdout.length).toBe(10 * 1024 * 1024);
    expect(body.stdout_truncated).toBeUndefined();
    await end(id);
  });

  it('counts in GET /commands as the shell it is', async () => {
    const id = await newSession(shell);
    const pid = (await fixture.server.json('GET', '/sessions')).body.sessions.find((s: any) => s.id === id).pid;
    const listed = (await fixture.server.json('GET', '/commands')).body.processes.find((p: any) => p.pid === pid);
    expect(listed).toMatchObject({ running: true, background: true, cmd: `${shell} (session ${id})` });
    await end(id);
  });
});

function readState(pid: number): string {
  try {
    return (require('node:fs') as typeof import('node:fs')).readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0]!;
  } catch {
    return 'gone';
  }
}
