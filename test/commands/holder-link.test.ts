import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { HolderLink } from '../../src/commands/holder-link.js';
import { readStatus, startHolder, useHolders } from '../helpers/holder.js';
import { waitFor } from '../helpers/proc.js';
import { seededRandom as random } from '../helpers/random.js';

// envd's end of a holder's live channel reads into one buffer of its own and
// completes a message split between reads in place. A fake holder here sends
// messages of every size, cut into writes at seeded random places, while the
// test holds and releases the link at random: every message must arrive
// whole, in order, once.

let dir: string | undefined;
let server: Server | undefined;
afterEach(() => {
  server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
  server = undefined;
});

function message(type: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = type;
  head.writeUInt32LE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

function hello(): Buffer {
  const p = Buffer.alloc(25);
  p.writeUInt16LE(2, 0);
  p.writeUInt32LE(4242, 2);
  return message(0x80, p);
}

/** TEXT (0x86) or DATA (0x82) with stream, logEnd = its index, and `size` bytes. */
function output(index: number, size: number, next: () => number): Buffer {
  const p = Buffer.alloc(9 + size);
  p[0] = 1;
  p.writeBigUInt64LE(BigInt(index), 1);
  for (let i = 9; i < p.length; i++) p[i] = Math.floor(next() * 256);
  return message(index % 2 ? 0x86 : 0x82, p);
}

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

async function writeCut(socket: Socket, bytes: Buffer, next: () => number): Promise<void> {
  for (let at = 0; at < bytes.length; ) {
    const size = 1 + Math.floor(next() * 90_000);
    const ok = socket.write(bytes.subarray(at, at + size));
    at += size;
    if (!ok) await new Promise((resolve) => socket.once('drain', resolve));
    if (next() < 0.3) await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('HolderLink reads', () => {
  it('delivers 300 messages of 0 to 64 KiB, cut anywhere, whole and in order while held and released at random', async () => {
    const next = random(7);
    const sizes = Array.from({ length: 300 }, (_, i) => (i % 50 === 0 ? 65536 : Math.floor(next() ** 3 * 65537)));
    const messages = sizes.map((size, i) => output(i, size, next));
    const expected = messages.map((m) => sha(m.subarray(5 + 9)));
    dir = mkdtempSync(join(tmpdir(), 'envd-link-'));
    const path = join(dir, 'sock');
    // Like a holder: HELLO at once, output only once LIVE_ON has come.
    server = createServer((socket) => {
      socket.write(hello());
      socket.once('data', () => void writeCut(socket, Buffer.concat(messages), random(11)));
    });
    await new Promise<void>((resolve) => server!.listen(path, resolve));

    const { link } = await HolderLink.connect(path);
    const got: string[] = [];
    const done = new Promise<void>((resolve) => {
      link.listen(
        (m) => {
          if (m.type === 'data') got.push(sha(m.bytes));
          else if (m.type === 'text') got.push(sha(m.json));
          if (got.length === messages.length) resolve();
          // A subscriber falling behind: hold for a moment, sometimes.
          if (next() < 0.2) {
            link.hold();
            setTimeout(() => link.release(), Math.floor(next() * 3));
          }
        },
        () => {},
      );
    });
    link.liveOn();
    await done;
    link.close();
    expect(got).toEqual(expected);
  });
});

describe('HolderLink before its owner listens', () => {
  // Issue 36: a fast command's holder sends REAPED and EXIT right behind its HELLO, often in one read. They were
  // delivered before envd's TrackedProcess took the link, and lost: the command was seen to end only when a
  // reconnect found its holder gone, 100 ms later.
  it('keeps what came in the same read as the HELLO, and the close behind it, until listen()', async () => {
    dir = mkdtempSync(join(tmpdir(), 'envd-link-'));
    const path = join(dir, 'sock');
    const reaped = Buffer.alloc(8);
    const exit = Buffer.alloc(18);
    exit.writeInt32LE(7, 0);
    exit.writeBigUInt64LE(42n, 10);
    server = createServer((socket) => socket.end(Buffer.concat([hello(), message(0x84, reaped), message(0x85, exit)])));
    await new Promise<void>((resolve) => server!.listen(path, resolve));

    const { link } = await HolderLink.connect(path);
    // As the registry does: the owner takes the link a few turns of the event loop later (the FIN is in by then).
    await new Promise((resolve) => setTimeout(resolve, 50));
    const got: string[] = [];
    const closed = new Promise<void>((resolve) => link.listen((m) => got.push(m.type === 'exit' ? `exit ${m.exitCode} ${m.logEnd}` : m.type), resolve));
    await closed;
    expect(got).toEqual(['reaped', 'exit 7 42']);
  });
});

describe('HolderLink with a real holder', () => {
  useHolders();

  // Issue 30: a holder that exited while envd held its link (a subscriber catching up) made envd's next write fail
  // with EPIPE, and Node dropped the socket with the TEXT and EXIT messages envd had not read yet.
  it('delivers every message a finished holder sent, even when envd writes to it while the link is held', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'read x; head -c 100000 /dev/zero | tr "\\0" a; exit 3'], stdin: true });
    const { link } = await HolderLink.connect(join(holder.dir, 'sock'));
    const got: string[] = [];
    let exit: unknown;
    let synced = false;
    const closed = new Promise<void>((resolve) =>
      link.listen((m) => {
        if (m.type === 'sync') synced = true;
        if (m.type === 'text') got.push(m.json.toString());
        if (m.type === 'exit') exit = m;
      }, resolve),
    );
    link.liveOn();
    await waitFor(() => synced, 5_000, 'SYNC');
    // Held from here, as while a subscriber catches up from the kept log; then the command prints and ends.
    link.hold();
    expect(await link.stdin(Buffer.from('\n'))).toBe(0);
    // The command has printed everything and its holder finished: its status is written.
    await waitFor(() => readStatus(holder.dir) !== undefined, 10_000, 'the holder to finish');
    await new Promise((r) => setTimeout(r, 100));
    // A write while held (a stdin request, a lent socket asked for): the holder must still be there to take it.
    void link.stdin(Buffer.from('late\n'));
    await new Promise((r) => setTimeout(r, 200));
    link.release();
    await closed;
    expect(got.join('')).toBe('a'.repeat(100_000));
    expect(exit).toMatchObject({ type: 'exit', exitCode: 3 });
    expect(await holder.exited).toBe(0);
  });
});
