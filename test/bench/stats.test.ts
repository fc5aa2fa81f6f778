import { describe, expect, it } from 'vitest';
// @ts-expect-error: the bench is plain ESM JavaScript with no type declarations.
import { interleave, median, percentile, ratio, runConcurrently, spread } from '../../bench/lib/stats.mjs';

describe('bench statistics', () => {
  it('takes the middle sample as the median, or the mean of the middle two', () => {
    expect(median([5, 1, 3])).toBe(3);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([])).toBeNaN();
  });

  it('gives the spread of repeated runs: lowest, median, highest and the range between them', () => {
    expect(spread([1.05, 1.16, 1.14, 0.66, 1.17])).toEqual({ min: 0.66, median: 1.14, max: 1.17, range: 1.17 - 0.66 });
    expect(spread([0.7])).toEqual({ min: 0.7, median: 0.7, max: 0.7, range: 0 });
  });

  it('answers percentiles by nearest rank without reordering the input', () => {
    const samples = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(percentile(samples, 0.5)).toBe(50);
    expect(percentile(samples, 0.99)).toBe(99);
    expect(percentile(samples, 1)).toBe(100);
    expect(percentile(samples, 0)).toBe(1);
    expect(samples[0]).toBe(100);
  });

  it('gives envd / baseline as the ratio, and null when a side is missing', () => {
    expect(ratio(13, 10)).toBe(1.3);
    expect(ratio(2, 3)).toBe(0.667);
    expect(ratio(null, 10)).toBeNull();
    expect(ratio(10, 0)).toBeNull();
  });

  it('interleaves the two sides A B A B and drops the warm-up rounds', async () => {
    const order: string[] = [];
    const samples = await interleave({
      rounds: 2,
      warmup: 1,
      a: (round: number) => (order.push(`a${round}`), round),
      b: async (round: number) => (order.push(`b${round}`), [round, round * 10]),
    });
    expect(order).toEqual(['a-1', 'b-1', 'a0', 'b0', 'a1', 'b1']);
    expect(samples).toEqual({ a: [0, 1], b: [0, 0, 1, 10], rounds: 2 });
  });

  it('stops measuring once the time budget is spent, but not before the minimum rounds', async () => {
    let clock = 0;
    const samples = await interleave({ rounds: 100, minRounds: 3, budgetMs: 10, now: () => clock, a: () => (clock += 4), b: () => 0 });
    // Rounds end at 4, 8, 12 ms: the fourth would start past the 10 ms budget.
    expect(samples.rounds).toBe(3);
    const unbounded = await interleave({ rounds: 2, minRounds: 5, budgetMs: 0, now: () => (clock += 100), a: () => 1, b: () => 2 });
    expect(unbounded.rounds).toBe(2);
  });

  it('runs every task with no more than the given number in flight', async () => {
    let inFlight = 0;
    let most = 0;
    const done: number[] = [];
    await runConcurrently(20, 3, async (i: number) => {
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 1));
      inFlight--;
      done.push(i);
    });
    expect(done.sort((x, y) => x - y)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(most).toBe(3);
  });
});
