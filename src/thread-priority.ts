import { readdirSync, readFileSync, stat } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/**
 * envd's helper threads are niced below its main thread, which alone serves
 * every request. /health and command starts wait for one turn of the event
 * loop; the four libuv pool threads (files opened, read, closed and gzipped
 * for bulk transfers) and V8's workers (concurrent marking) compete with that
 * thread for a VM's one or two cores. Niced, they take what the main thread
 * leaves; their work still runs, only after the main thread's (issues 36, 45;
 * docs/performance.md). Linux's nice is per thread, and raising one needs no
 * privilege. ENVD_HELPER_THREAD_NICE (docs/operations.md) sets how much lower,
 * relative to the main thread's own nice value (at most 19); 0 leaves the
 * threads as they are.
 */
export const HELPER_THREAD_NICE = 10;
const LOWEST_PRIORITY = 19;

/** Threads by their names (/proc/self/task/TID/comm): libuv's pool, and V8's platform workers. */
const HELPER_NAMES = new Set(['libuv-worker', 'V8Worker']);

/** Nices envd's helper threads `nice` below the main thread; returns how many. Any failure (no /proc) leaves them as they are. */
export function niceHelperThreads(nice: number): number {
  let niced = 0;
  try {
    // Called on the main thread: 0 is this thread (Linux's setpriority and getpriority take a thread id).
    const target = Math.min(LOWEST_PRIORITY, getPriority(0) + nice);
    for (const tid of readdirSync('/proc/self/task')) {
      const name = readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      if (!HELPER_NAMES.has(name)) continue;
      setPriority(Number(tid), target);
      niced++;
    }
  } catch {
    // No /proc, or a thread gone meanwhile: priorities are a refinement, never a reason to fail.
  }
  return niced;
}

/**
 * Starts libuv's pool (it starts at its first request) and nices it and V8's
 * workers. Threads started later (a pool of more than four) inherit the main
 * thread's priority, which is unchanged.
 */
export function niceHelperThreadsOnceStarted(nice = envNice()): void {
  if (nice === 0) return;
  stat('/', () => niceHelperThreads(nice));
}

function envNice(): number {
  const given = process.env.ENVD_HELPER_THREAD_NICE;
  const value = given === undefined || given === '' ? HELPER_THREAD_NICE : Number(given);
  return Number.isInteger(value) && value >= 0 && value <= 19 ? value : HELPER_THREAD_NICE;
}
