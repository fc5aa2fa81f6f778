import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { collectEvents, readEvents, type SseEvent } from '../helpers/sse.js';
import { useCommandServer } from '../helpers/command-user.js';
import { startServer } from '../helpers/server.js';

const fixture = useCommandServer();

const newMarker = () => {
  const suffix = randomBytes(4).toString('hex');
  fixture.markers.push(`envd-stream-${suffix}`);
  // Assembled inside the sleeper only, so the shell's own command line does not match.
  return { marker: `envd-stream-${suffix}`, sleeper: `export P=envd-stream- S=${suffix}; bash -c 'exec -a "$P$S" sleep 1000'` };
};

const stdoutOf = (events: SseEvent[]) => events.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('');

/** Reads events until one satisfies `until`; returns all read so far. */
async function readUntil(iterator: AsyncGenerator<SseEvent>, until: (event: SseEvent) => boolean): Promise<SseEvent[]> {
  const seen: SseEvent[] = [];
  for (;;) {
    const { value, done } = await iterator.next();
    if (done) throw new Error(`stream ended before the expected event; saw ${JSON.stringify(seen)}`);
    seen.push(value);
    if (until(value)) return seen;
  }
}

describe('POST /commands/stream', () => {
  it('sends start { pid }, then stdout and stderr events in order, then exit, and ends', async () => {
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: 'echo one; sleep 0.2; echo two >&2; sleep 0.2; printf "thrée"; exit 4' });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await collectEvents(response);
    expect(events[0]).toEqual({ event: 'start', data: { pid: expect.any(Number) } });
    expect(events.slice(1)).toEqual([
      { event: 'stdout', data: { stream: 'stdout', data: 'one\n' } },
      { event: 'stderr', data: { stream: 'stderr', data: 'two\n' } },
      { event: 'stdout', data: { stream: 'stdout', data: 'thrée' } },
      { event: 'exit', data: { exit_code: 4, reason: 'exited' } },
    ]);
    // Its exit went out: collected, and so forgotten (the spec: "then removed from the tracked list").
    await waitFor(() => fixture.server.app.envd.processes.get(events[0]!.data.pid) === undefined, 5_000, 'the command to be forgotten');
  });

  it('writes each event as one event: line, an id: line for output, and one JSON data: line', async () => {
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: 'printf "a\\nb\\r\\nc"' });
    const text = await response.text();
    let stdout = '';
    let lastId = '';
    for (const block of text.split('\n\n').filter(Boolean)) {
      const lines = block.split('\n');
      expect(lines[0]).toMatch(/^event: ?(start|stdout|exit)$/);
      const output = lines[0]!.endsWith('stdout');
      expect(lines).toHaveLength(output ? 3 : 2);
      if (output) lastId = /^id: (\d+-\d+)$/.exec(lines[1]!)![1]!;
      const data = JSON.parse(lines.at(-1)!.replace(/^data: ?/, ''));
      if (output) stdout += data.data;
    }
    // The last output event's id: every byte of stdout (6) and of stderr (none) gone out.
    expect(lastId).toBe('6-0');
    // bash's printf writes line by line (three writes): how many stdout events
    // carry them depends on when envd reads, what they carry together does not.
    expect(stdout).toBe('a\nb\r\nc');
  });

  it('answers plain JSON errors when the command cannot start', async () => {
    for (const [body, status] of [
      [{ cmd: 'true', user: 'no-such-user-xyz' }, 400],
      [{ cmd: 'true', cwd: '/no/such/dir' }, 400],
      [{ cmd: '' }, 400],
      [{ cmd: 'true', background: true }, 400],
    ] as const) {
      const response = await fixture.server.call('POST', '/commands/stream', body);
      expect(response.status).toBe(status);
      expect(response.headers.get('content-type')).toMatch(/application\/json/);
      expect((await response.json()).message).toEqual(expect.any(String));
    }
  });

  it('streams 10 MB exactly', async () => {
    const events = await collectEvents(await fixture.server.call('POST', '/commands/stream', { cmd: 'head -c 10000000 /dev/zero | tr "\\0" "b"' }));
    const stdout = stdoutOf(events);
    expect(stdout.length).toBe(10_000_000);
    expect(/^b+$/.test(stdout)).toBe(true);
    expect(events.at(-1)).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
  });

  it('keeps a character split across two writes whole and turns broken UTF-8 into U+FFFD', async () => {
    const events = await collectEvents(await fixture.server.call('POST', '/commands/stream', { cmd: `printf '\\360\\237'; sleep 0.3; printf '\\230\\200 \\377'` }));
    expect(stdoutOf(events)).toBe('😀 \uFFFD');
  });

  it('reports a timeout in the exit event', async () => {
    const events = await collectEvents(await fixture.server.call('POST', '/commands/stream', { cmd: 'echo hi; sleep 1000', timeout: 0.5 }));
    expect(events.at(-1)).toEqual({ event: 'exit', data: { exit_code: 124, reason: 'timed_out', timed_out: true } });
  });

  it('kills the command when the client disconnects', async () => {
    const { marker, sleeper } = newMarker();
    const abort = new AbortController();
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: `echo started; ${sleeper}` }, { signal: abort.signal });
    const events = readEvents(response);
    await readUntil(events, (e) => e.event === 'stdout');
    await waitFor(() => findProcesses(marker).length === 1, 10_000, 'the command to start');
    abort.abort();
    await waitFor(() => findProcesses(marker).length === 0, 5_000, 'the command to be killed');
    // Its client never got the exit: killed but not collected, so that the client can resume it.
    await waitFor(() => fixture.server.app.envd.processes.list().every((proc) => !proc.running && !proc.collected), 5_000, 'the command to end uncollected');
  });
});

describe('GET /commands/{pid}/stream (attach)', () => {
  it('replays what was kept, then follows live output; several attachers; leaving does not kill', async () => {
    const { body: started } = await fixture.server.json('POST', '/commands', {
      cmd: 'echo one; read line; echo "got $line"; echo bye >&2',
      background: true,
      stdin: true,
    });
    const first = readEvents(await fixture.server.call('GET', `/commands/${started.pid}/stream`));
    const firstSeen = await readUntil(first, (e) => e.event === 'stdout');
    expect(firstSeen).toEqual([
      { event: 'start', data: { pid: started.pid } },
      { event: 'stdout', data: { stream: 'stdout', data: 'one\n' } },
    ]);

    // A late attacher gets the kept "one" replayed.
    const second = readEvents(await fixture.server.call('GET', `/commands/${started.pid}/stream`));
    expect(await readUntil(second, (e) => e.event === 'stdout')).toEqual(firstSeen);

    // An attacher that leaves does not kill the process.
    const abort = new AbortController();
    const third = readEvents(await fixture.server.call('GET', `/commands/${started.pid}/stream`, undefined, { signal: abort.signal }));
    await readUntil(third, (e) => e.event === 'stdout');
    const proc = fixture.server.app.envd.processes.get(started.pid)!;
    expect(proc.subscriberCount).toBe(3);
    abort.abort();
    // Its subscription is dropped (no leak), and the process runs on.
    await waitFor(() => proc.subscriberCount === 2, 5_000, 'the attacher to be unsubscribed');
    expect(proc.running).toBe(true);

    await fixture.server.json('POST', `/commands/${started.pid}/stdin`, { data: 'two\n' });
    const live = [
      { event: 'stdout', data: { stream: 'stdout', data: 'got two\n' } },
      { event: 'stderr', data: { stream: 'stderr', data: 'bye\n' } },
      { event: 'exit', data: { exit_code: 0, reason: 'exited' } },
    ];
    const rest = async (iterator: AsyncGenerator<SseEvent>) => {
      const events: SseEvent[] = [];
      for await (const event of iterator) if (event.event !== ':') events.push(event);
      return events;
    };
    expect(await rest(first)).toEqual(live);
    expect(await rest(second)).toEqual(live);
    expect(proc.subscriberCount).toBe(0);
    expect((await fixture.server.json('GET', `/commands/${started.pid}/wait`)).body).toEqual({ stdout: 'one\ngot two\n', stderr: 'bye\n', exit_code: 0, reason: 'exited' });
  });

  it('replays everything and the exit of a finished background command', async () => {
    const { body: started } = await fixture.server.json('POST', '/commands', { cmd: 'echo done', background: true });
    await waitFor(() => fixture.server.app.envd.processes.get(started.pid)?.running === false, 5_000, 'the command to finish');
    const events = await collectEvents(await fixture.server.call('GET', `/commands/${started.pid}/stream`));
    expect(events).toEqual([
      { event: 'start', data: { pid: started.pid } },
      { event: 'stdout', data: { stream: 'stdout', data: 'done\n' } },
      { event: 'exit', data: { exit_code: 0, reason: 'exited' } },
    ]);
  });

  it('shows a live attacher all output, even past the output cap that wait keeps', async () => {
    const small = await startServer({ defaultUser: fixture.user.name, maxOutputBytes: 1000 });
    try {
      const { body: started } = await small.json('POST', '/commands', { cmd: 'read go; head -c 5000 /dev/zero | tr "\\0" "c"', background: true, stdin: true });
      const response = await small.call('GET', `/commands/${started.pid}/stream`);
      const iterator = readEvents(response);
      await readUntil(iterator, (e) => e.event === 'start');
      await small.json('POST', `/commands/${started.pid}/stdin`, { data: '\n' });
      const events = await readUntil(iterator, (e) => e.event === 'exit');
      expect(stdoutOf(events)).toBe('c'.repeat(5000));
      expect((await small.json('GET', `/commands/${started.pid}/wait`)).body).toEqual({ stdout: 'c'.repeat(1000), stderr: '', exit_code: 0, reason: 'exited', stdout_truncated: true });
    } finally {
      await small.close();
    }
  });

  it('answers 404 for an untracked pid and 400 for a pid that is not an integer', async () => {
    const untracked = await fixture.server.json('GET', '/commands/4194303/stream');
    expect(untracked.status).toBe(404);
    expect(untracked.body.message).toMatch(/not tracked/);
    for (const pid of ['abc', '1e99', '0x10', '-1', '0', '1.5']) {
      const bad = await fixture.server.json('GET', `/commands/${pid}/stream`);
      expect(bad.status, pid).toBe(400);
      expect(bad.body.message).toMatch(/pid/);
    }
  });
});

describe('keep-alive', () => {
  it('sends a comment line during 15 s of silence', { timeout: 40_000 }, async () => {
    const { sleeper } = newMarker();
    const abort = new AbortController();
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: sleeper }, { signal: abort.signal });
    const iterator = readEvents(response);
    await readUntil(iterator, (e) => e.event === 'start');
    const next = await iterator.next();
    expect(next.value).toMatchObject({ event: ':' });
    abort.abort();
  });
});
