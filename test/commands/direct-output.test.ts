// Direct output (docs/holder-protocol.md): a lone stream client's socket is lent
// to the command's holder, which writes the events itself; anyone else who
// follows the command takes it back. What the clients see must not change.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { waitFor } from '../helpers/proc.js';
import { startServer } from '../helpers/server.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';

const fixture = useCommandServer();

/** The holder of a command: its shell's parent. */
const holderOf = (shellPid: number) => Number(readFileSync(`/proc/${shellPid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
/** A holder has two sockets of its own (listening, envd's link); a lent one is a third. */
const socketCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).filter((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')).length;
const HOLDER_SOCKETS = 2;

async function next(events: AsyncGenerator<SseEvent>): Promise<SseEvent> {
  const { value, done } = await events.next();
  if (done) throw new Error('the stream ended');
  return value;
}

/** Reads to the end; resolves with what came, or with the error that cut it. */
async function drain(events: AsyncGenerator<SseEvent>): Promise<SseEvent[] | Error> {
  const seen: SseEvent[] = [];
  try {
    for await (const event of events) seen.push(event);
    return seen;
  } catch (error) {
    return error as Error;
  }
}

describe('direct output', () => {
  it('lends a lone client\'s socket to the holder; a second client takes it back, and both see everything in order', async () => {
    const { body: started } = await fixture.server.json('POST', '/commands', { cmd: 'cat; echo done >&2', background: true, stdin: true });
    const pid = started.pid as number;
    const stream = readEvents(await fixture.server.call('GET', `/commands/${pid}/stream`));
    expect(await next(stream)).toEqual({ event: 'start', data: { pid } });
    const holder = holderOf(pid);
    await waitFor(() => socketCount(holder) === HOLDER_SOCKETS + 1, 5_000, 'the holder to be lent the socket');

    await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'one "1"\n' });
    expect(await next(stream)).toEqual({ event: 'stdout', data: { stream: 'stdout', data: 'one "1"\n' } });

    // An attacher: the holder gives the socket back; the attacher replays "one", then both follow live.
    const attacher = readEvents(await fixture.server.call('GET', `/commands/${pid}/stream`));
    expect(await next(attacher)).toEqual({ event: 'start', data: { pid } });
    expect(await next(attacher)).toEqual({ event: 'stdout', data: { stream: 'stdout', data: 'one "1"\n' } });
    await waitFor(() => socketCount(holder) === HOLDER_SOCKETS, 5_000, 'the socket to be given back');

    await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'two\n' });
    const two = { event: 'stdout', data: { stream: 'stdout', data: 'two\n' } };
    expect(await next(stream)).toEqual(two);
    expect(await next(attacher)).toEqual(two);

    // The attacher leaves: the stream's client is alone again and is lent its socket once more.
    void attacher.return(undefined);
    await waitFor(() => socketCount(holder) === HOLDER_SOCKETS + 1, 5_000, 'the socket to be lent again');
    await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'thr\u00e9e' });
    await fixture.server.json('DELETE', `/commands/${pid}/stdin`);
    expect(await drain(stream)).toEqual([
      { event: 'stdout', data: { stream: 'stdout', data: 'thr\u00e9e' } },
      { event: 'stderr', data: { stream: 'stderr', data: 'done\n' } },
      { event: 'exit', data: { exit_code: 0, reason: 'exited' } },
    ]);
  });

  it('ends the stream, instead of leaving it hanging, when the holder dies while it writes to the socket', async () => {
    const abort = new AbortController();
    const stream = readEvents(await fixture.server.call('POST', '/commands/stream', { cmd: 'yes envd-direct-output' }, { signal: abort.signal }));
    const { pid } = (await next(stream)).data as { pid: number };
    const holder = holderOf(pid);
    await waitFor(() => socketCount(holder) === HOLDER_SOCKETS + 1, 5_000, 'the holder to be lent the socket');
    process.kill(holder, 'SIGKILL');
    const timer = setTimeout(() => abort.abort(), 10_000);
    const ended = await drain(stream);
    clearTimeout(timer);
    expect(abort.signal.aborted).toBe(false);
    // Cut inside an event (an error), or between two. Between two, envd takes the socket back and may end
    // the stream as for any holder that died without an EXIT: exit code 1, the documented "unknown"
    // (it did so in about 1 run of 5 before too). Never anything else, and never a hang.
    if (!(ended instanceof Error)) {
      const exits = ended.filter((e) => e.event === 'exit');
      expect(exits.length).toBeLessThanOrEqual(1);
      if (exits.length === 1) expect(exits[0]!.data).toEqual({ exit_code: 1, reason: 'exited' });
    }
    process.kill(-pid, 'SIGKILL');
  });

  it('never lends a socket with --direct-output off, and the output is the same', async () => {
    const server = await startServer({ defaultUser: fixture.user.name, directOutput: false });
    try {
      const { body: started } = await server.json('POST', '/commands', { cmd: 'read x; printf "%s" "$x"', background: true, stdin: true });
      const pid = started.pid as number;
      const stream = readEvents(await server.call('GET', `/commands/${pid}/stream`));
      expect(await next(stream)).toEqual({ event: 'start', data: { pid } });
      const holder = holderOf(pid);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(socketCount(holder)).toBe(HOLDER_SOCKETS);
      await server.json('POST', `/commands/${pid}/stdin`, { data: 'a\u00e9\n' });
      expect(await drain(stream)).toEqual([
        { event: 'stdout', data: { stream: 'stdout', data: 'a\u00e9' } },
        { event: 'exit', data: { exit_code: 0, reason: 'exited' } },
      ]);
    } finally {
      await server.close();
    }
  });

  // Issue 30: a read of 61,440 bytes that each escape to six characters lost its last byte, on the stream and in the log.
  it('loses no byte of a read whose every byte escapes to \\u00xx, on the lent socket and in the kept log', async () => {
    const total = 3_000_000;
    const stream = readEvents(await fixture.server.call('POST', '/commands/stream', { cmd: `head -c ${total} /dev/zero` }));
    let streamed = 0;
    for await (const event of stream) {
      if (event.event === 'stdout') {
        expect(event.data.data).toMatch(/^\0*$/);
        streamed += event.data.data.length;
      }
    }
    expect(streamed).toBe(total);

    const { body: started } = await fixture.server.json('POST', '/commands', { cmd: `read x; head -c ${total} /dev/zero`, background: true, stdin: true });
    const pid = started.pid as number;
    const attach = readEvents(await fixture.server.call('GET', `/commands/${pid}/stream`));
    expect(await next(attach)).toEqual({ event: 'start', data: { pid } });
    await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: '\n' });
    let attached = 0;
    for await (const event of attach) if (event.event === 'stdout') attached += event.data.data.length;
    expect(attached).toBe(total);
    const { body: result } = await fixture.server.json('GET', `/commands/${pid}/wait`);
    expect(result.stdout.length).toBe(total);
    expect(result.stdout).toMatch(/^\0*$/);
  });
});
