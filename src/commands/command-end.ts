import { existsSync, statSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import type { Truncation } from '../holder/protocol.js';
import type { Logger } from '../logger.js';
import type { KeptLog } from './kept-log.js';
import { readHolderStatus } from './meta.js';
import type { ExitInfo } from './schemas.js';
import { RECONNECT_BACKOFF_MS } from './states/holder-life.js';
import type { CommandCgroups } from '../cgroups/command-cgroups.js';

/** The exit code a timed-out command reports, as coreutils `timeout` does. */
export const TIMEOUT_EXIT_CODE = 124;
/** How long a status file that exists but cannot be read (EMFILE) is retried before the command counts as lost. */
const STATUS_READ_PATIENCE_MS = 60_000;

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, number]) => [number, name]));

/** How a command ended, as its holder said (EXIT) or recorded (its status file). */
export interface RecordedEnd {
  exitCode: number;
  signal: number;
  logEnd: number;
  truncated?: Truncation;
}

/**
 * How a command whose holder went without an EXIT ended: its status file, or,
 * without one, exit code -1 (reported as 1), or SIGKILL when envd forgot it on
 * request (DELETE SIGKILLed the tree and the holder with it, which then had no
 * time to record the end).
 */
export async function readRecordedEnd(dir: string, log: KeptLog, { logger, pid, forgotten, quiet }: { logger: Logger; pid: number; forgotten: () => boolean; quiet: boolean }): Promise<RecordedEnd> {
  const status = await readStatusPatiently(dir).catch((error: unknown) => {
    logger.error({ err: error, pid }, 'could not read the status file of a command');
    return undefined;
  });
  if (status) return status;
  const killed = forgotten();
  if (!quiet && !killed) logger.warn({ pid }, 'the holder of a command ended without recording its exit: reporting exit code 1');
  return { exitCode: -1, signal: killed ? constants.signals.SIGKILL : 0, logEnd: await log.size() };
}

/** What envd and the command's cgroup know of why a command ended, beyond its exit status. */
export interface EndCauses {
  timedOut: boolean;
  /** A request ended it: DELETE, the client of a foreground command or stream gone. */
  killed: boolean;
  oomKilled: boolean;
  pidsExhausted: boolean;
}

/**
 * Why it ended, from what this envd saw and the markers in the state directory
 * (tmpfs; one written before an envd restart counts). Asked with existsSync: a
 * missing file costs no error object (an fs.promises.access that fails builds
 * one; two per command were ~10 % of envd's CPU per command).
 */
export function endCauses(dir: string, seen: { timedOut: boolean; killed: boolean }, cgroup: { cgroups: CommandCgroups; id: string } | undefined): EndCauses {
  const timedOut = seen.timedOut || existsSync(join(dir, 'timed_out'));
  const killed = seen.killed || existsSync(join(dir, 'killed'));
  const cgroupEnd = cgroup ? cgroup.cgroups.end(cgroup.id) : { oomKilled: false, pidsExhausted: false };
  return { timedOut, killed, ...cgroupEnd };
}

/**
 * How the command ended, as the API reports it. The reason says why, most
 * telling first: what envd was asked to do (timeout, kill), then what the
 * kernel did (the OOM killer, a full pids.max), then the status itself.
 */
export function describeExit(exitCode: number, signal: number, causes: EndCauses): ExitInfo {
  if (causes.timedOut) return { exit_code: TIMEOUT_EXIT_CODE, reason: 'timed_out', timed_out: true };
  const status = signal > 0 ? { exit_code: 128 + signal, signal: SIGNAL_NAMES.get(signal) ?? `SIG${signal}` } : { exit_code: exitCode < 0 ? 1 : exitCode };
  const reason = causes.killed ? 'killed' : causes.oomKilled ? 'oom_killed' : causes.pidsExhausted && (signal > 0 || exitCode !== 0) ? 'pids_exhausted' : signal > 0 ? 'signaled' : 'exited';
  return { ...status, reason };
}

/** When the holder wrote its status (the command's end, for one that ended while envd was down); now if it cannot tell. */
export function statusTime(dir: string): Date {
  try {
    return statSync(join(dir, 'status'), { throwIfNoEntry: false })?.mtime ?? new Date();
  } catch {
    return new Date();
  }
}

/**
 * The holder's status file, read again with back-off while it cannot be read
 * (out of descriptors): a status that exists must not be taken for none,
 * which would report the command as lost.
 */
async function readStatusPatiently(dir: string): ReturnType<typeof readHolderStatus> {
  const deadline = Date.now() + STATUS_READ_PATIENCE_MS;
  for (let delay: number = RECONNECT_BACKOFF_MS.first; ; delay = Math.min(delay * 2, RECONNECT_BACKOFF_MS.max)) {
    try {
      return await readHolderStatus(dir);
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
