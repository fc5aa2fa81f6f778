import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { encodeLiveOff, encodeLiveOn, encodeStdin, type HolderMessage } from '../../src/holder/protocol.js';
import {
  connectHolder,
  holderMemory,
  isAlive,
  parseLog,
  processState,
  readLog,
  readStatus,
  startHolder,
  useHolders,
  type HolderClient,
  type RunningHolder,
} from '../helpers/holder.js';
import { findProcesses, waitFor } from '../helpers/proc.js';

useHolders();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const finished = async (holder: RunningHolder) => {
  expect(await holder.exited).toBe(0);
  return { status: readStatus(holder.dir)!, log: parseLog(readLog(holder.dir)) };
};

const hello = async (client: HolderClient) => {
  const message = await client.next();
  if (message.type !== 'hello') throw new Error(`expected HELLO, got ${message.type}`);
  return message;
};

/** The log size once it stopped changing for `quietMs`. */
async function settledLogSize(holder: RunningHolder, quietMs = 300): Promise<number> {
  let size = readLog(holder.dir).length;
  for (;;) {
    await sleep(quietMs);
    const now = readLog(holder.dir).length;
    if (now === size) return size;
    size = now;
  }
}

describe('envd-holder live channel', () => {
  it('answers LIVE_ON with SYNC at the log end, then sends every chunk as DATA with increasing logEnd', async () => {
    const holder = await startHolder({
      command: ['sh', '-c', 'echo before; read x; for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done; echo err >&2'],
      stdin: true,
    });
    await waitFor(() => readLog(holder.dir).length === 12, 5_000, '"before" to be kept');
    const client = await holder.connect();
    expect(await hello(client)).toEqual({
      type: 'hello',
      version: 4,
      shellPid: holder.shellPid,
      reaped: false,
      exitCode: -1,
      signal: 0,
      truncated: { stdout: false, stderr: false },
      logEnd: 12,
    });
    client.send(encodeLiveOn());
    // Where live output starts in each stream: after the 7 bytes of "before\n".
    expect(await client.next()).toEqual({ type: 'sync', logEnd: 12, offsets: { stdout: 7, stderr: 0 } });
    client.send(encodeStdin(1, Buffer.from('\n')));
    const messages = await client.until('exit');
    const data = messages.filter((m): m is Extract<HolderMessage, { type: 'data' }> => m.type === 'data');
    // Each DATA continues the log right after the previous position: logEnd grows by its frame.
    let end = 12;
    const written = { stdout: 7, stderr: 0 };
    for (const message of data) {
      expect(message.logEnd).toBe(end + 5 + message.bytes.length);
      end = message.logEnd;
      // ... and its stream's offset by its bytes.
      written[message.stream] += message.bytes.length;
      expect(message.offset).toBe(written[message.stream]);
    }
    // (Chunks are whatever each read got: compare per stream.)
    const text = (stream: string) => Buffer.concat(data.filter((m) => m.stream === stream).map((m) => m.bytes)).toString();
    expect(text('stdout')).toBe('line1\nline2\nline3\nline4\nline5\n');
    expect(text('stderr')).toBe('err\n');
    expect(messages.filter((m) => m.type === 'ack')).toEqual([{ type: 'ack', id: 1, status: 0 }]);
    // REAPED may come before the last DATA (output still in the pipes is read after the reap); EXIT is last.
    expect(messages.filter((m) => m.type === 'reaped')).toEqual([{ type: 'reaped', exitCode: 0, signal: 0 }]);
    expect(messages.at(-1)).toEqual({ type: 'exit', exitCode: 0, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: end });
    await client.closed;
    const { log, status } = await finished(holder);
    expect(status.logEnd).toBe(end);
    expect(log.stdout.toString()).toBe('before\nline1\nline2\nline3\nline4\nline5\n');
  });

  it('sends no DATA after LIVE_OFF', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x; echo one; read x; echo two; read x'], stdin: true });
    const client = await holder.connect();
    await hello(client);
    client.send(encodeLiveOn());
    await client.next(); // SYNC
    client.send(encodeStdin(1, Buffer.from('\n')));
    expect((await client.until('data')).at(-1)).toMatchObject({ type: 'data', bytes: Buffer.from('one\n') });
    client.send(encodeLiveOff());
    client.send(encodeStdin(2, Buffer.from('\n')));
    await waitFor(() => parseLog(readLog(holder.dir)).stdout.toString() === 'one\ntwo\n', 5_000, '"two" to be kept');
    client.send(encodeStdin(3, Buffer.from('\n')));
    const rest = await client.until('exit');
    expect(rest.filter((m) => m.type === 'data')).toEqual([]);
    // ACK 1 came before "one" (the pipe took the line at once); the rest are ACKs and the end.
    expect(rest.map((m) => m.type)).toEqual(['ack', 'ack', 'reaped', 'exit']);
  });

  it('sends no TEXT after LIVE_OFF either, however much the command prints while the client reads nothing', async () => {
    // LIVE_OFF once left TEXT on: the holder went on queueing output it no longer held back for, overflowed its ring and closed the client.
    const holder = await startHolder({ command: ['sh', '-c', 'read x; head -c 8000000 /dev/zero | tr "\\0" z; read x'], stdin: true, cap: 1 << 30, memoryBudget: 1 << 30 });
    const client = await holder.connect();
    await hello(client);
    client.socket.pause();
    client.send(encodeLiveOn(true));
    client.send(encodeLiveOff());
    client.send(encodeStdin(1, Buffer.from('\n')));
    await waitFor(() => parseLog(readLog(holder.dir)).stdout.length === 8_000_000, 10_000, 'all 8 MB to be kept');
    client.socket.resume();
    client.send(encodeStdin(2, Buffer.from('\n')));
    const messages = await client.until('exit');
    expect(messages.filter((m) => m.type === 'text' || m.type === 'data')).toEqual([]);
    expect(messages.at(-1)).toMatchObject({ type: 'exit', exitCode: 0 });
    await finished(holder);
  });

  it('blocks the command while a LIVE client does not read, with bounded memory, and resumes it when the client reads again', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x; exec yes'], stdin: true, cap: 1 << 30, memoryBudget: 1 << 30 });
    const client = await holder.connect();
    await hello(client);
    client.socket.pause();
    client.send(encodeLiveOn());
    client.send(encodeStdin(1, Buffer.from('\n')));
    const stalled = await settledLogSize(holder);
    // The holder's 256 KiB of unsent output, the socket's buffers, and nothing more.
    expect(stalled).toBeGreaterThan(256 * 1024);
    expect(stalled).toBeLessThan(4 << 20);
    expect(processState(holder.shellPid)).toBe('S'); // yes sleeps in write(2) on its full pipe
    const memory = holderMemory(holder.holderPid);
    console.log(`envd-holder with a stalled LIVE client under yes: VmRSS ${memory.rssKiB} KiB (RssAnon ${memory.anonKiB} KiB), kept log stopped at ${stalled} bytes`);
    expect(memory.anonKiB).toBeLessThan(1024);
    await sleep(300);
    expect(readLog(holder.dir).length).toBe(stalled);

    client.socket.resume();
    await waitFor(() => readLog(holder.dir).length > stalled + (8 << 20), 10_000, 'the log to grow again');
    const reading = holderMemory(holder.holderPid);
    console.log(`envd-holder with a reading LIVE client under yes: VmRSS ${reading.rssKiB} KiB (RssAnon ${reading.anonKiB} KiB)`);
    process.kill(-holder.shellPid, 'SIGKILL');
    const exit = (await client.until('exit', 10_000)).at(-1);
    expect(exit).toMatchObject({ type: 'exit', exitCode: -1, signal: 9 });
    await finished(holder);
  });

  it('bounds a stalled TEXT client the same way, even when every byte escapes to six', async () => {
    // \x01 becomes \u0001: the worst case for the ring, which TEXT reads are cut to fit.
    const holder = await startHolder({ command: ['sh', '-c', 'read x; exec tr "\\000" "\\001" < /dev/zero'], stdin: true, cap: 1 << 30, memoryBudget: 1 << 30 });
    const client = await holder.connect();
    await hello(client);
    client.socket.pause();
    client.send(encodeLiveOn(true));
    client.send(encodeStdin(1, Buffer.from('\n')));
    const stalled = await settledLogSize(holder);
    expect(stalled).toBeLessThan(4 << 20);
    const memory = holderMemory(holder.holderPid);
    console.log(`envd-holder with a stalled TEXT client under control characters: VmRSS ${memory.rssKiB} KiB (RssAnon ${memory.anonKiB} KiB), kept log stopped at ${stalled} bytes`);
    expect(memory.anonKiB).toBeLessThan(1024);
    client.socket.resume();
    const text = (await client.until('text')).filter((m) => m.type === 'text');
    expect(text[0]).toMatchObject({ type: 'text', stream: 'stdout' });
    expect((text[0] as { json: Buffer }).json.subarray(0, 12).toString()).toBe('\\u0001\\u0001');
    process.kill(-holder.shellPid, 'SIGKILL');
    expect((await client.until('exit', 10_000)).at(-1)).toMatchObject({ type: 'exit', signal: 9 });
    await finished(holder);
  });

  it('neither kills nor blocks the command when the client disconnects mid-output (no SIGPIPE)', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'while true; do echo tick; sleep 0.05; done'] });
    const client = await holder.connect();
    await hello(client);
    client.send(encodeLiveOn());
    await client.until('data');
    client.close();
    const atClose = readLog(holder.dir).length;
    // Ten more ticks land in the log with nobody connected.
    await waitFor(() => readLog(holder.dir).length >= atClose + 10 * 10, 5_000, 'more ticks in the log');
    expect(isAlive(holder.shellPid)).toBe(true);
    expect(isAlive(holder.holderPid)).toBe(true);
    expect(readStatus(holder.dir)).toBeUndefined();
    const again = await holder.connect();
    expect(await hello(again)).toMatchObject({ reaped: false, exitCode: -1, signal: 0 });
    process.kill(-holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('greets a reconnecting client with the state so far, and a stalled client keeps the holder waiting past the grace', async () => {
    // The shell exits at once; its background pipeline goes on printing 3 MB into the inherited stdout.
    const holder = await startHolder({ command: ['sh', '-c', "read x; head -c 3000000 /dev/zero | tr '\\0' r & exit 4"], stdin: true });
    const first = await holder.connect();
    await hello(first);
    first.socket.pause();
    first.send(encodeLiveOn());
    first.send(encodeStdin(1, Buffer.from('\n')));
    await waitFor(() => processState(holder.shellPid) === undefined, 5_000, 'the shell to be reaped');
    const stalled = await settledLogSize(holder); // well past the 200 ms grace: the grace does not run while stalled
    expect(stalled).toBeLessThan(3_000_000);

    const second = await holder.connect();
    expect(await hello(second)).toEqual({
      type: 'hello',
      version: 4,
      shellPid: holder.shellPid,
      reaped: true,
      exitCode: 4,
      signal: 0,
      truncated: { stdout: false, stderr: false },
      logEnd: stalled,
    });
    second.send(encodeLiveOn());
    // The first client's going lifted the back-pressure: the rest may be read, and the holder done, before LIVE_ON.
    const messages = await second.until('exit', 10_000);
    for (const sync of messages.filter((m) => m.type === 'sync')) expect(sync.logEnd).toBeGreaterThanOrEqual(stalled);
    expect(messages.at(-1)).toMatchObject({ type: 'exit', exitCode: 4, signal: 0, truncated: { stdout: false, stderr: false } });
    expect(messages.filter((m) => m.type === 'reaped')).toEqual([]); // it was reaped before this client came
    const { log } = await finished(holder);
    // Past the stall the holder read on: at least the pipe's buffered bytes. All 3 MB only if the pipeline never
    // paused for the 200 ms grace after the reap, which a starved machine does not promise (it flaked under load).
    expect(log.stdout.length).toBeGreaterThan(stalled);
    expect(log.stdout.every((byte) => byte === 0x72)).toBe(true);
  });

  it('replaces the connected client with a new one', async () => {
    const holder = await startHolder({ command: ['sleep', '30'] });
    const first = await holder.connect();
    await hello(first);
    const second = await holder.connect();
    await hello(second);
    await first.closed;
    expect(second.socket.destroyed).toBe(false);
    process.kill(holder.shellPid, 'SIGKILL');
    expect((await second.until('exit')).at(-1)).toMatchObject({ type: 'exit', exitCode: -1, signal: 9 });
    await finished(holder);
  });

  it('sends REAPED then EXIT with the exit code', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x; exit 3'], stdin: true });
    const client = await holder.connect();
    expect(await hello(client)).toMatchObject({ reaped: false, exitCode: -1, signal: 0 });
    client.send(encodeStdin(9, Buffer.from('\n')));
    expect(await client.until('exit')).toEqual([
      { type: 'ack', id: 9, status: 0 },
      { type: 'reaped', exitCode: 3, signal: 0 },
      { type: 'exit', exitCode: 3, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: 0 },
    ]);
    await client.closed;
    const { status } = await finished(holder);
    expect(status).toEqual({ exitCode: 3, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: 0 });
    expect(existsSync(join(holder.dir, 'sock'))).toBe(false);
  });

  it('reports a shell killed by SIGKILL as exit code -1, signal 9', async () => {
    const holder = await startHolder({ command: ['sleep', '100'] });
    const client = await holder.connect();
    await hello(client);
    process.kill(holder.shellPid, 'SIGKILL');
    expect(await client.until('exit')).toEqual([
      { type: 'reaped', exitCode: -1, signal: 9 },
      { type: 'exit', exitCode: -1, signal: 9, truncated: { stdout: false, stderr: false }, logEnd: 0 },
    ]);
    expect((await finished(holder)).status).toMatchObject({ exitCode: -1, signal: 9 });
  });

  it('ends 200 ms after the shell when a daemon keeps the pipes, and leaves the daemon running', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x; sleep 31.25 & echo started; exit 0'], stdin: true });
    const client = await holder.connect();
    await hello(client);
    client.send(encodeLiveOn());
    client.send(encodeStdin(1, Buffer.from('\n')));
    const sent = performance.now();
    const messages = await client.until('reaped');
    const reapedAt = performance.now();
    const exit = (await client.until('exit')).at(-1);
    const exitAt = performance.now();
    console.log(`envd-holder daemon grace: EXIT ${(exitAt - reapedAt).toFixed(0)} ms after REAPED (${(exitAt - sent).toFixed(0)} ms after the stdin line)`);
    expect(Buffer.concat(messages.flatMap((m) => (m.type === 'data' ? [m.bytes] : []))).toString()).toBe('started\n');
    expect(exit).toMatchObject({ type: 'exit', exitCode: 0, signal: 0 });
    // The sleep keeps running; the test's cleanup kills the shell's group, where it still is.
    const sleeps = findProcesses('sleep 31.25').filter((pid) => readFileSync(`/proc/${pid}/comm`, 'utf8') === 'sleep\n');
    expect(sleeps).toHaveLength(1);
    await finished(holder);
  });

  it('closes a client that sends a bad type, an oversized payload or a malformed message, and goes on', async () => {
    const holder = await startHolder({ command: ['sleep', '30'] });
    const bad = [
      Buffer.from([0x7f, 0, 0, 0, 0]),
      Buffer.from([0x03, 0x01, 0x00, 0x01, 0x00]), // STDIN of 65537 bytes
      Buffer.from([0x01, 1, 0, 0, 0, 0x02]), // LIVE_ON with an unknown flag
      Buffer.from([0x01, 2, 0, 0, 0, 1, 0]), // LIVE_ON with a payload longer than its flags
      Buffer.from([0x05, 4, 0, 0, 0, 1, 0, 0, 0]), // RESIZE without its size
    ];
    for (const message of bad) {
      const client = await holder.connect();
      await hello(client);
      client.send(message);
      await client.closed;
    }
    const client = await connectHolder(join(holder.dir, 'sock'));
    expect(await hello(client)).toMatchObject({ reaped: false, exitCode: -1 });
    expect(isAlive(holder.shellPid)).toBe(true);
    process.kill(holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('with --hold-output reads nothing until a client says LIVE_ON, so a late stream client gets every byte past the cap', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'head -c 300000 /dev/zero | tr "\\0" b; exit 2'], cap: 1000, holdOutputMs: 60_000 });
    // Well after the command would have printed everything: it is blocked on its pipe, nothing is kept yet.
    await sleep(400);
    expect(readLog(holder.dir).length).toBe(0);
    expect(isAlive(holder.shellPid)).toBe(true);
    const client = await holder.connect();
    await hello(client);
    client.send(encodeLiveOn());
    const messages = await client.until('exit');
    const live = Buffer.concat(messages.flatMap((m) => (m.type === 'data' ? [m.bytes] : []))).toString();
    expect(live).toBe('b'.repeat(300_000));
    const { status, log } = await finished(holder);
    expect(status).toMatchObject({ exitCode: 2, truncated: { stdout: true, stderr: false } });
    expect(log.stdout.toString()).toBe('b'.repeat(1000));
  });

  it('with --hold-output reads on by itself once the hold runs out without a LIVE_ON', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'head -c 200000 /dev/zero | tr "\\0" c'], holdOutputMs: 300 });
    const { status, log } = await finished(holder);
    expect(status.exitCode).toBe(0);
    expect(log.stdout.toString()).toBe('c'.repeat(200_000));
  });
});
