import type { ServerResponse } from 'node:http';
import type { TrackedProcess } from './tracked-process.js';

/** How a parked `wait` came back: its command ended, its client hung up, or its `timeout_ms` passed. */
export type WaitOutcome = 'finished' | 'gone' | 'expired';

/**
 * The `wait` requests parked on each running command. One reaction on the
 * command's `finished` wakes them all; each request leaves its set when its
 * client hangs up, so an abandoned long-poll holds nothing (its request,
 * reply and socket included) once its client is gone, rather than until the
 * command ends (issue 36: 10,000 abandoned waits held 75 MiB). A race of
 * `finished` against the hang-up would not do: every race leaves a reaction on
 * `finished` that lives as long as the command.
 */
const parked = new WeakMap<TrackedProcess, Set<(outcome: WaitOutcome) => void>>();

/**
 * Resolves when the command has finished, when the client of `res` has gone
 * (nobody is left to answer), or when `timeoutMs` (if given) has passed first;
 * the command runs on in the last two cases.
 */
export function parkUntilFinished(proc: TrackedProcess, res: ServerResponse, timeoutMs: number | undefined): Promise<WaitOutcome> {
  if (!proc.running) return Promise.resolve('finished');
  if (res.destroyed) return Promise.resolve('gone');
  let waiters = parked.get(proc);
  if (!waiters) {
    const set = new Set<(outcome: WaitOutcome) => void>();
    parked.set(proc, set);
    void proc.finished.then(() => {
      parked.delete(proc);
      for (const wake of set) wake('finished');
    });
    waiters = set;
  }
  const own = waiters;
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const wake = (outcome: WaitOutcome) => {
      own.delete(wake);
      res.off('close', onClose);
      clearTimeout(timer);
      resolve(outcome);
    };
    const onClose = () => wake('gone');
    own.add(wake);
    res.once('close', onClose);
    if (timeoutMs !== undefined) timer = setTimeout(() => wake('expired'), timeoutMs);
  });
}
