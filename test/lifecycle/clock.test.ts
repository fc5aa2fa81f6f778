import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ClockSync, decideClockChange, MAX_AHEAD_MS, MAX_BEHIND_MS, systemClockSetter } from '../../src/lifecycle/clock.js';
import { HOLDER_BINARY } from '../helpers/holder.js';

const HOST = Date.UTC(2026, 0, 2, 3, 4, 5, 678);

describe('decideClockChange', () => {
  it('leaves a guest that is exactly 50 ms behind alone and sets one 51 ms behind', () => {
    expect(MAX_BEHIND_MS).toBe(50);
    expect(decideClockChange(HOST - 50, HOST, undefined)).toBe('in-sync');
    expect(decideClockChange(HOST - 51, HOST, undefined)).toBe('set');
  });

  it('leaves a guest that is exactly 5 s ahead alone and sets one 5.001 s ahead', () => {
    expect(MAX_AHEAD_MS).toBe(5_000);
    expect(decideClockChange(HOST + 5_000, HOST, undefined)).toBe('in-sync');
    expect(decideClockChange(HOST + 5_001, HOST, undefined)).toBe('set');
  });

  it('leaves a guest on time, or slightly off within the window, alone', () => {
    for (const offset of [0, -1, -49, 1, 100, 4_999]) expect(decideClockChange(HOST + offset, HOST, undefined)).toBe('in-sync');
  });

  it('sets a guest that is far behind or far ahead (a restored snapshot)', () => {
    expect(decideClockChange(HOST - 3_600_000, HOST, undefined)).toBe('set');
    expect(decideClockChange(HOST + 86_400_000, HOST, undefined)).toBe('set');
    expect(decideClockChange(0, HOST, undefined)).toBe('set');
  });

  it('ignores a timestamp older than the last applied one, however far off the guest is', () => {
    expect(decideClockChange(HOST - 3_600_000, HOST - 1, HOST)).toBe('stale');
    expect(decideClockChange(HOST + 86_400_000, HOST - 1, HOST)).toBe('stale');
  });

  it('treats the same timestamp as the last applied one, or a newer one, as fresh', () => {
    expect(decideClockChange(HOST - 1_000, HOST, HOST)).toBe('set');
    expect(decideClockChange(HOST, HOST, HOST)).toBe('in-sync');
    expect(decideClockChange(HOST - 1_000, HOST + 1, HOST)).toBe('set');
  });
});

function quietLogger() {
  const lines: string[] = [];
  const sink = new Writable({ write: (chunk, _e, done) => (lines.push(String(chunk)), done()) });
  return { log: pino({ level: 'info' }, sink), lines };
}

describe('ClockSync', () => {
  it('calls the setter with the host time (plus the time spent since deciding) only when the guest is off', async () => {
    const calls: number[] = [];
    let guest = HOST - 10_000;
    const { log } = quietLogger();
    const sync = new ClockSync(async (ms) => void calls.push(ms), log, () => guest);

    const first = sync.sync(HOST);
    expect(first.decision).toBe('set');
    await first.done;
    expect(calls).toHaveLength(1);
    expect(calls[0]).toBeGreaterThanOrEqual(HOST);
    expect(calls[0]! - HOST).toBeLessThan(1_000);

    guest = HOST + 1_000;
    const inSync = sync.sync(HOST + 1_000);
    expect(inSync.decision).toBe('in-sync');
    await inSync.done;
    expect(calls).toHaveLength(1);
    expect(sync.lastAppliedMs).toBe(HOST + 1_000);
  });

  it('remembers in-sync timestamps too, so a delayed older one never rolls the clock back', async () => {
    const calls: number[] = [];
    const { log } = quietLogger();
    const sync = new ClockSync(async (ms) => void calls.push(ms), log, () => HOST);
    expect(sync.sync(HOST).decision).toBe('in-sync');
    const late = sync.sync(HOST - 60_000);
    expect(late.decision).toBe('stale');
    await late.done;
    expect(calls).toEqual([]);
    expect(sync.lastAppliedMs).toBe(HOST);
  });

  it('runs setters one after another in decision order, so the newest time ends up set', async () => {
    const order: number[] = [];
    const { log } = quietLogger();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const sync = new ClockSync(
      async (ms) => {
        if (order.length === 0) await gate;
        order.push(ms);
      },
      log,
      () => 0,
    );
    const a = sync.sync(HOST);
    const b = sync.sync(HOST + 10_000);
    release();
    await Promise.all([a.done, b.done]);
    expect(order).toHaveLength(2);
    expect(order[0]! < order[1]!).toBe(true);
    expect(order[1]! - (HOST + 10_000)).toBeLessThan(1_000);
  });

  it('logs a warning and resolves when the setter fails (envd not root)', async () => {
    const { log, lines } = quietLogger();
    const sync = new ClockSync(async () => Promise.reject(new Error('date: cannot set date: Operation not permitted')), log, () => 0);
    await expect(sync.sync(HOST).done).resolves.toBeUndefined();
    const warning = lines.map((line) => JSON.parse(line)).find((entry) => entry.level === 40);
    expect(warning?.msg).toMatch(/cannot set the guest clock/);
    expect(warning?.err?.message).toMatch(/Operation not permitted/);
  });
});

describe('systemClockSetter (the real setter: envd-holder --set-clock)', () => {
  // Setting this machine's clock would disturb everything else on it (the tests run as root): the holder
  // is run here as nobody, where clock_settime says EPERM, which shows the request reached it whole.
  // The guest suite sets a real guest clock through it (qemu starts the RTC in 2015).
  const bin = mkdtempSync(join(tmpdir(), 'envd-clock-'));
  afterAll(() => rmSync(bin, { recursive: true, force: true }));
  const asNobody = join(bin, 'holder-as-nobody');
  writeFileSync(asNobody, `#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups -- ${HOLDER_BINARY} "$@"\n`);
  chmodSync(asNobody, 0o755);

  it("reaches clock_settime with the time and rejects with the holder's reason when it may not set it", async () => {
    await expect(systemClockSetter(asNobody)(Date.UTC(2026, 0, 2, 3, 4, 5, 678))).rejects.toThrow(
      /setting the clock to 1767323045\.678 failed: envd-holder --set-clock: clock_settime: Operation not permitted \(EPERM\)/,
    );
  });

  it('refuses what is not a time', () => {
    const run = spawnSync(HOLDER_BINARY, ['--set-clock', '12abc'], { encoding: 'utf8' });
    expect(run.status).toBe(2);
    expect(run.stderr).toBe('envd-holder --set-clock: not a time: 12abc\n');
  });
});
