import { describe, expect, it } from 'vitest';
import { ExternalPolicy, ReclaimPolicy } from '../src/memory-reclaim.js';

const MIB = 1024 * 1024;

describe('ReclaimPolicy', () => {
  it('learns where envd stands on the first tick and does not collect at idle', () => {
    const policy = new ReclaimPolicy();
    expect(policy.shouldCollect({ rss: 60 * MIB, now: 0, busy: 0 })).toBeUndefined();
    for (let t = 2_000; t < 600_000; t += 2_000) expect(policy.shouldCollect({ rss: 60 * MIB + 3 * MIB, now: t, busy: 0 })).toBeUndefined();
  });

  it('collects during load as soon as RSS grew 4 MiB since the last collection, even at once', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0, busy: 0 });
    expect(policy.shouldCollect({ rss: 64 * MIB - 1, now: 1, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 64 * MIB, now: 2, busy: 0 })).toBe('during-load');
    policy.collected({ kind: 'during-load', before: 64 * MIB, after: 70 * MIB, now: 2 }); // live data grew meanwhile
    expect(policy.shouldCollect({ rss: 73 * MIB, now: 3, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 74 * MIB, now: 4, busy: 0 })).toBe('during-load');
  });

  it('after load, collects again while RSS stays 4 MiB above the lowest level, waiting longer each time it does not help', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0, busy: 0 });
    expect(policy.shouldCollect({ rss: 80 * MIB, now: 2_000, busy: 0 })).toBe('during-load');
    policy.collected({ kind: 'during-load', before: 80 * MIB, after: 70 * MIB, now: 2_000 }); // the next wait is 4 s
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 5_999, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 6_000, busy: 0 })).toBe('after-load');
    policy.collected({ kind: 'after-load', before: 70 * MIB, after: 70 * MIB, now: 6_000 }); // did not help: 8 s
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 13_999, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 14_000, busy: 0 })).toBe('after-load');
    policy.collected({ kind: 'after-load', before: 70 * MIB, after: 70 * MIB, now: 14_000 }); // 16 s
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 29_999, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 30_000, busy: 0 })).toBe('after-load');
  });

  it('does not count a collection during load as one that did not help: its memory comes back later', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0, busy: 0 });
    expect(policy.shouldCollect({ rss: 66 * MIB, now: 2_000, busy: 0 })).toBe('during-load');
    policy.collected({ kind: 'during-load', before: 66 * MIB, after: 66 * MIB, now: 2_000 });
    // Backed off while idle above the floor (fragmentation): the waits grow to 16 s.
    for (const now of [6_000, 14_000]) {
      expect(policy.shouldCollect({ rss: 66 * MIB, now, busy: 0 })).toBe('after-load');
      policy.collected({ kind: 'after-load', before: 66 * MIB, after: 66 * MIB, now });
    }
    // A burst: RSS climbs, and the regular collections under it give nothing back at once.
    for (let now = 16_000, rss = 70; now <= 22_000; now += 2_000, rss += 4) {
      expect(policy.shouldCollect({ rss: rss * MIB, now, busy: 0 })).toBe('during-load');
      policy.collected({ kind: 'during-load', before: rss * MIB, after: rss * MIB, now });
    }
    // The burst is over: the memory-reducing collection comes 4 s after the last one, not 16 or 32 s.
    expect(policy.shouldCollect({ rss: 82 * MIB, now: 25_999, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 82 * MIB, now: 26_000, busy: 0 })).toBe('after-load');
  });

  it('runs no memory-reducing collection while the event loop is busy, however long RSS stays up, nor in the pauses of bursty load', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0, busy: 0 });
    // Load from an idle start: RSS climbs once, then stays on a plateau well above the idle floor.
    expect(policy.shouldCollect({ rss: 72 * MIB, now: 2_000, busy: 1 })).toBe('during-load');
    policy.collected({ kind: 'during-load', before: 72 * MIB, after: 71 * MIB, now: 2_000 });
    for (let now = 4_000; now <= 60_000; now += 2_000) expect(policy.shouldCollect({ rss: 72 * MIB, now, busy: now % 4_000 === 0 ? 0.5 : 0.1 })).toBeUndefined();
    // Bursts 2 s apart: a quiet tick between busy ones is a pause, not the end.
    for (let now = 62_000; now <= 120_000; now += 2_000) expect(policy.shouldCollect({ rss: 72 * MIB, now, busy: now % 4_000 === 0 ? 0.9 : 0 })).toBeUndefined();
    // The load ends: the second quiet tick in a row collects.
    expect(policy.shouldCollect({ rss: 72 * MIB, now: 122_000, busy: 0.099 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 72 * MIB, now: 124_000, busy: 0.02 })).toBe('after-load');
  });

  it('never waits more than 5 minutes, and stops once RSS is back near the lowest level', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0, busy: 0 });
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 0, busy: 0 })).toBe('during-load');
    policy.collected({ kind: 'during-load', before: 70 * MIB, after: 70 * MIB, now: 0 });
    let now = 0;
    for (let i = 0; i < 20; i++) {
      now += 10 * 60_000;
      expect(policy.shouldCollect({ rss: 70 * MIB, now, busy: 0 })).toBe('after-load');
      policy.collected({ kind: 'after-load', before: 70 * MIB, after: 70 * MIB, now });
    }
    expect(policy.shouldCollect({ rss: 70 * MIB, now: now + 5 * 60_000 - 1, busy: 0 })).toBeUndefined();
    expect(policy.shouldCollect({ rss: 70 * MIB, now: now + 5 * 60_000, busy: 0 })).toBe('after-load');
    policy.collected({ kind: 'after-load', before: 70 * MIB, after: 62 * MIB, now: now + 5 * 60_000 });
    expect(policy.shouldCollect({ rss: 62 * MIB, now: now + 60 * 60_000, busy: 0 })).toBeUndefined();
  });
});

describe('ExternalPolicy', () => {
  it('collects once buffers grew 16 MiB above their lowest level since the last collection, not before', () => {
    const policy = new ExternalPolicy();
    expect(policy.shouldCollect(2 * MIB)).toBe(false);
    expect(policy.shouldCollect(1 * MIB)).toBe(false); // the floor follows V8's own collections down
    expect(policy.shouldCollect(17 * MIB - 1)).toBe(false);
    expect(policy.shouldCollect(17 * MIB)).toBe(true);
    policy.collected(10 * MIB); // live buffers stay: growth is counted from what the collection left
    expect(policy.shouldCollect(25 * MIB)).toBe(false);
    expect(policy.shouldCollect(26 * MIB)).toBe(true);
  });
});
