import { monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { constants } from 'node:perf_hooks';

/**
 * A diagnostic, off unless ENVD_LATENCY_PROBE is set (docs/operations.md):
 * once a second, one line on stderr with the event loop's delay (p50, p99,
 * max, from perf_hooks' histogram at 10 ms resolution) next to the garbage
 * collections of that second by kind, their count and pause. It tells a slow
 * /health caused by the collector from one caused by a long synchronous
 * section (issues 36 and 45). stderr, not pino: the line must not depend on
 * the log level, and costs nothing when the probe is off.
 */
const EVERY_MS = 1_000;

const GC_KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

export function startLatencyProbe(write: (line: string) => void = (line) => process.stderr.write(`${line}\n`)): () => void {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let gcs: Record<string, { n: number; ms: number; maxMs: number }> = {};
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries() as (PerformanceEntry & { detail?: { kind?: number } })[]) {
      const kind = GC_KINDS[entry.detail?.kind ?? -1] ?? 'other';
      const seen = (gcs[kind] ??= { n: 0, ms: 0, maxMs: 0 });
      seen.n++;
      seen.ms += entry.duration;
      seen.maxMs = Math.max(seen.maxMs, entry.duration);
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  const ms = (ns: number) => Math.round(ns / 1e5) / 10;
  const timer = setInterval(() => {
    const gc = Object.entries(gcs).map(([kind, s]) => `${kind} ${s.n}x ${s.ms.toFixed(1)}ms (max ${s.maxMs.toFixed(1)})`).join(', ');
    write(`latency-probe loop-delay p50 ${ms(delay.percentile(50))}ms p99 ${ms(delay.percentile(99))}ms max ${ms(delay.max)}ms; gc ${gc || 'none'}`);
    delay.reset();
    gcs = {};
  }, EVERY_MS);
  timer.unref();
  return () => {
    clearInterval(timer);
    observer.disconnect();
    delay.disable();
  };
}
