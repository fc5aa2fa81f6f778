import { describe, expect, it } from 'vitest';
import { startLatencyProbe } from '../src/latency-probe.js';
import { loadGc } from '../src/memory-reclaim.js';

describe('ENVD_LATENCY_PROBE', () => {
  it("writes each second the event loop's delay and that second's collections by kind, a forced full one and a blocked loop included", async () => {
    const lines: string[] = [];
    const stop = startLatencyProbe((line) => lines.push(line));
    try {
      loadGc()({ type: 'major', execution: 'sync', flavor: 'regular' });
      // Once the delay's timer has fired (it measures from one firing to the next), 150 ms with the loop blocked.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const until = performance.now() + 150;
      while (performance.now() < until);
      await new Promise((resolve) => setTimeout(resolve, 1_200));
    } finally {
      stop();
    }
    expect(lines[0]).toMatch(/^latency-probe loop-delay p50 [\d.]+ms p99 [\d.]+ms max [\d.]+ms; gc .*major [1-9]\d*x [\d.]+ms \(max [\d.]+\)/);
    expect(Number(/max ([\d.]+)ms;/.exec(lines[0]!)![1])).toBeGreaterThanOrEqual(140);
  });
});
