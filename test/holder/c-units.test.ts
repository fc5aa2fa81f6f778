// The holder's pure C functions where they have edges (issue 30), compiled
// with small check programs in test/holder/c/: json_text against the WHATWG
// decoding and JSON.stringify, frame_event against the bytes envd writes,
// sha256 against OpenSSL's (node:crypto); and
// the failures of the command's process that a healthy machine never shows,
// provoked with a seccomp filter (deny-syscall.c).
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLog, readLog, readStatus, startHolder, useHolders } from '../helpers/holder.js';
import { decodeOutput, outputBytes, PROPERTY_SEED } from '../helpers/output-integrity.js';

useHolders();

let dir: string;
const binary = (name: string) => join(dir, name);

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-c-units-'));
  const cc = (name: string, ...units: string[]) =>
    execFileSync('cc', ['-std=c11', '-O2', '-Wall', '-Wextra', '-Werror', '-I', 'src/holder', '-o', binary(name), `test/holder/c/${name}.c`, ...units.map((u) => `src/holder/${u}.c`)]);
  cc('json-text-check', 'json-text');
  cc('event-check', 'event');
  cc('sha256-check', 'sha256');
  cc('deny-syscall');
});
afterAll(() => dir && rmSync(dir, { recursive: true, force: true }));

/** What json_text makes of `bytes` read in `pieces` with `cap` bytes of room per call ("room": exactly 6 per byte). */
function jsonText(bytes: Uint8Array, cap: number | 'room', pieces: number[]): string {
  const run = spawnSync(binary('json-text-check'), [String(cap), ...pieces.map(String)], { input: bytes, maxBuffer: 64 * 1024 * 1024 });
  if (run.status !== 0) throw new Error(`json-text-check exited ${run.status}: ${run.stderr}`);
  return run.stdout.toString('utf8');
}

const expectedText = (bytes: Uint8Array) => JSON.stringify(decodeOutput(bytes)).slice(1, -1);

describe('json_text (C)', () => {
  it('takes every byte of a piece given 6 bytes of room per byte (and 3 for a carried character), and escapes as JSON.stringify does', () => {
    fc.assert(
      fc.property(outputBytes, fc.array(fc.integer({ min: 1, max: 70_000 }), { minLength: 1, maxLength: 4 }), (bytes, pieces) => {
        expect(jsonText(bytes, 'room', pieces)).toBe(expectedText(bytes));
      }),
      { seed: PROPERTY_SEED, numRuns: 150 },
    );
  });

  it('gives the same text in any room of at least 9 bytes, one read at a time or one byte at a time', () => {
    fc.assert(
      fc.property(outputBytes, fc.integer({ min: 9, max: 64 }), fc.integer({ min: 1, max: 9 }), (bytes, cap, piece) => {
        expect(jsonText(bytes, cap, [piece])).toBe(expectedText(bytes));
      }),
      { seed: PROPERTY_SEED, numRuns: 150 },
    );
  });

  it('takes a whole read of bytes that each become \\u00xx in JSON_TEXT_ROOM (the lost byte of issue 30)', () => {
    const read = new Uint8Array(61_440).fill(0);
    expect(jsonText(read, 'room', [61_440])).toBe(expectedText(read));
    const mixed = Uint8Array.from({ length: 61_440 }, (_, i) => (i % 7 === 0 ? 0xe2 : i % 7 === 1 ? 0x82 : i % 7 === 2 ? 0xac : i % 3));
    expect(jsonText(mixed, 'room', [61_440, 1, 3])).toBe(expectedText(mixed));
    // A character left incomplete by one read, ended by the next read's first byte: its U+FFFD comes on top.
    const carried = Uint8Array.from([0xe2, 0x82, ...new Array(61_440).fill(0)]);
    expect(jsonText(carried, 'room', [2, 61_440])).toBe(expectedText(carried));
  });
});

describe('frame_event (C)', () => {
  it('frames every length of event as envd does, as a chunk whose size line is exactly its length', () => {
    const run = spawnSync(binary('event-check'), { encoding: 'utf8' });
    expect(run.stdout).toBe('');
    expect(run.status).toBe(0);
  });
});

/** What sha256-check prints for `bytes` fed in `pieces` (cycled): each block function's hash. */
function sha256Check(bytes: Uint8Array, pieces: number[]): { portable: string; shani: string } {
  const run = spawnSync(binary('sha256-check'), pieces.map(String), { input: bytes, maxBuffer: 1024 * 1024 });
  if (run.status !== 0) throw new Error(`sha256-check exited ${run.status}: ${run.stderr}`);
  const [portable, shani] = run.stdout.toString('utf8').trim().split('\n').map((line) => line.split(' ')[1]!);
  return { portable: portable!, shani: shani! };
}

describe('sha256 (C, the archive relay\'s hash)', () => {
  const hasShaNi = /^flags\s*:.*\bsha_ni\b/m.test(readFileSync('/proc/cpuinfo', 'latin1'));
  const expected = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

  it(`gives OpenSSL's hash for every length and split, with the portable code and with the SHA extensions (${hasShaNi ? 'this CPU has them' : 'not on this CPU'})`, () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2_000 }), fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 5 }), (bytes, pieces) => {
        const { portable, shani } = sha256Check(bytes, pieces);
        expect(portable).toBe(expected(bytes));
        expect(shani).toBe(hasShaNi ? expected(bytes) : 'none');
      }),
      { seed: PROPERTY_SEED, numRuns: 150 },
    );
  });

  it('gives it at every padding edge and for megabytes fed in odd pieces', () => {
    for (const length of [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 3 * 1024 * 1024 + 7]) {
      const bytes = randomBytes(length);
      expect(sha256Check(bytes, [4099, 61, 64]), String(length)).toEqual({ portable: expected(bytes), shani: hasShaNi ? expected(bytes) : 'none' });
    }
  });
});

describe("the command's process when its setup fails", () => {
  const failing = async (rule: string, options: { pty?: { cols: number; rows: number } } = {}) => {
    const holder = await startHolder({ command: ['sh', '-c', 'echo ran'], ...options, launcher: [binary('deny-syscall'), rule] });
    expect(await holder.exited).toBe(0);
    return { status: readStatus(holder.dir)!, log: parseLog(readLog(holder.dir)) };
  };

  it('exits 122 with the reason on its stderr when setsid fails, and runs nothing', async () => {
    const { status, log } = await failing('setsid');
    expect(status.exitCode).toBe(122);
    expect(log.stderr.toString()).toBe('envd-holder: setsid: Operation not permitted (EPERM)\n');
    expect(log.stdout.toString()).toBe('');
  });

  it('exits 123 with the reason on the terminal when the terminal cannot become its controlling terminal', async () => {
    const { status, log } = await failing('tiocsctty', { pty: { cols: 80, rows: 24 } });
    expect(status.exitCode).toBe(123);
    expect(log.stdout.toString()).toMatch(/^envd-holder: cannot make \/dev\/pts\/\d+: Operation not permitted \(EPERM\)\r?\n$/);
  });

  it('exits 121 with the reason on its stderr pipe when its stderr cannot be set up', async () => {
    const { status, log } = await failing('dup-to-2');
    expect(status.exitCode).toBe(121);
    expect(log.stderr.toString()).toBe('envd-holder: cannot set up fd 2: Operation not permitted (EPERM)\n');
    expect(log.stdout.toString()).toBe('');
  });
});
