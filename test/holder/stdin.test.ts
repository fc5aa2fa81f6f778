import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { encodeLiveOn, encodeResize, encodeStdin, encodeStdinEof, MAX_MESSAGE_PAYLOAD, type HolderMessage } from '../../src/holder/protocol.js';
import { waitFor } from '../helpers/proc.js';
import { parseLog, readLog, readStatus, startHolder, useHolders, type HolderClient, type RunningHolder } from '../helpers/holder.js';

useHolders();

const finished = async (holder: RunningHolder) => {
  expect(await holder.exited).toBe(0);
  return { status: readStatus(holder.dir)!, log: parseLog(readLog(holder.dir)) };
};

/** Reads messages until the ACK of `id`, returning it and the DATA bytes seen meanwhile. */
async function ackOf(client: HolderClient, id: number, data: Buffer[] = []): Promise<Extract<HolderMessage, { type: 'ack' }>> {
  for (;;) {
    const message = await client.next();
    if (message.type === 'data') data.push(message.bytes);
    else if (message.type === 'ack' && message.id === id) return message;
    else if (message.type === 'ack') throw new Error(`ACK ${message.id} before ACK ${id}`);
  }
}

describe('envd-holder stdin', () => {
  it('writes STDIN to the command, ACKs once written, and closes it on STDIN_EOF', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'cat; sleep 0.3'], stdin: true });
    const client = await holder.connect();
    expect((await client.next()).type).toBe('hello');
    client.send(encodeLiveOn());
    expect((await client.next()).type).toBe('sync');

    // 1 MiB through cat: far more than the pipe holds, so writes wait on POLLOUT while cat's output flows back.
    const input = randomBytes(1 << 20);
    const data: Buffer[] = [];
    let id = 1;
    for (let offset = 0; offset < input.length; offset += MAX_MESSAGE_PAYLOAD - 4) client.send(encodeStdin(id++, input.subarray(offset, offset + MAX_MESSAGE_PAYLOAD - 4)));
    for (let ack = 1; ack < id; ack++) expect(await ackOf(client, ack, data)).toEqual({ type: 'ack', id: ack, status: 0 });
    while (Buffer.concat(data).length < input.length) {
      const message = await client.next();
      if (message.type === 'data') data.push(message.bytes);
    }
    expect(Buffer.concat(data).equals(input)).toBe(true);

    client.send(encodeStdinEof(100));
    client.send(encodeStdin(101, Buffer.from('too late')));
    client.send(encodeStdinEof(102));
    expect(await ackOf(client, 100)).toEqual({ type: 'ack', id: 100, status: 0 });
    expect(await ackOf(client, 101)).toEqual({ type: 'ack', id: 101, status: 2 }); // stdin closed
    expect(await ackOf(client, 102)).toEqual({ type: 'ack', id: 102, status: 0 }); // closing twice is fine
    expect((await client.until('exit')).at(-1)).toMatchObject({ type: 'exit', exitCode: 0 });
    const { log } = await finished(holder);
    expect(log.stdout.equals(input)).toBe(true);
  });

  it('ACKs 1 (no stdin) without --stdin, and 3 (not a pty) for RESIZE without a pty', async () => {
    const holder = await startHolder({ command: ['sleep', '30'] });
    const client = await holder.connect();
    expect((await client.next()).type).toBe('hello');
    client.send(encodeStdin(1, Buffer.from('x')));
    client.send(encodeStdinEof(2));
    client.send(encodeResize(3, 80, 24));
    expect([await client.next(), await client.next(), await client.next()]).toEqual([
      { type: 'ack', id: 1, status: 1 },
      { type: 'ack', id: 2, status: 1 },
      { type: 'ack', id: 3, status: 3 },
    ]);
    process.kill(holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('ACKs 2 (stdin closed) when the command closed its end of the pipe (EPIPE)', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'exec 0<&-; echo closed; sleep 30'], stdin: true });
    const client = await holder.connect();
    expect((await client.next()).type).toBe('hello');
    await waitFor(() => parseLog(readLog(holder.dir)).stdout.toString() === 'closed\n', 5_000, 'the shell to close its stdin');
    client.send(encodeStdin(7, Buffer.from('anyone?\n')));
    expect(await client.next()).toEqual({ type: 'ack', id: 7, status: 2 });
    client.send(encodeStdin(8, Buffer.from('still?\n')));
    expect(await client.next()).toEqual({ type: 'ack', id: 8, status: 2 });
    expect(holder.child.exitCode).toBeNull(); // EPIPE with SIGPIPE ignored: the holder lives
    process.kill(-holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('holds further messages while the command does not read, without holding its output', async () => {
    // The command prints while it ignores stdin for a while, then reads it all.
    const holder = await startHolder({ command: ['sh', '-c', 'for i in 1 2 3; do echo busy$i; sleep 0.1; done; cat >/dev/null; echo done'], stdin: true });
    const client = await holder.connect();
    expect((await client.next()).type).toBe('hello');
    client.send(encodeLiveOn());
    const chunk = Buffer.alloc(MAX_MESSAGE_PAYLOAD - 4, 0x61);
    for (let id = 1; id <= 4; id++) client.send(encodeStdin(id, chunk)); // 256 KiB: more than the pipe holds
    client.send(encodeStdinEof(5));
    const messages = await client.until('exit');
    const order = messages.map((m) => (m.type === 'ack' ? `ack${m.id}` : m.type === 'data' ? m.bytes.toString() : m.type));
    const position = (text: string) => order.findIndex((item) => item.includes(text));
    expect(order.filter((item) => item.startsWith('ack'))).toEqual(['ack1', 'ack2', 'ack3', 'ack4', 'ack5']);
    // The output went on while the stdin chunks the pipe could not take waited.
    expect(position('busy1')).toBeLessThan(position('busy3'));
    expect(position('busy3')).toBeLessThan(position('ack4'));
    expect(position('done')).toBeGreaterThan(position('ack5'));
    await finished(holder);
  });
});
