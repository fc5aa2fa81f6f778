// Issue 40 through nginx configured as the control plane forwards (nginx.ts): a session's state
// carries, its stream is live, a client that leaves mid-stream leaves the session usable, and
// every refusal (409 busy, 410 ended) arrives as JSON.
import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { findProcesses, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';
import { startProxiedEnvd, type ProxiedEnvd } from './fixture.js';
import type { Nginx } from './nginx.js';

/** Long enough for a loaded 2-core machine, short enough that a buffering proxy fails the test instead of hanging it. */
const EVENT_DEADLINE_MS = 20_000;

let envd: EnvdProcess;
let nginx: Nginx;
let dir: string;
let proxied: ProxiedEnvd | undefined;
const markers: string[] = [];

beforeAll(async () => {
  proxied = await startProxiedEnvd('proxy-sessions', { workdir: true });
  ({ envd, nginx, dir } = proxied);
});
afterEach(() => {
  for (const marker of markers.splice(0)) for (const pid of findProcesses(marker)) process.kill(pid, 'SIGKILL');
});
afterAll(async () => {
  await proxied?.stop();
});

function call(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
  return proxied!.call(method, path, body, { signal });
}

/** A JSON answer; fails if what came back through the proxy is not JSON (an nginx error page, say). */
async function json(method: string, path: string, body?: unknown): Promise<{ status: number; type: string; body: any }> {
  const response = await call(method, path, body);
  const type = response.headers.get('content-type') ?? '';
  expect(type, `${method} ${path} -> ${response.status}`).toContain('application/json');
  return { status: response.status, type, body: await response.json() };
}

const create = async () => {
  const { status, body } = await json('POST', '/sessions', {});
  expect(status, JSON.stringify(body)).toBe(201);
  return body as { id: string; pid: number };
};
const inSession = (id: string, cmd: string) => json('POST', `/sessions/${id}/commands`, { cmd });

/** The next event that is not a keep-alive, or a failure after EVENT_DEADLINE_MS (a proxy that holds events back). */
async function nextEvent(events: AsyncGenerator<SseEvent>): Promise<SseEvent> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no event within ${EVENT_DEADLINE_MS} ms: held back by the proxy?`)), EVENT_DEADLINE_MS)));
  try {
    for (;;) {
      const { value, done } = await Promise.race([events.next(), late]);
      if (done) throw new Error('the stream ended early');
      if (value.event !== ':') return value;
    }
  } finally {
    clearTimeout(timer);
  }
}

const textOf = (event: SseEvent) => String(event.data.data);

describe('sessions through nginx', () => {
  it('carries cd, export and a function from one command to the next', async () => {
    const { id } = await create();
    expect((await inSession(id, `cd ${dir} && mkdir -p sub && cd sub && export VIA=proxy && greet() { echo "hello $1"; }`)).body).toMatchObject({ exit_code: 0 });
    expect((await inSession(id, 'pwd; echo "$VIA"; greet nginx')).body).toEqual({ stdout: `${dir}/sub\nproxy\nhello nginx\n`, stderr: '', exit_code: 0, reason: 'exited' });
    const listed = (await json('GET', '/sessions')).body.sessions.find((s: { id: string }) => s.id === id);
    expect(listed).toMatchObject({ cwd: `${dir}/sub`, busy: false });
    expect((await json('DELETE', `/sessions/${id}`)).body).toEqual({ ended: true });
  });

  it('streams events live: the first arrives while the command still runs', async () => {
    const { id } = await create();
    const go = join(dir, `go-${randomBytes(4).toString('hex')}`);
    // The command cannot end before the test has seen its first line: it waits for a file the test makes then.
    const response = await call('POST', `/sessions/${id}/commands/stream`, { cmd: `echo first; while [ ! -e ${go} ]; do sleep 0.05; done; echo second; (exit 3)` });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    const events = readEvents(response);
    expect(await nextEvent(events)).toMatchObject({ event: 'start' });
    const first = await nextEvent(events);
    expect(first.event).toBe('stdout');
    expect(textOf(first)).toBe('first\n');
    expect((await json('GET', '/sessions')).body.sessions.find((s: { id: string }) => s.id === id).busy).toBe(true);
    writeFileSync(go, '');
    const rest: SseEvent[] = [];
    for (let event = await nextEvent(events); ; event = await nextEvent(events)) {
      rest.push(event);
      if (event.event === 'exit') break;
    }
    expect(rest.filter((e) => e.event === 'stdout').map(textOf).join('')).toBe('second\n');
    expect(rest.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 3, reason: 'exited' } });
    expect((await events.next()).done).toBe(true);
    expect((await inSession(id, 'echo after')).body).toMatchObject({ stdout: 'after\n', exit_code: 0 });
    await json('DELETE', `/sessions/${id}`);
  });

  it('ends the client side cleanly when it leaves mid-stream; the command is interrupted and the session stays usable', async () => {
    const { id } = await create();
    await inSession(id, 'KEEP=kept');
    const tag = `proxy-session-left-${process.pid}-${randomBytes(3).toString('hex')}`;
    markers.push(tag);
    const abort = new AbortController();
    const response = await call('POST', `/sessions/${id}/commands/stream`, { cmd: `echo started; sh -c 'sleep 300; :' ${tag}; echo never` }, abort.signal);
    const events = readEvents(response);
    expect(await nextEvent(events)).toMatchObject({ event: 'start' });
    expect(textOf(await nextEvent(events))).toBe('started\n');
    await waitFor(() => findProcesses(tag).length === 1, 5_000, 'the command');
    abort.abort();
    // The client's read ends at once with the abort: no hang, no event after it.
    await expect(events.next()).rejects.toThrow(/abort/i);
    // nginx closes its upstream connection; envd interrupts the command as a timeout would.
    await waitFor(() => findProcesses(tag).length === 0, 10_000, 'the command to be interrupted');
    await waitFor(async () => !(await json('GET', '/sessions')).body.sessions.find((s: { id: string }) => s.id === id).busy, 10_000, 'the session to be idle');
    expect((await inSession(id, 'echo "$KEEP $?"')).body).toEqual({ stdout: 'kept 130\n', stderr: '', exit_code: 0, reason: 'exited' });
    expect(nginx.errorLog()).not.toMatch(/\[(crit|alert|emerg)\]/);
    await json('DELETE', `/sessions/${id}`);
  });

  it('answers 409 while a command runs and 410 once the session has ended, as JSON on both routes; DELETE ends it', async () => {
    const { id, pid } = await create();
    const go = join(dir, `go-${randomBytes(4).toString('hex')}`);
    const slow = inSession(id, `while [ ! -e ${go} ]; do sleep 0.05; done; echo slow`);
    await waitFor(async () => (await json('GET', '/sessions')).body.sessions.find((s: { id: string }) => s.id === id).busy, 10_000, 'busy');
    const busy = await inSession(id, 'echo second');
    expect(busy.status).toBe(409);
    expect(busy.body.message).toContain('one command at a time');
    const busyStream = await json('POST', `/sessions/${id}/commands/stream`, { cmd: 'echo second' });
    expect(busyStream.status).toBe(409);
    expect(busyStream.body.message).toContain('one command at a time');
    writeFileSync(go, '');
    expect((await slow).body).toMatchObject({ stdout: 'slow\n', exit_code: 0 });

    expect((await json('DELETE', `/sessions/${id}`)).body).toEqual({ ended: true });
    await waitFor(() => !existsSync(`/proc/${pid}`), 10_000, 'the shell to be gone');
    for (const [method, path, body] of [
      ['POST', `/sessions/${id}/commands`, { cmd: 'true' }],
      ['POST', `/sessions/${id}/commands/stream`, { cmd: 'true' }],
      ['DELETE', `/sessions/${id}`, undefined],
    ] as const) {
      const ended = await json(method, path, body);
      expect(ended.status, `${method} ${path}`).toBe(410);
      expect(ended.body).toEqual({ message: `session ${id} has ended` });
    }
    expect((await json('GET', '/sessions')).body.sessions.map((s: { id: string }) => s.id)).not.toContain(id);
  });
});
