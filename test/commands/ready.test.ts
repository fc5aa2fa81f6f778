// Readiness (issue 39 §3): `ready` on POST /commands and /commands/stream, the stream's `ready` event,
// and GET /commands/{pid}/ready answering 200 / 408 / 409 / 404. Real servers (python3 -m http.server),
// real output, real kills.
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { findProcesses, freePort } from '../helpers/proc.js';
import { makeEnvdDirs, startServer, type TestServer } from '../helpers/server.js';
import { collectEvents } from '../helpers/sse.js';

const fixture = useCommandServer();
const marker = (name: string) => {
  const text = `ready-${name}-${process.pid}`;
  fixture.markers.push(text);
  return text;
};
const background = async (body: Record<string, unknown>, server: TestServer = fixture.server) => {
  const { status, body: answer } = await server.json('POST', '/commands', { ...body, background: true });
  expect(status, JSON.stringify(answer)).toBe(200);
  return answer.pid as number;
};
const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });

describe('readiness of a command', () => {
  it('is ready once its port listens, not before', async () => {
    const port = await freePort();
    const pid = await background({ cmd: `sleep 0.4; exec python3 -m http.server --bind 127.0.0.1 ${port} # ${marker('port')}`, ready: { port } });
    expect(await listening(port)).toBe(false);
    const { status, body } = await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=20000`);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.after_ms).toBeGreaterThanOrEqual(400);
    expect(await listening(port)).toBe(true);
    await fixture.server.json('DELETE', `/commands/${pid}`);
  });

  it('is ready once its URL answers the status asked for', async () => {
    const port = await freePort();
    const pid = await background({
      cmd: `exec python3 -m http.server --bind 127.0.0.1 ${port} # ${marker('http')}`,
      ready: { http: { url: `http://127.0.0.1:${port}/no-such-file`, status: 404 } },
    });
    const { status, body } = await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=20000`);
    expect(status, JSON.stringify(body)).toBe(200);
    const answer = await fetch(`http://127.0.0.1:${port}/no-such-file`);
    expect(answer.status).toBe(404);
    await fixture.server.json('DELETE', `/commands/${pid}`);
  });

  it('is ready on a matching line, and the stream says so after that line with a ready event', async () => {
    const response = await fixture.server.call('POST', '/commands/stream', {
      cmd: `echo starting; sleep 0.3; printf 'server listening on '; sleep 0.2; echo 8123; sleep 0.3; echo done # ${marker('log')}`,
      ready: { log: 'listening on \\d+$' },
    });
    expect(response.status).toBe(200);
    const events = await collectEvents(response);
    const names = events.filter((event) => event.event !== ':').map((event) => event.event);
    expect(names.filter((name) => name === 'ready')).toHaveLength(1);
    const readyAt = names.indexOf('ready');
    const text = events.slice(0, readyAt).filter((event) => event.event === 'stdout').map((event) => event.data.data).join('');
    expect(text).toBe('starting\nserver listening on 8123\n');
    expect(events[readyAt]!.data.after_ms).toBeGreaterThanOrEqual(500);
    expect(names.at(-1)).toBe('exit');
  });

  it('answers 408 while not ready, then 200 once ready, with the same after_ms for everyone', async () => {
    const file = `/tmp/envd-ready-${process.pid}-${Date.now()}`;
    const pid = await background({ cmd: `while [ ! -e ${file} ]; do sleep 0.05; done; echo GO >&2; sleep 30 # ${marker('408')}`, ready: { log: '^GO$' } });
    const early = await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=150`);
    expect(early.status).toBe(408);
    expect(early.body.message).toMatch(/not ready/);
    const waiting = fixture.server.json('GET', `/commands/${pid}/ready`);
    const touch = await background({ cmd: `touch ${file}` });
    const { status, body } = await waiting;
    expect(status).toBe(200);
    expect((await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=0`)).body).toEqual(body);
    await fixture.server.json('GET', `/commands/${touch}/wait`);
    await fixture.server.json('DELETE', `/commands/${pid}`);
    await fixture.server.json('POST', '/commands', { cmd: `rm -f ${file}` });
  });

  it('answers 409 with the exit fields when the command ends before it is ready', async () => {
    const pid = await background({ cmd: 'echo nope; exit 3', ready: { log: 'never' } });
    const { status, body } = await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=20000`);
    expect(status).toBe(409);
    expect(body).toMatchObject({ exit_code: 3, reason: 'exited', message: expect.stringMatching(/ended before it was ready/) });
  });

  it('kills a command not ready within ready_timeout_ms, and says so with 409 reason killed', async () => {
    const pid = await background({ cmd: `sleep 30 # ${marker('deadline')}`, ready: { log: 'never' }, ready_timeout_ms: 300 });
    const { status, body } = await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=20000`);
    expect(status).toBe(409);
    expect(body).toMatchObject({ reason: 'killed', signal: 'SIGKILL' });
    expect(findProcesses(`deadline-${process.pid}`)).toEqual([]);
  });

  it('answers 404 for a pid envd does not track, and 200 at once for a command started without ready', async () => {
    expect((await fixture.server.json('GET', '/commands/9999999/ready')).status).toBe(404);
    const pid = await background({ cmd: `sleep 30 # ${marker('plain')}` });
    expect(await fixture.server.json('GET', `/commands/${pid}/ready?timeout_ms=0`)).toEqual({ status: 200, body: { after_ms: 0 } });
    await fixture.server.json('DELETE', `/commands/${pid}`);
  });

  it.each([
    [{ ready: { log: '(a)\\1' } }, /ready\/log: .*linear-time/],
    [{ ready: { log: '(' } }, /ready\/log/],
    [{ ready: { http: { url: 'ftp://x/' } } }, /ready\/http\/url: must be http/],
    [{ ready: { http: { url: 'not a url' } } }, /ready\/http\/url: "not a url" is not a URL/],
    [{ ready_timeout_ms: 100 }, /ready_timeout_ms: needs ready/],
    [{ ready: { port: 0 } }, /ready/],
    [{ ready: { port: 80, log: 'x' } }, /ready/],
  ])('refuses %j with a 400 before starting anything', async (fields, message) => {
    const { status, body } = await fixture.server.json('POST', '/commands', { cmd: 'echo started', ...fields });
    expect(status).toBe(400);
    expect(body.message).toMatch(message);
  });

  it('matches a short unfinished line as it grows, and a long one once its newline comes', async () => {
    const file = `/tmp/envd-ready-partial-${process.pid}-${Date.now()}`;
    const prompt = await background({ cmd: `printf 'Ready> '; sleep 30 # ${marker('prompt')}`, ready: { log: '^Ready> $' } });
    expect((await fixture.server.json('GET', `/commands/${prompt}/ready?timeout_ms=20000`)).status).toBe(200);
    // Past MAX_READY_PARTIAL_CHARS (1 Ki) an unfinished line waits for its newline.
    const long = await background({ cmd: `printf '%02000d READY' 0; while [ ! -e ${file} ]; do sleep 0.05; done; echo; sleep 30 # ${marker('long')}`, ready: { log: 'READY$' } });
    expect((await fixture.server.json('GET', `/commands/${long}/ready?timeout_ms=500`)).status).toBe(408);
    await fixture.server.json('POST', '/commands', { cmd: `touch ${file}` });
    expect((await fixture.server.json('GET', `/commands/${long}/ready?timeout_ms=20000`)).status).toBe(200);
    await fixture.server.json('POST', '/commands', { cmd: `rm -f ${file}` });
    await fixture.server.json('DELETE', `/commands/${prompt}`);
    await fixture.server.json('DELETE', `/commands/${long}`);
  });

  it('runs a pattern that would backtrack for ever in linear time', async () => {
    const started = Date.now();
    const { status } = await fixture.server.json('POST', '/commands', { cmd: 'printf "%0.sa" $(seq 1 5000); echo b', ready: { log: '^(a+)+$' } });
    expect(status).toBe(200);
    // A backtracking engine needs 2^5000 steps for this line; the linear one answers at once.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect((await fixture.server.json('GET', '/health')).status).toBe(200);
  });

  it('carries a ready command\'s readiness, and a pending check, over a restart of envd', async () => {
    const dirs = makeEnvdDirs();
    const first = await startServer({ defaultUser: fixture.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    const file = `/tmp/envd-ready-restart-${process.pid}-${Date.now()}`;
    const ready = await background({ cmd: `echo up; sleep 30 # ${marker('restart1')}`, ready: { log: 'up' } }, first);
    const pending = await background({ cmd: `while [ ! -e ${file} ]; do sleep 0.05; done; echo up; sleep 30 # ${marker('restart2')}`, ready: { log: 'up' } }, first);
    const before = await first.json('GET', `/commands/${ready}/ready?timeout_ms=20000`);
    expect(before.status).toBe(200);
    await first.detach();
    const second = await startServer({ defaultUser: fixture.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    try {
      expect(await second.json('GET', `/commands/${ready}/ready?timeout_ms=0`)).toEqual(before);
      expect((await second.json('GET', `/commands/${pending}/ready?timeout_ms=100`)).status).toBe(408);
      await second.json('POST', '/commands', { cmd: `touch ${file}` });
      expect((await second.json('GET', `/commands/${pending}/ready?timeout_ms=20000`)).status).toBe(200);
    } finally {
      await second.json('POST', '/commands', { cmd: `rm -f ${file}` });
      await second.close();
      dirs.remove();
    }
  });
});
