import { describe, expect, it } from 'vitest';
import { ReclaimPolicy } from '../src/memory-reclaim.js';

const MIB = 1024 * 1024;

describe('ReclaimPolicy', () => {
  it('learns where envd stands on the first tick and does not collect at idle', () => {
    const policy = new ReclaimPolicy();
    expect(policy.shouldCollect({ rss: 60 * MIB, now: 0 })).toBe(false);
    for (let t = 2_000; t < 600_000; t += 2_000) expect(policy.shouldCollect({ rss: 60 * MIB + 3 * MIB, now: t })).toBe(false);
  });

  it('collects as soon as RSS grew 4 MiB since the last collection, even at once', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0 });
    expect(policy.shouldCollect({ rss: 64 * MIB - 1, now: 1 })).toBe(false);
    expect(policy.shouldCollect({ rss: 64 * MIB, now: 2 })).toBe(true);
    policy.collected({ before: 64 * MIB, after: 70 * MIB, now: 2 }); // live data grew meanwhile
    expect(policy.shouldCollect({ rss: 73 * MIB, now: 3 })).toBe(false);
    expect(policy.shouldCollect({ rss: 74 * MIB, now: 4 })).toBe(true);
  });

  it('after load, collects again while RSS stays 4 MiB above the lowest level, waiting longer each time it does not help', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0 });
    expect(policy.shouldCollect({ rss: 80 * MIB, now: 2_000 })).toBe(true);
    policy.collected({ before: 80 * MIB, after: 70 * MIB, now: 2_000 }); // helped: the next wait is 4 s
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 5_999 })).toBe(false);
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 6_000 })).toBe(true);
    policy.collected({ before: 70 * MIB, after: 70 * MIB, now: 6_000 }); // did not help: 8 s
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 13_999 })).toBe(false);
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 14_000 })).toBe(true);
    policy.collected({ before: 70 * MIB, after: 70 * MIB, now: 14_000 }); // 16 s
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 29_999 })).toBe(false);
    expect(policy.shouldCollect({ rss: 70 * MIB, now: 30_000 })).toBe(true);
  });

  it('never waits more than 5 minutes, and stops once RSS is back near the lowest level', () => {
    const policy = new ReclaimPolicy();
    policy.shouldCollect({ rss: 60 * MIB, now: 0 });
    let now = 0;
    for (let i = 0; i < 20; i++) {
      now += 10 * 60_000;
      expect(policy.shouldCollect({ rss: 70 * MIB, now })).toBe(true);
      policy.collected({ before: 70 * MIB, after: 70 * MIB, now });
    }
    expect(policy.shouldCollect({ rss: 70 * MIB, now: now + 5 * 60_000 - 1 })).toBe(false);
    expect(policy.shouldCollect({ rss: 70 * MIB, now: now + 5 * 60_000 })).toBe(true);
    policy.collected({ before: 70 * MIB, after: 62 * MIB, now: now + 5 * 60_000 });
    expect(policy.shouldCollect({ rss: 62 * MIB, now: now + 60 * 60_000 })).toBe(false);
  });
});
