// Issue 27, resumable output: every output event carries the position after
// it; a client that comes back with one (Last-Event-ID or ?from=) gets exactly
// what follows, with a `truncated` event where output was dropped; `wait`
// long-polls; /output reads the kept bytes; finished commands stay readable for
// --keep-finished.
import { describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { waitFor } from '../helpers/proc.js';
import { makeEnvdDirs, startServer, type TestServer } from '../helpers/server.js';
import { collectEvents, readEvents, type SseEvent } from '../helpers/sse.js';

const fixture = useCommandServer();

const background = async (server: TestServer, body: Record<string, unknown>): Promise<number> => {
  const { status, body: answer } = await server.json('POST', '/commands', { ...body, background: true });
  expect(status, JSON.stringify(answer)).toBe(200);
  return answer.pid;
};
const attach = (server: TestServer, pid: number, from?: string, how: 'header' | 'query' = 'header') =>
  server.call('GET', `/commands/${pid}/stream${from !== undefined && how === 'query' ? `?from=${from}` : ''}`, undefined, from !== undefined && how === 'header' ? { headers: { 'last-event-id': from } } : {});
/** Until the command has ended, without collecting it (a `wait` would: the spec forgets a waited pid). */
const ended = (server: TestServer, pid: number) =>
  waitFor(async () => (await server.json('GET', '/commands')).body.processes.some((p: any) => p.pid === pid && !p.running), 10_000, `pid ${pid} to end`);
const textOf = (events: SseEvent[], stream = 'stdout') => events.filter((e) => e.event === stream).map((e) => e.data.data).join('');

describe('resuming a stream', () => {
  it('gives exactly what follows any event of a finished command\'s stream, by Last-Event-ID or ?from=', async () => {
    // Interleaved stdout and stderr, a character split across writes, in pieces the reads see apart.
    const pid = await background(fixture.server, {
      cmd: 'for i in 1 2 3 4 5 6; do echo "out $i"; echo "err $i" >&2; printf "\\342\\202"; sleep 0.05; printf "\\254|"; done',
    });
    const all = await collectEvents(await attach(fixture.server, pid), { ids: true });
    const output = all.filter((e) => e.event === 'stdout' || e.event === 'stderr');
    expect(output.length).toBeGreaterThan(4);
    for (const event of output) expect(event.id).toMatch(/^\d+-\d+$/);
    // The last id is every byte of both streams.
    expect(output.at(-1)!.id).toBe(`${Buffer.byteLength(textOf(all))}-${Buffer.byteLength(textOf(all, 'stderr'))}`);
    for (const [i, event] of output.entries()) {
      const rest = output.slice(i + 1);
      for (const how of ['header', 'query'] as const) {
        const resumed = await collectEvents(await attach(fixture.server, pid, event.id, how), { ids: true });
        expect(resumed[0]).toEqual({ event: 'start', data: { pid } });
        expect(resumed.at(-1)).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
        expect(textOf(resumed), `after event ${i} (${how})`).toBe(textOf(rest));
        expect(textOf(resumed, 'stderr'), `after event ${i} (${how})`).toBe(textOf(rest, 'stderr'));
      }
    }
    expect(textOf(all)).toBe('out 1\n€|out 2\n€|out 3\n€|out 4\n€|out 5\n€|out 6\n€|');
  });

  it('follows live output after the resumed part, and keeps doing so across a restart of envd', async () => {
    const dirs = makeEnvdDirs();
    let server = await startServer({ defaultUser: fixture.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    try {
      const pid = await background(server, { cmd: 'read x; echo one; read x; echo two; read x; echo three', stdin: true });
      const first = readEvents(await server.call('GET', `/commands/${pid}/stream`), { ids: true });
      expect((await first.next()).value).toEqual({ event: 'start', data: { pid } });
      await server.json('POST', `/commands/${pid}/stdin`, { data: '\n' });
      const one = (await first.next()).value!;
      expect(one).toEqual({ event: 'stdout', data: { stream: 'stdout', data: 'one\n' }, id: '4-0' });
      // A restart cuts the first client; the next envd resumes it from the id of "one".
      await server.detach();
      await first.next().catch(() => undefined);
      server = await startServer({ defaultUser: fixture.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
      const idOfOne = one.id;
      const resumed = collectEvents(await attach(server, pid, idOfOne), { ids: true });
      await server.json('POST', `/commands/${pid}/stdin`, { data: '\n' });
      await server.json('POST', `/commands/${pid}/stdin`, { data: '\n' });
      const events = await resumed;
      expect(textOf(events)).toBe('two\nthree\n');
      expect(events.filter((e) => e.event === 'stdout').at(-1)!.id).toBe('14-0');
    } finally {
      await server.close();
      dirs.remove();
    }
  });

  it('says with one truncated event how many bytes were not kept, where they are missing', async () => {
    const server = await startServer({ defaultUser: fixture.user.name, maxOutputBytes: 1000 });
    try {
      const pid = await background(server, { cmd: 'head -c 5000 /dev/zero | tr "\\0" a; echo end >&2' });
      await ended(server, pid);
      const events = await collectEvents(await attach(server, pid), { ids: true });
      expect(textOf(events)).toBe('a'.repeat(1000));
      expect(events.filter((e) => e.event === 'truncated')).toEqual([{ event: 'truncated', data: { stream: 'stdout', bytes: 4000 }, id: '5000-4' }]);
      expect(events.at(-1)).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
      // Resumed inside what was kept: the rest of it, then the gap.
      const resumed = await collectEvents(await attach(server, pid, '600-0'), { ids: true });
      expect(textOf(resumed)).toBe('a'.repeat(400));
      expect(resumed.filter((e) => e.event === 'truncated')).toEqual([{ event: 'truncated', data: { stream: 'stdout', bytes: 4000 }, id: '5000-4' }]);
      // Resumed after the gap: nothing missing any more.
      const after = await collectEvents(await attach(server, pid, '5000-4'), { ids: true });
      expect(after.map((e) => e.event)).toEqual(['start', 'exit']);
    } finally {
      await server.close();
    }
  });

  it('answers 400 for a position that is not an id of envd, 416 for one past the output, before the stream starts', async () => {
    const pid = await background(fixture.server, { cmd: 'echo hello' });
    await ended(fixture.server, pid);
    for (const bad of ['abc', '1', '1-2-3', '-1-0', '1e3-0', '99999999999999999-0']) {
      const response = await attach(fixture.server, pid, bad);
      expect(response.status, bad).toBe(400);
      expect((await response.json()).message).toMatch(/^Last-Event-ID: .* is not a position of this stream/);
    }
    const query = await attach(fixture.server, pid, 'x', 'query');
    expect(query.status).toBe(400);
    expect((await query.json()).message).toMatch(/^querystring\/from: /);
    const past = await attach(fixture.server, pid, '7-0');
    expect(past.status).toBe(416);
    expect((await past.json()).message).toMatch(/past the output of pid \d+ \(6 bytes of stdout, 0 of stderr so far\)/);
    expect((await attach(fixture.server, pid, '6-0')).status).toBe(200);
  });
});

describe('an empty ?from= beside Last-Event-ID', () => {
  it('resumes from the header, as if the query were absent (issue 37)', async () => {
    const pid = await background(fixture.server, { cmd: 'echo first; echo second' });
    await ended(fixture.server, pid);
    const resumed = await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream?from=`, undefined, { headers: { 'last-event-id': '6-0' } }));
    expect(textOf(resumed)).toBe('second\n');
    // With no header either: the whole output, from the start.
    expect(textOf(await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream?from=`)))).toBe('first\nsecond\n');
  });
});

describe('wait with timeout_ms', () => {
  it('answers 408 while the command runs, and the result once it has ended', async () => {
    const pid = await background(fixture.server, { cmd: 'sleep 0.6; echo done' });
    const early = await fixture.server.json('GET', `/commands/${pid}/wait?timeout_ms=100`);
    expect(early).toEqual({ status: 408, body: { message: `pid ${pid} is still running after 100 ms; wait again` } });
    expect((await fixture.server.json('GET', `/commands/${pid}/wait?timeout_ms=5000`)).body).toEqual({ stdout: 'done\n', stderr: '', exit_code: 0, reason: 'exited' });
    for (const bad of ['-1', 'x', '2147483648', '1.5']) expect((await fixture.server.json('GET', `/commands/${pid}/wait?timeout_ms=${bad}`)).status, bad).toBe(400);
    expect((await fixture.server.json('GET', `/commands/${pid}/wait?timeout_ms=0`)).status).toBe(200);
  });
});

describe('GET /commands/{pid}/output', () => {
  it('reads the kept bytes of a stream: from and limit, or a Range, with what was written and kept', async () => {
    const pid = await background(fixture.server, { cmd: 'printf "0123456789"; printf "err" >&2' });
    await ended(fixture.server, pid);
    const read = async (query: string, headers: Record<string, string> = {}) => {
      const response = await fixture.server.call('GET', `/commands/${pid}/output${query}`, undefined, { headers });
      return { status: response.status, text: await response.text(), headers: response.headers };
    };
    const whole = await read('');
    expect(whole).toMatchObject({ status: 200, text: '0123456789' });
    expect(whole.headers.get('x-envd-kept-bytes')).toBe('10');
    expect(whole.headers.get('x-envd-written-bytes')).toBe('10');
    expect(whole.headers.get('content-type')).toBe('application/octet-stream');
    expect((await read('?from=3&limit=4')).text).toBe('3456');
    expect((await read('?from=10')).text).toBe('');
    expect((await read('?stream=stderr')).text).toBe('err');
    const ranged = await read('', { range: 'bytes=2-4' });
    expect(ranged).toMatchObject({ status: 206, text: '234' });
    expect(ranged.headers.get('content-range')).toBe('bytes 2-4/10');
    const past = await read('?from=11');
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe('bytes */10');
    expect((await read('', { range: 'bytes=10-' })).status).toBe(416);
    for (const bad of ['?stream=stdin', '?from=-1', '?limit=0', '?what=1']) expect((await read(bad)).status, bad).toBe(400);
    expect((await fixture.server.json('GET', '/commands/4194303/output')).status).toBe(404);
  });

  it('says how much was written beside what was kept when the cap cut a stream', async () => {
    const server = await startServer({ defaultUser: fixture.user.name, maxOutputBytes: 100 });
    try {
      const pid = await background(server, { cmd: 'head -c 300 /dev/zero | tr "\\0" z' });
      await ended(server, pid);
      const response = await server.call('GET', `/commands/${pid}/output`);
      expect(await response.text()).toBe('z'.repeat(100));
      expect([response.headers.get('x-envd-kept-bytes'), response.headers.get('x-envd-written-bytes')]).toEqual(['100', '300']);
    } finally {
      await server.close();
    }
  });
});

describe('finished commands kept on purpose', () => {
  it('keeps a collected command readable for --keep-collected after its collection, then frees it', async () => {
    const server = await startServer({ defaultUser: fixture.user.name, keepCollectedMs: 600 });
    try {
      const { body } = await server.json('POST', '/commands', { cmd: 'echo kept' });
      expect(body.stdout).toBe('kept\n');
      const listed = (await server.json('GET', '/commands?finished=true')).body.processes;
      expect(listed).toHaveLength(1);
      const pid = listed[0].pid;
      expect(await (await server.call('GET', `/commands/${pid}/output`)).text()).toBe('kept\n');
      expect((await server.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: 'kept\n', stderr: '', exit_code: 0, reason: 'exited' });
      await waitFor(() => server.app.envd.processes.get(pid) === undefined, 5_000, 'the command to be freed');
      expect((await server.json('GET', '/commands?finished=true')).body.processes).toEqual([]);
      expect((await server.json('GET', `/commands/${pid}/wait`)).body.stderr).toContain('process not found');
    } finally {
      await server.close();
    }
  });

  it('keeps a finished command nobody collected readable for --keep-finished after it ended, then frees it', async () => {
    const server = await startServer({ defaultUser: fixture.user.name, keepFinishedMs: 800 });
    try {
      const pid = await background(server, { cmd: 'echo left' });
      await ended(server, pid);
      // Read as often as wanted: none of these collects it.
      for (let i = 0; i < 2; i++) {
        expect(await (await server.call('GET', `/commands/${pid}/output`)).text()).toBe('left\n');
        expect(textOf(await collectEvents(await attach(server, pid)))).toBe('left\n');
      }
      await waitFor(() => server.app.envd.processes.get(pid) === undefined, 5_000, 'the command to be freed');
      expect((await server.json('GET', `/commands/${pid}/wait`)).body.stderr).toContain('process not found');
    } finally {
      await server.close();
    }
  });
});
