import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Gives memory back after load. envd is mostly idle between bursts (a kill
 * storm, a few large transfers, many streams that end together), and V8 runs
 * no full collection while idle: the garbage of the burst, and the socket and
 * file buffers whose memory lives outside V8's heap, stayed for minutes,
 * +20–30 MiB of RSS taken from the VM's user processes (bench/recovery.mjs).
 *
 * Every TICK_MS envd reads its RSS (one read of /proc/self/stat). It runs a
 * full collection when RSS grew by GROWTH_BYTES since the last one (load is
 * going on: this bounds the garbage it can pile up), or when RSS is still
 * GROWTH_BYTES above the lowest level a collection ever reached (load has
 * ended). A collection that gave back little doubles the wait before the next
 * one of the second kind, up to MAX_WAIT_MS, so an idle envd whose RSS cannot
 * fall further (allocator fragmentation) does not collect every few seconds.
 * A full collection of envd's heap takes 5–15 ms on this machine.
 */
const TICK_MS = 2_000;
const GROWTH_BYTES = 4 * 1024 * 1024;
const FIRST_WAIT_MS = 4_000;
const MAX_WAIT_MS = 5 * 60_000;
/** Less than this given back counts as a collection that did not help. */
const HELPED_BYTES = 1024 * 1024;

export interface ReclaimStep {
  /** RSS now. */
  rss: number;
  now: number;
}

/** The decision, kept free of timers and of V8 so that it can be tested as it is. */
export class ReclaimPolicy {
  private afterLast = Infinity;
  private lowest = Infinity;
  private lastAt = 0;
  private wait = FIRST_WAIT_MS;

  shouldCollect({ rss, now }: ReclaimStep): boolean {
    if (this.afterLast === Infinity) {
      // The first tick only learns where envd stands.
      this.afterLast = this.lowest = rss;
      this.lastAt = now;
      return false;
    }
    if (rss >= this.afterLast + GROWTH_BYTES) return true;
    return rss >= this.lowest + GROWTH_BYTES && now - this.lastAt >= this.wait;
  }

  collected({ before, after, now }: { before: number; after: number; now: number }): void {
    this.wait = before - after < HELPED_BYTES ? Math.min(this.wait * 2, MAX_WAIT_MS) : FIRST_WAIT_MS;
    this.afterLast = after;
    this.lowest = Math.min(this.lowest, after);
    this.lastAt = now;
  }
}

/** V8's full collection, made callable without starting Node with --expose-gc. */
function fullCollection(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/** Starts the ticks; they never keep envd alive. Returns a function that stops them. */
export function startMemoryReclaim(): () => void {
  const policy = new ReclaimPolicy();
  let collect: (() => void) | undefined;
  const timer = setInterval(() => {
    const before = process.memoryUsage.rss();
    if (!policy.shouldCollect({ rss: before, now: Date.now() })) return;
    collect ??= fullCollection();
    collect();
    policy.collected({ before, after: process.memoryUsage.rss(), now: Date.now() });
  }, TICK_MS);
  timer.unref();
  return () => clearInterval(timer);
}
