// The holder's direct output (src/holder/direct.h): lent a socket of this
// process (the test plays envd), it writes the live output there as the HTTP
// chunks of an event stream, and gives the socket back with DIRECT_ENDED.
import { fstatSync, readdirSync, readlinkSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { encodeDirectGo, encodeDirectOff, encodeDirectOn, encodeDirectPing, encodeLiveOn, encodeStdin, type HolderMessage } from '../../src/holder/protocol.js';
import { afterThisTest, parseLog, readLog, startHolder, useHolders, type HolderClient } from '../helpers/holder.js';
import { waitFor } from '../helpers/proc.js';

useHolders();

/** A connected TCP pair in this process: `lent` is what the holder gets (by fd), `reader` the client's end. */
async function socketPair(): Promise<{ lent: Socket; fd: number; inode: number; reader: Socket; received: () => Buffer }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<Socket>((resolve) => server.once('connection', resolve));
  const reader = connect((server.address() as { port: number }).port, '127.0.0.1');
  const lent = await accepted;
  server.close();
  // Nothing of this process reads or writes the lent end: only its fd is used.
  lent.pause();
  const chunks: Buffer[] = [];
  reader.on('data', (chunk: Buffer) => chunks.push(chunk));
  afterThisTest(() => {
    reader.destroy();
    lent.destroy();
  });
  const fd = (lent as unknown as { _handle: { fd: number } })._handle.fd;
  return { lent, fd, inode: fstatSync(fd).ino, reader, received: () => Buffer.concat(chunks) };
}

/** Splits a chunked body into its chunks' payloads; throws on anything that is not whole chunks. */
function dechunk(body: Buffer): string[] {
  const chunks: string[] = [];
  let at = 0;
  while (at < body.length) {
    const line = body.indexOf('\r\n', at);
    if (line < 0) throw new Error(`a chunk size line is cut at ${at}`);
    const size = Number.parseInt(body.subarray(at, line).toString(), 16);
    if (!/^[0-9a-f]+$/.test(body.subarray(at, line).toString()) || size === 0) throw new Error(`bad chunk size at ${at}`);
    const start = line + 2;
    if (body.subarray(start + size, start + size + 2).toString() !== '\r\n') throw new Error(`chunk at ${at} does not end with CRLF`);
    chunks.push(body.subarray(start, start + size).toString());
    at = start + size + 2;
  }
  return chunks;
}

/** An output event as envd frames it: with the id of the position after it, `<stdout bytes>-<stderr bytes>`. */
const event = (stream: 'stdout' | 'stderr', text: string, id: string) => `event: ${stream}\nid: ${id}\ndata: ${JSON.stringify({ stream, data: text })}\n\n`;

async function liveTextClient(connectToHolder: () => Promise<HolderClient>): Promise<HolderClient> {
  const client = await connectToHolder();
  expect((await client.next()).type).toBe('hello');
  client.send(encodeLiveOn(true));
  expect((await client.next()).type).toBe('sync');
  return client;
}

const socketCount = (pid: number) =>
  readdirSync(`/proc/${pid}/fd`).filter((fd) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:');
    } catch {
      return false; // closed between the listing and the readlink
    }
  }).length;

/** Lets `read x; echo after` go on, and checks that its output still came over the channel as TEXT. */
async function expectTextAfter(client: HolderClient): Promise<void> {
  client.send(encodeStdin(1, Buffer.from('\n')));
  const rest = await client.until('exit');
  expect(rest.filter((m) => m.type === 'text')).toMatchObject([{ type: 'text', stream: 'stdout', json: Buffer.from('after\\n') }]);
}

describe('envd-holder direct output', () => {
  it('writes events to a lent socket after READY and GO, exactly as envd frames them, and gives it back on DIRECT_OFF', async () => {
    const holder = await startHolder({
      command: ['sh', '-c', 'read x; printf \'one\\n"two"\\t\\n\'; sleep 0.1; printf \'\\303\\251rr\' >&2; read x; echo three'],
      stdin: true,
    });
    const client = await liveTextClient(() => holder.connect());
    const pair = await socketPair();
    client.send(encodeDirectOn(process.pid, pair.fd, pair.inode, true));
    expect(await client.next()).toEqual({ type: 'direct-ready' });
    client.send(encodeDirectGo());
    client.send(encodeStdin(1, Buffer.from('\n')));
    expect(await client.next()).toEqual({ type: 'ack', id: 1, status: 0 });
    const wanted = [event('stdout', 'one\n"two"\t\n', '11-0'), event('stderr', 'érr', '11-4')];
    await waitFor(() => pair.received().length >= Buffer.byteLength(wanted.join('')) + 2 * 6, 5_000, 'both events on the socket');
    expect(dechunk(pair.received())).toEqual(wanted);

    client.send(encodeDirectOff());
    const kept = parseLog(readLog(holder.dir));
    expect(await client.next()).toEqual({ type: 'direct-ended', logEnd: readLog(holder.dir).length, reason: 'off', offsets: { stdout: 11, stderr: 4 } });
    expect(kept.stdout.toString() + kept.stderr.toString()).toBe('one\n"two"\t\nérr');
    // The socket is envd's again: later output comes as TEXT, and nothing more reaches the socket.
    const before = pair.received().length;
    client.send(encodeStdin(2, Buffer.from('\n')));
    const rest = await client.until('exit');
    const text = rest.filter((m): m is Extract<HolderMessage, { type: 'text' }> => m.type === 'text');
    expect(Buffer.concat(text.map((m) => m.json)).toString()).toBe('three\\n');
    expect(pair.received().length).toBe(before);
    expect(await holder.exited).toBe(0);
  });

  it('answers with DIRECT_ENDED refused when it may not take envd\'s fds, and goes on with TEXT', async () => {
    // Another real uid and no CAP_SYS_PTRACE (still euid 0, for the state directory): ptrace access to this process is denied.
    const holder = await startHolder({ command: ['sh', '-c', 'read x; echo after'], stdin: true, launcher: ['setpriv', '--ruid=65534', '--bounding-set=-sys_ptrace', '--'] });
    const client = await liveTextClient(() => holder.connect());
    const pair = await socketPair();
    const sockets = socketCount(holder.holderPid);
    client.send(encodeDirectOn(process.pid, pair.fd, pair.inode, true));
    expect(await client.next()).toEqual({ type: 'direct-ended', logEnd: 0, reason: 'refused', offsets: { stdout: 0, stderr: 0 } });
    expect(socketCount(holder.holderPid)).toBe(sockets);
    await expectTextAfter(client);
  });

  it('takes nothing when the fd is closed or is another socket than envd named (the client left, the number was reused)', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x; echo after'], stdin: true });
    const client = await liveTextClient(() => holder.connect());
    const pair = await socketPair();
    const other = await socketPair();
    const sockets = socketCount(holder.holderPid);
    client.send(encodeDirectOn(process.pid, 100_000, pair.inode, true));
    expect(await client.next()).toEqual({ type: 'direct-ended', logEnd: 0, reason: 'failed', offsets: { stdout: 0, stderr: 0 } });
    client.send(encodeDirectOn(process.pid, other.fd, pair.inode, true));
    expect(await client.next()).toEqual({ type: 'direct-ended', logEnd: 0, reason: 'failed', offsets: { stdout: 0, stderr: 0 } });
    expect(socketCount(holder.holderPid)).toBe(sockets);
    await expectTextAfter(client);
    expect(other.received().length + pair.received().length).toBe(0);
  });

  it('holds output back while the socket does not take it, finishes the event under way, and ends it before EXIT', async () => {
    // 32 MB of text: far more than loopback's socket buffers (a few MB) hold while the client reads nothing.
    const total = 32_000_000;
    const holder = await startHolder({ command: ['sh', '-c', `read x; head -c ${total} /dev/zero | tr '\\0' 'a'`], stdin: true, cap: 1 << 30, memoryBudget: 1 << 30 });
    const client = await liveTextClient(() => holder.connect());
    const pair = await socketPair();
    pair.reader.pause();
    client.send(encodeDirectOn(process.pid, pair.fd, pair.inode, true));
    expect(await client.next()).toEqual({ type: 'direct-ready' });
    client.send(encodeDirectGo());
    client.send(encodeStdin(1, Buffer.from('\n')));
    await client.next(); // ACK
    // Stalled: the holder stops reading the command, which blocks with most of its output unprinted.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const keptWhileStalled = parseLog(readLog(holder.dir)).stdout.length;
    expect(keptWhileStalled).toBeLessThan(total / 2);
    pair.reader.resume();
    const messages = await client.until('exit', 20_000);
    expect(messages.map((m) => m.type)).toEqual(['reaped', 'direct-ended', 'exit']);
    expect(messages[1]).toEqual({ type: 'direct-ended', logEnd: readLog(holder.dir).length, reason: 'off', offsets: { stdout: total, stderr: 0 } });
    // All of it was written before DIRECT_ENDED; this process may not have read the last of it yet.
    const text = () => {
      try {
        return dechunk(pair.received()).map((e) => JSON.parse(/^event: stdout\nid: \d+-0\ndata: (.*)\n\n$/s.exec(e)![1]!).data as string).join('');
      } catch {
        return undefined; // the last chunk is still on its way
      }
    };
    await waitFor(() => text()?.length === total, 5_000, 'every event on the socket');
    expect(text()).toBe('a'.repeat(total));
  });

  it('writes a keep-alive comment on PING, and closes the lent socket when envd goes', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x'], stdin: true });
    const client = await liveTextClient(() => holder.connect());
    const pair = await socketPair();
    const sockets = socketCount(holder.holderPid);
    client.send(encodeDirectOn(process.pid, pair.fd, pair.inode, true));
    expect(await client.next()).toEqual({ type: 'direct-ready' });
    expect(socketCount(holder.holderPid)).toBe(sockets + 1);
    client.send(encodeDirectGo());
    client.send(encodeDirectPing());
    await waitFor(() => pair.received().length > 0, 5_000, 'the comment');
    expect(dechunk(pair.received())).toEqual([':\n\n']);
    client.close();
    await waitFor(() => socketCount(holder.holderPid) === sockets - 1, 5_000, 'the link and the lent socket to close');
  });
});
