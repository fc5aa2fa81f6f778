import { describe, expect, it } from 'vitest';
import { cutToBytes, OutputLog } from '../../src/commands/output-log.js';

describe('cutToBytes', () => {
  it('cuts on a character boundary, never inside a multi-byte character', () => {
    expect(cutToBytes('ab😀c', 6)).toBe('ab😀');
    expect(cutToBytes('ab😀c', 5)).toBe('ab');
    expect(cutToBytes('ab😀c', 2)).toBe('ab');
    expect(cutToBytes('é', 1)).toBe('');
    expect(cutToBytes('abc', 3)).toBe('abc');
    expect(cutToBytes('abc', 0)).toBe('');
  });
});

describe('OutputLog', () => {
  it('keeps stdout and stderr in arrival order and per-stream text', () => {
    const log = new OutputLog(100);
    log.append('stdout', 'a');
    log.append('stderr', 'b');
    log.append('stdout', 'c');
    expect(log.events).toEqual([
      { stream: 'stdout', data: 'a' },
      { stream: 'stderr', data: 'b' },
      { stream: 'stdout', data: 'c' },
    ]);
    expect(log.text('stdout')).toBe('ac');
    expect(log.text('stderr')).toBe('b');
  });

  it('merges consecutive chunks of one stream into a new object, leaving snapshots untouched', () => {
    const log = new OutputLog(100);
    log.append('stdout', 'a');
    const snapshot = log.events.slice();
    log.append('stdout', 'b');
    expect(log.events).toEqual([{ stream: 'stdout', data: 'ab' }]);
    expect(snapshot).toEqual([{ stream: 'stdout', data: 'a' }]);
  });

  it('counts UTF-8 bytes against the cap per stream and drops everything after the cut', () => {
    const log = new OutputLog(4);
    log.append('stdout', 'é');
    log.append('stdout', 'é');
    expect(log.truncated.stdout).toBe(false);
    log.append('stdout', 'x');
    expect(log.truncated.stdout).toBe(true);
    log.append('stdout', 'y');
    expect(log.text('stdout')).toBe('éé');
    log.append('stderr', 'abcd');
    expect(log.text('stderr')).toBe('abcd');
    expect(log.truncated.stderr).toBe(false);
  });
});
