import { execFile } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import type { FastifyBaseLogger } from 'fastify';

/** The guest may lag the host by this much before /init sets its clock. */
export const MAX_BEHIND_MS = 50;
/** The guest may lead the host by this much (request latency makes it look ahead) before /init sets its clock. */
export const MAX_AHEAD_MS = 5_000;
/** A clock setter that has not finished by then has failed. */
const SET_CLOCK_TIMEOUT_MS = 2_000;

/** Sets the system clock to an epoch time in milliseconds. Injected so that tests never touch the real clock. */
export type ClockSetter = (epochMs: number) => Promise<void>;

export type ClockDecision = 'set' | 'in-sync' | 'stale';

/**
 * Whether a host timestamp should set the guest clock. Pure: the caller
 * reads the guest clock and remembers the last accepted timestamp.
 * A timestamp older than the last accepted one comes from a delayed or
 * retried /init and would move the clock backwards: it is ignored.
 */
export function decideClockChange(guestNowMs: number, hostTimestampMs: number, lastAppliedMs: number | undefined): ClockDecision {
  if (lastAppliedMs !== undefined && hostTimestampMs < lastAppliedMs) return 'stale';
  const behind = hostTimestampMs - guestNowMs;
  if (behind > MAX_BEHIND_MS || -behind > MAX_AHEAD_MS) return 'set';
  return 'in-sync';
}

/**
 * The real setter: `envd-holder --set-clock <seconds.fraction>` (clock_settime;
 * Node has no binding for it, and an image may have no `date` that takes
 * `-s @seconds`). Needs root or CAP_SYS_TIME.
 */
export function systemClockSetter(holderPath: string): ClockSetter {
  return (epochMs) =>
    new Promise((resolve, reject) => {
      const seconds = (epochMs / 1000).toFixed(3);
      execFile(holderPath, ['--set-clock', seconds], { timeout: SET_CLOCK_TIMEOUT_MS, env: {} }, (error, _stdout, stderr) => {
        if (error) reject(new Error(`setting the clock to ${seconds} failed: ${String(stderr).trim() || error.message}`, { cause: error }));
        else resolve();
      });
    });
}

/**
 * Applies /init timestamps to the guest clock. Remembers the newest accepted
 * timestamp (set or not) so a late one never rolls the clock back, and runs
 * setters one after another so that two /init calls cannot finish out of order
 * and leave the older time in place.
 */
export class ClockSync {
  #lastAppliedMs: number | undefined;
  #queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly setClock: ClockSetter,
    private readonly log: FastifyBaseLogger,
    // The guest's wall clock: reading it is the point here, it is what we correct.
    private readonly guestNow: () => number = Date.now,
  ) {}

  get lastAppliedMs(): number | undefined {
    return this.#lastAppliedMs;
  }

  /**
   * Decides at once (synchronously, so concurrent /init calls see each other's
   * timestamps) and returns a promise for the setting, which never rejects: a
   * guest that cannot set its clock (not root) still initialises, with a warning.
   */
  sync(hostTimestampMs: number): { decision: ClockDecision; done: Promise<void> } {
    const guestMs = this.guestNow();
    const decision = decideClockChange(guestMs, hostTimestampMs, this.#lastAppliedMs);
    if (decision === 'stale') {
      this.log.info({ timestamp: new Date(hostTimestampMs).toISOString(), last: new Date(this.#lastAppliedMs!).toISOString() }, 'ignoring a timestamp older than the last applied one');
      return { decision, done: Promise.resolve() };
    }
    this.#lastAppliedMs = hostTimestampMs;
    if (decision === 'in-sync') return { decision, done: Promise.resolve() };

    // The host's time moves on while earlier setters run: add the (monotonic) time elapsed since the decision.
    const decidedAt = performance.now();
    const run = async () => {
      const target = hostTimestampMs + (performance.now() - decidedAt);
      try {
        await this.setClock(target);
        this.log.info({ offsetMs: Math.round(hostTimestampMs - guestMs), to: new Date(target).toISOString() }, 'guest clock set from the /init timestamp');
      } catch (error) {
        this.log.warn({ err: error, offsetMs: Math.round(hostTimestampMs - guestMs) }, 'cannot set the guest clock (envd needs root or CAP_SYS_TIME); continuing with the clock as it is');
      }
    };
    const done = this.#queue.then(run);
    this.#queue = done;
    return { decision, done };
  }
}
