import { describe, expect, it } from 'vitest';
import { CommandFrames } from '../../src/sessions/frames.js';
import { commandLine } from '../../src/sessions/driver.js';

const NONCE = '0123456789abcdef0123456789abcdef';
const begin = `\x1eenvd:${NONCE}:b\x1e`;

/** Feeds `stdout` and `stderr` in pieces of `size` bytes; returns what each frame held and how stdout's closed. */
function cut(stdout: Buffer, stderr: Buffer, size: number) {
  const frames = new CommandFrames(NONCE);
  const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const emit = (stream: 'stdout' | 'stderr', bytes: Buffer) => out[stream].push(Buffer.from(bytes));
  for (let at = 0; at < Math.max(stdout.length, stderr.length); at += size) {
    if (at < stdout.length) frames.feed('stdout', stdout.subarray(at, at + size), emit);
    if (at < stderr.length) frames.feed('stderr', stderr.subarray(at, at + size), emit);
  }
  return { stdout: Buffer.concat(out.stdout), stderr: Buffer.concat(out.stderr), end: frames.end, complete: frames.complete };
}

describe('cutting a session command out of the shell\'s streams', () => {
  const output = Buffer.concat([Buffer.from('before the frame'), Buffer.from(begin), Buffer.from([0, 0x1e, 0xff]), Buffer.from(`\x1eenvd:${'f'.repeat(32)}:e:0\x1e`), Buffer.from(`\x1eenvd:${NONCE}:q\x1e`), Buffer.from('no newline')]);
  const stdout = Buffer.concat([output, Buffer.from(`\x1eenvd:${NONCE}:e:42\x1e`), Buffer.from('a background job, later')]);
  const stderr = Buffer.from(`${begin}err\x1eenvd:${NONCE}:e\x1e`);

  it.each([1, 2, 3, 7, 45, 4096])('keeps exactly the bytes between the markers, read %i bytes at a time', (size) => {
    const result = cut(stdout, stderr, size);
    expect(result.complete).toBe(true);
    expect(result.end).toEqual({ status: 42, exited: false });
    expect(result.stdout.equals(output.subarray(output.indexOf(begin) + begin.length))).toBe(true);
    expect(result.stderr.toString()).toBe('err');
  });

  it('hands output on as it is read, holding back only a tail that could begin a marker', () => {
    const frames = new CommandFrames(NONCE);
    const seen: string[] = [];
    const feed = (text: string) => {
      frames.feed('stdout', Buffer.from(text, 'latin1'), (_, bytes) => seen.push(bytes.toString('latin1')));
      return seen.splice(0).join('');
    };
    expect(feed(`${begin}first\n`)).toBe('first\n');
    expect(feed('two\x1eenvd:')).toBe('two');
    expect(feed('not-a-nonce')).toBe('\x1eenvd:not-a-nonce');
    expect(feed('x\x1e')).toBe('x');
    expect(feed('\x1e')).toBe('\x1e');
    expect(feed(`\x1eenvd:${NONCE}:e:0\x1e`)).toBe('\x1e');
    expect(frames.end).toEqual({ status: 0, exited: false });
  });

  it('reads an exit marker as the shell ending with the status', () => {
    const result = cut(Buffer.from(`${begin}bye\x1eenvd:${NONCE}:x:3\x1e`), Buffer.from(`${begin}\x1eenvd:${NONCE}:e\x1e`), 5);
    expect(result).toMatchObject({ complete: true, end: { status: 3, exited: true } });
    expect(result.stdout.toString()).toBe('bye');
  });

  it('is not complete until both streams have closed their frames', () => {
    expect(cut(Buffer.from(`${begin}x\x1eenvd:${NONCE}:e:0\x1e`), Buffer.from(`${begin}y`), 4).complete).toBe(false);
  });

  it('writes a command as one line the driver reads whole, quotes and newlines included', () => {
    const line = commandLine(NONCE, "echo 'a'\nb\\n$x", '/tmp/in');
    expect(line.split('\n')).toHaveLength(2);
    expect(line).toBe(`__envd_run ${NONCE} 'echo '\\''a'\\'''"$__envd_nl"'b\\n$x' '/tmp/in'\n`);
  });
});
