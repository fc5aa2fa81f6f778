// Issue 40 in the busybox + musl guest (envd-init as PID 1, busybox's ash the only shell):
// sessions keep their state, keep their rules, and survive kill -9 of envd. One boot for all.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEvents, type SseEvent } from '../helpers/sse.js';
import { bootGuest, staticNetwork, type BootedGuest } from './boot.js';
import { run, type EnvdClient } from './client.js';
import { BUSYBOX_IMAGE_FILE } from './paths.js';
import { envdPid, waitForRestart } from './scenario.js';

describe('sessions in a qemu VM booted from the busybox + musl image', () => {
  let guest: BootedGuest | undefined;
  let client: EnvdClient;

  beforeAll(async () => {
    guest = await bootGuest({ image: BUSYBOX_IMAGE_FILE, name: 'busybox-sessions', append: staticNetwork('envd-busybox') });
    client = guest.client;
  });

  afterAll(async () => {
    await guest?.stop();
  });

  const create = async (body: Record<string, unknown> = {}) => {
    const { status, body: answer } = await client.json('POST', '/sessions', body);
    expect(status, JSON.stringify(answer)).toBe(201);
    return answer as { id: string; pid: number; user: string; cwd: string; shell: string };
  };
  const inSession = (id: string, cmd: string, extra: Record<string, unknown> = {}) => client.json('POST', `/sessions/${id}/commands`, { cmd, ...extra });
  /** How many processes of the guest have `tag` in their command line (no pgrep in this image). */
  const countTagged = async (tag: string) => Number((await run(client, `grep -l '${tag.slice(0, -1)}[${tag.at(-1)}]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l`, { user: 'root' })).stdout.trim());

  it("runs in busybox sh as the default user and carries cwd, variables, functions, aliases, umask and $?", async () => {
    const session = await create();
    expect(session).toMatchObject({ shell: 'sh', user: 'user', cwd: '/home/user' });
    expect((await client.json('POST', '/sessions', { shell: 'bash' })).status).toBe(400);
    expect((await inSession(session.id, 'cd /tmp && export A=1 && B=2 && f() { echo "f:$1"; } && alias hi="echo alias-hi" && umask 027')).body).toMatchObject({ exit_code: 0 });
    expect((await inSession(session.id, 'pwd; echo "$A $B"; f x; hi; umask; (exit 6)')).body).toEqual({ stdout: '/tmp\n1 2\nf:x\nalias-hi\n0027\n', stderr: '', exit_code: 6, reason: 'exited' });
    expect((await inSession(session.id, 'echo "status=$?"')).body).toMatchObject({ stdout: 'status=6\n', exit_code: 0 });
    const listed = (await client.json('GET', '/sessions')).body.sessions.find((s: { id: string }) => s.id === session.id);
    expect(listed).toMatchObject({ cwd: '/tmp', busy: false, shell: 'sh', user: 'user' });
    expect((await client.json('DELETE', `/sessions/${session.id}`)).body).toEqual({ ended: true });
  });

  it('runs a heredoc and a multi-line loop, gives an empty stdin, answers a syntax error 2, and streams the same events', async () => {
    const { id } = await create();
    expect((await inSession(id, 'cat <<EOF\nline $((1+1))\nEOF\nfor i in 1 2; do\n  echo "i$i"\ndone')).body).toMatchObject({ stdout: 'line 2\ni1\ni2\n', exit_code: 0 });
    expect((await inSession(id, 'cat; echo "eof"')).body).toMatchObject({ stdout: 'eof\n', exit_code: 0 });
    expect((await inSession(id, 'wc -c', { stdin: 'abc' })).body.stdout.trim()).toBe('3');
    const syntax = (await inSession(id, 'if then')).body;
    expect(syntax.exit_code).toBe(2);
    expect(syntax.stderr).toMatch(/syntax error/i);
    const response = await client.call('POST', `/sessions/${id}/commands/stream`, { cmd: "echo out; printf '\\377' ; echo err >&2; (exit 4)", encoding: 'base64' });
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    const events: SseEvent[] = [];
    for await (const event of readEvents(response)) events.push(event);
    expect(events[0]).toMatchObject({ event: 'start' });
    const bytes = (stream: string) => Buffer.concat(events.filter((e) => e.event === stream).map((e) => Buffer.from(e.data.data, 'base64')));
    expect([...bytes('stdout')]).toEqual([...Buffer.from('out\n'), 0xff]);
    expect(bytes('stderr').toString()).toBe('err\n');
    expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 4, reason: 'exited' } });
    await client.json('DELETE', `/sessions/${id}`);
  });

  it('times out a command and keeps the session with its state; a background job does not hold a command and ends with the session', async () => {
    const { id } = await create();
    const tag = `guest-session-bg-${randomBytes(4).toString('hex')}`;
    await inSession(id, 'KEEP=kept');
    expect((await inSession(id, 'echo before; sleep 30; echo not-after', { timeout: 0.5 })).body).toMatchObject({ stdout: 'before\n', exit_code: 124, timed_out: true });
    expect((await inSession(id, 'echo "$KEEP"')).body).toEqual({ stdout: 'kept\n', stderr: '', exit_code: 0, reason: 'exited' });
    const started = Date.now();
    expect((await inSession(id, `sh -c 'sleep 300; :' ${tag}-amp & setsid sh -c 'sleep 300; :' ${tag}-setsid >/dev/null 2>&1 & echo started`)).body).toMatchObject({ stdout: 'started\n', exit_code: 0 });
    // Generous for TCG, far below the job's 300 s: the command ended with its line, not with its job.
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(await countTagged(`${tag}-amp`)).toBe(1);
    expect((await inSession(id, 'echo later')).body).toMatchObject({ stdout: 'later\n', exit_code: 0 });
    expect((await client.json('DELETE', `/sessions/${id}`)).body).toEqual({ ended: true });
    const deadline = Date.now() + 20_000;
    while ((await countTagged(`${tag}-amp`)) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(await countTagged(`${tag}-amp`)).toBe(0);
    // setsid: another session, which the hangup of this one does not reach.
    expect(await countTagged(`${tag}-setsid`)).toBe(1);
    await run(client, `kill $(grep -l '${tag}-setsi[d]' /proc/[0-9]*/cmdline | cut -d/ -f3)`, { user: 'root' });
  });

  it('lives on through kill -9 of envd between two of its commands (re-adopted, state and all); exit 3 then ends it, 410 after', async () => {
    const session = await create();
    expect((await inSession(session.id, 'cd /tmp; export BEFORE=kept; g() { echo "g $1"; }; (exit 5)')).body).toMatchObject({ exit_code: 5 });
    const before = await envdPid(client);
    await client.json('POST', '/commands', { cmd: 'sleep 1; kill -9 $(pidof envd)', user: 'root', background: true });
    const backMs = await waitForRestart(client, before);
    console.log(`busybox sessions: envd back ${backMs} ms after kill -9`);
    const listed = (await client.json('GET', '/sessions')).body.sessions;
    expect(listed).toEqual([expect.objectContaining({ id: session.id, pid: session.pid, cwd: '/tmp', busy: false, shell: 'sh' })]);
    expect((await inSession(session.id, 'echo "$? $BEFORE"; pwd; g x')).body).toEqual({ stdout: '5 kept\n/tmp\ng x\n', stderr: '', exit_code: 0, reason: 'exited' });
    expect((await inSession(session.id, 'echo bye; exit 3')).body).toEqual({ stdout: 'bye\n', stderr: '', exit_code: 3, reason: 'exited', session_ended: true });
    const refused = await inSession(session.id, 'true');
    expect(refused.status).toBe(410);
    expect(refused.body.message).toContain('has ended');
    expect((await client.json('DELETE', `/sessions/${session.id}`)).status).toBe(410);
    expect((await client.json('GET', '/sessions')).body.sessions).toEqual([]);
  });
});
