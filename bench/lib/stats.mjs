// Small statistics for the bench: medians and percentiles over samples, the
// A B A B interleaving that lets a noisy machine hit both sides alike, and the
// ratio with its direction spelled out.

/** The q-quantile (0..1) of the samples, nearest-rank on the sorted copy. */
export function percentile(samples, q) {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil(q * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/** Median: the middle sample, or the mean of the middle two. */
export function median(samples) {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** The run-to-run spread of a figure: its lowest, middle and highest value, and how far apart the ends are. */
export function spread(values) {
  const min = Math.min(...values);
  const max = Math.max(...values);
  return { min, median: median(values), max, range: max - min };
}

/**
 * envd compared with its baseline so that the number reads like the goal:
 * 'envd/baseline' for costs (latency, where lower is better and the goal is
 * "ratio ≤ x") and for rates when the goal is "envd reaches x of the floor"
 * (throughput, "ratio ≥ x"). Rounded to 3 decimals; null when a side is missing.
 */
export function ratio(envd, baseline) {
  if (envd == null || baseline == null || !Number.isFinite(envd) || !Number.isFinite(baseline) || baseline === 0) return null;
  return Math.round((envd / baseline) * 1000) / 1000;
}

/**
 * Runs `rounds` rounds of A then B (A B A B …), each call returning one sample
 * (or an array of samples), and returns every sample of each side. Warm-up
 * rounds run first and are thrown away. With `budgetMs`, measuring stops early
 * once that much time has gone by and at least `minRounds` rounds are in, so a
 * slow machine (a login shell that takes 300 ms) still finishes in time;
 * `samples.rounds` says how many were measured.
 */
export async function interleave({ rounds, warmup = 0, a, b, budgetMs = Infinity, minRounds = 1, now = () => performance.now() }) {
  const samples = { a: [], b: [], rounds: 0 };
  let started;
  for (let round = -warmup; round < rounds; round++) {
    if (round === 0) started = now();
    else if (round >= minRounds && now() - started > budgetMs) break;
    const sa = await a(round);
    const sb = await b(round);
    if (round < 0) continue;
    samples.a.push(...[sa].flat());
    samples.b.push(...[sb].flat());
    samples.rounds++;
  }
  return samples;
}

/** Runs `count` calls of `task` with at most `concurrency` in flight; resolves when all have finished. */
export async function runConcurrently(count, concurrency, task) {
  let next = 0;
  const worker = async () => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
}

/** Round to a sensible number of significant digits for a table. */
export function round(value, digits = 3) {
  if (value == null || !Number.isFinite(value)) return value ?? null;
  if (value === 0) return 0;
  const magnitude = Math.floor(Math.log10(Math.abs(value)));
  const factor = 10 ** Math.max(0, digits - 1 - magnitude);
  return Math.round(value * factor) / factor;
}
