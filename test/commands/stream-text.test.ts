import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectEvents, readEvents, type SseEvent } from '../helpers/sse.js';
import { useCommandServer } from '../helpers/command-user.js';
import { waitFor } from '../helpers/proc.js';
import { seededRandom as random } from '../helpers/random.js';

// Live output reaches a stream already decoded and escaped by the holder
// (TEXT messages); replayed output is decoded and escaped by envd. Both must
// give exactly what decoding the whole output at once gives, wherever the
// reads split it, and whichever of the two carries a character split between
// replay and live.

const fixture = useCommandServer();

const stdoutOf = (events: SseEvent[]) => events.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('');

/** Bytes a decoder and an escaper can get wrong: controls, quotes, every UTF-8 length, and broken sequences. */
const PIECES = [
  'plain text ', '"quoted"', '\\back\\slash', '\n', '\r\n', '\t', '\b\f', '\x00\x01\x1b[31m\x7f', 'é', '€', '😀', '\u2028\u2029', 'ﬀ',
].map((text) => Buffer.from(text, 'utf8')).concat(
  [[0x80], [0xc0, 0x80], [0xc1], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf0, 0x8f], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xe2, 0x41]].map((bytes) => Buffer.from(bytes)),
);

function mixedBytes(next: () => number, size: number): Buffer {
  const parts: Buffer[] = [];
  let length = 0;
  while (length < size) {
    const piece = PIECES[Math.floor(next() * PIECES.length)]!;
    parts.push(piece);
    length += piece.length;
  }
  return Buffer.concat(parts);
}

let dir: string;

/** Writes the chunks as files and returns a command that prints them one by one, `pauseS` apart. */
function printer(name: string, chunks: Buffer[], pauseS: number): string {
  const sub = join(dir, name);
  publicDir(sub);
  chunks.forEach((chunk, i) => writeFileSync(join(sub, String(i).padStart(4, '0')), chunk, { mode: 0o644 }));
  return `for f in ${sub}/*; do cat "$f"; sleep ${pauseS}; done`;
}

/** A directory the command user can read: the test's temp dir is made 0755 too. */
function publicDir(path: string): void {
  rmSync(path, { recursive: true, force: true });
  mkdirSync(path, { mode: 0o755 });
  chmodSync(path, 0o755);
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-text-'));
  chmodSync(dir, 0o755);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('output decoded and escaped by the holder (live) and by envd (replay)', () => {
  it('gives what decoding the whole output at once gives, for every split of 40 seeded writes and a 6x-escaping 200 KiB write', async () => {
    const next = random(20261122);
    const whole = Buffer.concat([mixedBytes(next, 96 * 1024), Buffer.alloc(200 * 1024, 0x01), mixedBytes(next, 32 * 1024)]);
    // 40 writes cut at random places: inside characters, inside broken sequences, anywhere.
    const cuts = Array.from({ length: 39 }, () => Math.floor(next() * whole.length)).sort((a, b) => a - b);
    const chunks = [0, ...cuts].map((start, i) => whole.subarray(start, i < cuts.length ? cuts[i] : whole.length));
    const cmd = printer('mixed', chunks, 0.01);
    const expected = whole.toString('utf8');

    // Read as bytes: the body must be valid UTF-8 (a fatal decoder throws otherwise), and every
    // event's data line byte for byte what JSON.stringify writes.
    const text = new TextDecoder('utf-8', { fatal: true }).decode(await (await fixture.server.call('POST', '/commands/stream', { cmd })).arrayBuffer());
    const live = text.split('\n\n').filter(Boolean).map((block) => {
      const lines = block.split('\n');
      const [eventLine, dataLine] = [lines[0]!, lines.at(-1)!];
      const data = JSON.parse(dataLine.slice('data: '.length));
      expect(dataLine).toBe(`data: ${JSON.stringify(data)}`);
      return { event: eventLine.slice('event: '.length), data };
    });
    expect(live.at(-1)).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
    expect(stdoutOf(live)).toBe(expected);

    // The same output replayed from the kept log, decoded by envd.
    const { pid } = (await (await fixture.server.call('POST', '/commands', { cmd, background: true })).json()) as { pid: number };
    await waitFor(() => fixture.server.app.envd.processes.get(pid)?.running === false, 30_000);
    const replayed = await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream`));
    expect(stdoutOf(replayed)).toBe(expected);
    await fixture.server.call('GET', `/commands/${pid}/wait`);
  });

  it('escapes every byte value at every place in an 8-byte word of plain text', async () => {
    // The holder scans plain text 8 bytes at a time: a byte to escape must be found wherever it sits.
    const parts: Buffer[] = [];
    for (let value = 0; value < 256; value++) {
      for (let at = 0; at < 9; at++) {
        const run = Buffer.alloc(17, 'a');
        run[at] = value;
        parts.push(run, Buffer.from('\n'));
      }
    }
    const whole = Buffer.concat(parts);
    const cmd = printer('every-byte', [whole], 0);
    const text = new TextDecoder('utf-8', { fatal: true }).decode(await (await fixture.server.call('POST', '/commands/stream', { cmd })).arrayBuffer());
    let stdout = '';
    for (const block of text.split('\n\n').filter(Boolean)) {
      const lines = block.split('\n');
      const [eventLine, dataLine] = [lines[0]!, lines.at(-1)!];
      if (eventLine !== 'event: stdout') continue;
      const data = JSON.parse(dataLine.slice('data: '.length));
      expect(dataLine).toBe(`data: ${JSON.stringify(data)}`);
      stdout += data.data;
    }
    expect(stdout).toBe(whole.toString('utf8'));
  });

  it('completes a character split between the replay and live output once, and ends a dangling one with one U+FFFD', async () => {
    // 😀 is cut after its second byte; the attacher joins while the command sleeps there.
    const emoji = Buffer.from('😀');
    const chunks = [Buffer.concat([Buffer.from('before '), emoji.subarray(0, 2)]), Buffer.concat([emoji.subarray(2), Buffer.from(' after '), Buffer.from([0xe2, 0x82])])];
    const sub = join(dir, 'split');
    publicDir(sub);
    writeFileSync(join(sub, 'a'), chunks[0]!, { mode: 0o644 });
    writeFileSync(join(sub, 'b'), chunks[1]!, { mode: 0o644 });
    const { pid } = (await (await fixture.server.call('POST', '/commands', { cmd: `cat ${sub}/a; sleep 1; cat ${sub}/b`, background: true })).json()) as { pid: number };
    await waitFor(async () => (await fixture.server.app.envd.processes.get(pid)!.log.size()) > 0, 5_000);
    const events: SseEvent[] = [];
    for await (const event of readEvents(await fixture.server.call('GET', `/commands/${pid}/stream`))) if (event.event !== ':') events.push(event);
    expect(stdoutOf(events)).toBe('before 😀 after \uFFFD');
    expect(events.at(-1)).toEqual({ event: 'exit', data: { exit_code: 0, reason: 'exited' } });
    await fixture.server.call('GET', `/commands/${pid}/wait`);
  });
});
