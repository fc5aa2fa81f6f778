import { describe, expect, it } from 'vitest';
import { MAX_READY_LINE_CHARS, ReadyLogSubscriber } from '../../src/commands/ready-log.js';
import type { TrackedProcess } from '../../src/commands/tracked-process.js';

/** A subscriber for `pattern` that counts its matches; `kept()` is the unfinished stdout line it holds. */
function subscriber(pattern: RegExp) {
  let matches = 0;
  const ready = new ReadyLogSubscriber({} as TrackedProcess, pattern, () => matches++, () => {});
  return {
    push: (text: string) => ready.push('stdout', Buffer.from(text)),
    matches: () => matches,
    kept: () => (ready as unknown as { lines: { stdout: string } }).lines.stdout.length,
  };
}

describe('a log readiness check on an endless line', () => {
  it.each([65_536, 3_000])('holds at most 1.5x MAX_READY_LINE_CHARS of it in %i-byte chunks, and tests its last MAX_READY_LINE_CHARS at the newline', (chunk) => {
    const check = subscriber(/^a+ READY$/);
    const block = 'a'.repeat(chunk);
    let most = 0;
    for (let sent = 0; sent < 4 * 1024 * 1024; sent += chunk) {
      check.push(block);
      most = Math.max(most, check.kept());
    }
    expect(most).toBeLessThanOrEqual(MAX_READY_LINE_CHARS * 1.5);
    expect(most).toBeGreaterThanOrEqual(MAX_READY_LINE_CHARS);
    check.push(' READY');
    expect(check.matches()).toBe(0);
    check.push('\n');
    expect(check.matches()).toBe(1);
  });

  it("does not see the start of a line longer than MAX_READY_LINE_CHARS (only its last characters are tested)", () => {
    const check = subscriber(/^START.*END$/);
    check.push('START');
    check.push('b'.repeat(MAX_READY_LINE_CHARS * 3));
    check.push('END\n');
    expect(check.matches()).toBe(0);
    check.push('START short END\n');
    expect(check.matches()).toBe(1);
  });
});
