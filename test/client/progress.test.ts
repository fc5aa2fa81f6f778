// envd cp's progress line: nothing for a transfer under a second, then bytes,
// total, percentage and rate on a terminal, redrawn in place and cleared at the
// end; nothing at all where stderr is no terminal.
import { PassThrough } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { Progress } from '../../src/cli/progress.js';

/** A terminal-like stream that keeps what is written to it. */
function terminal(isTTY: boolean): NodeJS.WriteStream & { text: string } {
  const out = { isTTY, columns: 100, text: '', write(chunk: string) {
    out.text += chunk;
    return true;
  } };
  return out as unknown as NodeJS.WriteStream & { text: string };
}

async function transfer(progress: Progress, chunks: number, everyMs: number): Promise<void> {
  const source = new PassThrough();
  const sink = new PassThrough();
  sink.resume();
  const done = pipeline(source, progress.counter(), sink);
  for (let i = 0; i < chunks; i++) {
    source.write(Buffer.alloc(1024 * 1024));
    await new Promise((r) => setTimeout(r, everyMs));
  }
  source.end();
  await done;
  progress.end();
}

describe('the cp progress line', () => {
  it('stays silent for a transfer under a second', async () => {
    const tty = terminal(true);
    await transfer(new Progress('/f', 4 * 1024 * 1024, tty), 4, 50);
    expect(tty.text).toBe('');
  });

  it('shows done, total, percent and rate once a transfer passes a second, and clears itself', async () => {
    const tty = terminal(true);
    await transfer(new Progress('/big.bin', 8 * 1024 * 1024, tty), 8, 200);
    expect(tty.text).toMatch(/\r\u001b\[K\/big\.bin {2}\d+\.\d MiB \/ 8\.0 MiB \(\d+ %\) {2}\d+\.\d MB\/s/);
    expect(tty.text.endsWith('\r\u001b[K')).toBe(true);
  });

  it('writes nothing where stderr is not a terminal', async () => {
    const pipe = terminal(false);
    await transfer(new Progress('/big.bin', 8 * 1024 * 1024, pipe), 7, 200);
    expect(pipe.text).toBe('');
  });
});
