import { performance } from 'node:perf_hooks';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Gives memory back after load. envd is mostly idle between bursts (a kill
 * storm, a few large transfers, many streams that end together), and V8 runs
 * no full collection while idle: the garbage of the burst, and the socket and
 * file buffers whose memory lives outside V8's heap, stayed for minutes,
 * +20–30 MiB of RSS taken from the VM's user processes (bench/recovery.mjs).
 *
 * Every TICK_MS envd reads its RSS (one read of /proc/self/stat) and runs one
 * of two collections:
 * - during load, when RSS grew by GROWTH_BYTES since the last collection: a
 *   regular full collection (15–25 ms), which bounds the garbage a burst can
 *   pile up. Its memory comes back later, when V8 has swept concurrently and
 *   its memory reducer runs ~8 s on, so what it gave back is not measured.
 * - after load, when RSS is still GROWTH_BYTES above the lowest level it has
 *   been at: V8's memory-reducing collection (several mark-compacts, with
 *   compaction and its page pool released; 35–60 ms), which gives the memory
 *   back before it returns. A regular one here left the RSS where it was for
 *   5–15 s and counted as not helping (CI timed out on it).
 *   "After" is read from the event loop, not from RSS: the loop must have been
 *   busy less than QUIET_SHARE of each of the last QUIET_TICKS ticks. RSS
 *   alone cannot tell a plateau under load from the end of it, and every full
 *   collection costs the code that serves requests: optimized code that
 *   embeds an object the collection frees (a finished request's closure, a map
 *   no live object has) is thrown away, 70-110 functions each time under HTTP
 *   load (--trace-deopt: "embedded weak objects cleared"), and runs slowly
 *   until V8 optimizes it again. Run in every pause of bursty load, once envd
 *   had learned its idle floor, it cut GET /health to 0.57-0.68x bare fastify
 *   (bench/http-floor.mjs, the "after idle" row). Two quiet ticks still leave
 *   the collection within 6 s of the end of a burst.
 * One of the second kind that gave back little doubles the wait before the
 * next one, up to MAX_WAIT_MS, so an idle envd whose RSS cannot fall further
 * (allocator fragmentation) does not collect every few seconds; load resets it.
 */
const TICK_MS = 2_000;
const GROWTH_BYTES = 4 * 1024 * 1024;
const FIRST_WAIT_MS = 4_000;
const MAX_WAIT_MS = 5 * 60_000;
/** Less than this given back counts as a collection that did not help. */
const HELPED_BYTES = 1024 * 1024;
/** A tick whose event loop was busy less than this share of the time is quiet. */
const QUIET_SHARE = 0.1;
/** Load has ended after this many quiet ticks in a row (a pause in bursty load is shorter). */
const QUIET_TICKS = 2;

/** How often envd reads what V8 holds outside its heap (ArrayBuffers: socket, file, archive and event buffers). */
const EXTERNAL_TICK_MS = 250;
/**
 * A regular full collection once that grew this much since the lowest level
 * after the last one. V8 itself collects only once it grew by 64 MiB: under the
 * mixed load of the soak (issue 45) transfers and archives left 40-60 MiB of
 * dead 64 KiB-1 MiB buffers in envd's RSS at its peaks (bench/soak.mjs).
 */
const EXTERNAL_GROWTH_BYTES = 16 * 1024 * 1024;

/** The decision for buffers: collect when they grew EXTERNAL_GROWTH_BYTES above their floor since the last collection. */
export class ExternalPolicy {
  private floor = Infinity;

  shouldCollect(arrayBuffers: number): boolean {
    this.floor = Math.min(this.floor, arrayBuffers);
    return arrayBuffers >= this.floor + EXTERNAL_GROWTH_BYTES;
  }

  collected(arrayBuffers: number): void {
    this.floor = arrayBuffers;
  }
}

export interface ReclaimStep {
  /** RSS now. */
  rss: number;
  now: number;
  /** The share of the last tick the event loop was busy (its utilization, 0–1). */
  busy: number;
}

export type Collection = 'during-load' | 'after-load';

/** The decision, kept free of timers and of V8 so that it can be tested as it is. */
export class ReclaimPolicy {
  private afterLast = Infinity;
  private lowest = Infinity;
  private lastAt = 0;
  private wait = FIRST_WAIT_MS;
  private quietTicks = 0;

  /** Which collection to run now, if any. */
  shouldCollect({ rss, now, busy }: ReclaimStep): Collection | undefined {
    if (this.afterLast === Infinity) {
      // The first tick only learns where envd stands.
      this.afterLast = this.lowest = rss;
      this.lastAt = now;
      return undefined;
    }
    // V8's own memory reducer also gives memory back, after start-up for one: the floor is where RSS has been.
    this.lowest = Math.min(this.lowest, rss);
    this.quietTicks = busy < QUIET_SHARE ? this.quietTicks + 1 : 0;
    if (rss >= this.afterLast + GROWTH_BYTES) return 'during-load';
    if (rss >= this.lowest + GROWTH_BYTES && this.quietTicks >= QUIET_TICKS && now - this.lastAt >= this.wait) return 'after-load';
    return undefined;
  }

  collected({ kind, before, after, now }: { kind: Collection; before: number; after: number; now: number }): void {
    if (kind === 'during-load') {
      // Load is on: when it ends, the first collection after it will likely help.
      this.wait = FIRST_WAIT_MS;
    } else {
      this.wait = before - after < HELPED_BYTES ? Math.min(this.wait * 2, MAX_WAIT_MS) : FIRST_WAIT_MS;
      this.lowest = Math.min(this.lowest, after);
    }
    this.afterLast = after;
    this.lastAt = now;
  }
}

/** envd's RSS, or undefined when it cannot be read now (EMFILE: process.memoryUsage.rss() opens /proc/self/stat and throws). */
function rssOrUndefined(): number | undefined {
  try {
    return process.memoryUsage.rss();
  } catch {
    return undefined;
  }
}

/** V8's gc() (its options are V8's gc extension's), made callable without starting Node with --expose-gc. */
export type Gc = (options?: { type: 'major'; execution: 'sync'; flavor: 'regular' | 'last-resort' }) => void;
export function loadGc(): Gc {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as Gc;
}

/**
 * Starts the ticks; they never keep envd alive. Returns a function that stops them.
 * `trimMalloc` runs after each memory-reducing collection: what V8 freed outside its heap (socket and
 * file buffers, its helper threads' work) is free memory inside glibc's arenas, which free() returns only
 * from an arena's top (src/native/malloc-trim.ts).
 */
export function startMemoryReclaim(trimMalloc: () => void = () => {}): () => void {
  const policy = new ReclaimPolicy();
  let gc: Gc | undefined;
  let loop = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const before = rssOrUndefined();
    // Out of descriptors (reading RSS opens /proc/self/stat): this tick is skipped, never a crash.
    if (before === undefined) return;
    const loopNow = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(loopNow, loop).utilization;
    loop = loopNow;
    const kind = policy.shouldCollect({ rss: before, now: Date.now(), busy });
    if (!kind) return;
    gc ??= loadGc();
    // 'last-resort' is V8's name for the collection it runs before giving up on an allocation: memory-reducing.
    gc({ type: 'major', execution: 'sync', flavor: kind === 'after-load' ? 'last-resort' : 'regular' });
    if (kind === 'after-load') trimMalloc();
    policy.collected({ kind, before, after: rssOrUndefined() ?? before, now: Date.now() });
  }, TICK_MS);
  timer.unref();
  // Buffers die faster than RSS ticks see them: a 12 MiB archive leaves its pieces within a second.
  const external = new ExternalPolicy();
  const bufferTimer = setInterval(() => {
    // V8's own figure, read without a system call: process.memoryUsage() opens /proc and threw EMFILE out of this timer.
    if (!external.shouldCollect(getHeapStatistics().external_memory)) return;
    gc ??= loadGc();
    gc({ type: 'major', execution: 'sync', flavor: 'regular' });
    external.collected(getHeapStatistics().external_memory);
  }, EXTERNAL_TICK_MS);
  bufferTimer.unref();
  return () => {
    clearInterval(timer);
    clearInterval(bufferTimer);
  };
}
