// Issue 37: the spec's "The process is then removed from the tracked list" (GET /commands/{pid}/wait).
// A command is forgotten once its result has been handed out (collected); one nobody has collected
// stays readable for --keep-finished, so that a stream client that lost its connection resumes it.
import { describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { collectEvents, readEvents } from '../helpers/sse.js';

const fixture = useCommandServer();
const NOT_FOUND = { stdout: '', stderr: 'process not found', exit_code: 1, reason: 'exited' };

const background = async (server: TestServer, cmd: string): Promise<number> => {
  const { status, body } = await server.json('POST', '/commands', { cmd, background: true });
  expect(status, JSON.stringify(body)).toBe(200);
  return body.pid;
};
const waitFor200 = (server: TestServer, pid: number) => server.json('GET', `/commands/${pid}/wait`);

describe('a collected command is forgotten (the default)', () => {
  it('forgets a streamed command once its exit event went out: a later wait says process not found', async () => {
    const events = await collectEvents(await fixture.server.call('POST', '/commands/stream', { cmd: 'echo streamed' }));
    const pid = events[0]!.data.pid;
    expect(events.at(-1)).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
    await waitFor(() => fixture.server.app.envd.processes.get(pid) === undefined, 5_000, 'the streamed command to be forgotten');
    expect(await waitFor200(fixture.server, pid)).toEqual({ status: 200, body: NOT_FOUND });
  });

  it('lets a client resume a streamed command by its id for a moment after the exit went out (a proxy may have lost it), hidden from everything else', async () => {
    const events = await collectEvents(await fixture.server.call('POST', '/commands/stream', { cmd: 'echo one; echo two' }));
    const pid = (events[0]!.data as { pid: number }).pid;
    expect(events.at(-1)!.event).toBe('exit');
    await waitFor(() => fixture.server.app.envd.processes.get(pid) === undefined, 5_000, 'the streamed command to be collected');
    expect((await fixture.server.call('GET', `/commands/${pid}/stream`)).status).toBe(404);
    expect((await fixture.server.call('GET', `/commands/${pid}/output`)).status).toBe(404);
    // The client saw the start (its id resumes right after it) and lost the rest with its connection.
    const started = await fixture.server.call('GET', `/commands/${pid}/stream`, undefined, { headers: { 'last-event-id': '0-0' } });
    expect(started.status).toBe(200);
    const resumed = await collectEvents(started);
    expect(resumed.filter((event) => event.event === 'stdout').map((event) => (event.data as { data: string }).data).join('')).toBe('one\ntwo\n');
    expect(resumed.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 0 } });
  });

  it('keeps a streamed command whose client was cut before its exit: the client resumes it, and wait collects it', async () => {
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: 'echo one; sleep 30' });
    const stream = readEvents(response, { ids: true });
    const start = (await stream.next()).value!;
    const one = (await stream.next()).value!;
    expect(one).toMatchObject({ event: 'stdout', data: { data: 'one\n' }, id: '4-0' });
    // The connection is lost: the command is killed (as before), but nobody has its result yet.
    await stream.return(undefined);
    const pid = start.data.pid;
    await waitFor(async () => (await fixture.server.json('GET', '/commands')).body.processes.some((p: any) => p.pid === pid && !p.running), 10_000, 'the cut command to end');
    const resumed = await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream`, undefined, { headers: { 'last-event-id': one.id! } }));
    expect(resumed.map((e) => e.event)).toEqual(['start', 'exit']);
    expect(resumed.at(-1)!.data).toMatchObject({ reason: 'killed' });
    // Attaching collects nothing; wait does.
    expect((await waitFor200(fixture.server, pid)).body).toMatchObject({ stdout: 'one\n', reason: 'killed' });
    expect((await waitFor200(fixture.server, pid)).body).toEqual(NOT_FOUND);
  });

  it('answers the result to every wait parked before the end, then to none', async () => {
    const pid = await background(fixture.server, 'sleep 0.5; echo both');
    const waits = await Promise.all([waitFor200(fixture.server, pid), waitFor200(fixture.server, pid), waitFor200(fixture.server, pid)]);
    for (const answer of waits) expect(answer).toEqual({ status: 200, body: { stdout: 'both\n', stderr: '', exit_code: 0, reason: 'exited' } });
    expect((await waitFor200(fixture.server, pid)).body).toEqual(NOT_FOUND);
    expect(fixture.server.app.envd.processes.get(pid)).toBeUndefined();
  });

  it('keeps a background command nobody waited for, readable as often as asked, until its wait', async () => {
    const pid = await background(fixture.server, 'echo uncollected');
    await waitFor(async () => (await fixture.server.json('GET', '/commands')).body.processes.some((p: any) => p.pid === pid && !p.running), 10_000, 'the end');
    for (let i = 0; i < 2; i++) {
      expect(await (await fixture.server.call('GET', `/commands/${pid}/output`)).text()).toBe('uncollected\n');
      expect((await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream`))).at(-1)!.event).toBe('exit');
    }
    expect((await waitFor200(fixture.server, pid)).body.stdout).toBe('uncollected\n');
    expect((await waitFor200(fixture.server, pid)).body).toEqual(NOT_FOUND);
  });

  it('gives a slow waiter the whole result even when a fast one collected the command meanwhile', async () => {
    // 20 MB: more than the sockets buffer, so the slow answer is still being read from the log (stdout,
    // then stderr in a second pass) when the fast waiter's collection comes.
    const bytes = 20_000_000;
    const pid = await background(fixture.server, `sleep 0.3; head -c ${bytes} /dev/zero | tr "\\0" a; echo tail >&2`);
    const slow = fixture.server.call('GET', `/commands/${pid}/wait`);
    const fast = (await (await fixture.server.call('GET', `/commands/${pid}/wait`)).json()) as any;
    expect([fast.stdout.length, fast.stderr]).toEqual([bytes, 'tail\n']);
    expect((await waitFor200(fixture.server, pid)).body).toEqual(NOT_FOUND);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const late = (await (await slow).json()) as any;
    expect([late.stdout.length, late.stderr]).toEqual([bytes, 'tail\n']);
    await waitFor(() => fixture.server.app.envd.processes.get(pid) === undefined, 5_000, 'the command to be forgotten');
  });

  it('lets an attacher still replaying finish when a wait collects the command meanwhile, spooled output included', async () => {
    // A 1 MiB memory tier: most of the output is in spool segments, which the replay opens as it gets there.
    const server = await startServer({ defaultUser: fixture.user.name, outputMemoryBytes: 1024 * 1024 });
    try {
      const bytes = 6_000_000;
      const pid = await background(server, `head -c ${bytes} /dev/zero | tr "\\0" a`);
      await waitFor(async () => (await server.json('GET', '/commands')).body.processes.some((p: any) => p.pid === pid && !p.running), 10_000, 'the end');
      // The attacher reads one event, then nothing for a while: its replay waits on the socket.
      const events = readEvents(await server.call('GET', `/commands/${pid}/stream`));
      expect((await events.next()).value).toEqual({ event: 'start', data: { pid } });
      expect((await waitFor200(server, pid)).body.stdout).toHaveLength(bytes);
      // Collected: gone for every new request at once.
      expect((await waitFor200(server, pid)).body).toEqual(NOT_FOUND);
      await new Promise((resolve) => setTimeout(resolve, 500));
      let stdout = 0;
      let last;
      for await (const event of events) {
        if (event.event === 'stdout') stdout += event.data.data.length;
        last = event;
      }
      expect(stdout).toBe(bytes);
      expect(last).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
      await waitFor(() => server.app.envd.processes.get(pid) === undefined, 5_000, 'the command to be forgotten');
    } finally {
      await server.close();
    }
  });

  it('lets a wait whose client hung up leave the command uncollected', async () => {
    const pid = await background(fixture.server, 'sleep 0.4; echo later');
    const gone = new AbortController();
    const abandoned = fixture.server.call('GET', `/commands/${pid}/wait`, undefined, { signal: gone.signal }).catch(() => 'aborted');
    await new Promise((resolve) => setTimeout(resolve, 100));
    gone.abort();
    expect(await abandoned).toBe('aborted');
    expect((await waitFor200(fixture.server, pid)).body.stdout).toBe('later\n');
  });
});

describe('--keep-collected', () => {
  it('answers a collected result again for that long, then process not found', async () => {
    const server = await startServer({ defaultUser: fixture.user.name, keepCollectedMs: 1_000 });
    try {
      const pid = await background(server, 'echo again');
      const result = { stdout: 'again\n', stderr: '', exit_code: 0, reason: 'exited' };
      expect((await waitFor200(server, pid)).body).toEqual(result);
      expect((await waitFor200(server, pid)).body).toEqual(result);
      expect(await (await server.call('GET', `/commands/${pid}/output`)).text()).toBe('again\n');
      await waitFor(() => server.app.envd.processes.get(pid) === undefined, 5_000, 'the collected command to be freed');
      expect((await waitFor200(server, pid)).body).toEqual(NOT_FOUND);
    } finally {
      await server.close();
    }
  });
});
