import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../logger.js';
import { compileReadyPattern, httpAnswers, portListening } from './ready-probes.js';
import { ReadyLogSubscriber } from './ready-log.js';
import type { ReadyCheck } from './ready-schemas.js';
import type { ExitInfo } from './schemas.js';
import type { TrackedProcess } from './tracked-process.js';

/** How often a port or HTTP check is tried while a command is not ready. */
export const READY_PROBE_INTERVAL_MS = 100;
/** How long a log matcher whose holder link was lost waits before following the command again. */
const RESUBSCRIBE_MS = 500;

/** The check and its deadline, in the command's record: a restarted envd carries on with it. */
const CHECK_FILE = 'ready-check.json';
/** Written once ready: how long after its start (`after_ms`), for a restarted envd. */
const READY_FILE = 'ready-at';

export type ReadyOutcome = { ready: true; afterMs: number } | { ready: false; exit: ExitInfo };

interface StoredCheck {
  check: ReadyCheck;
  timeout_ms?: number;
}

/** One Readiness per tracked command that has a check: the hook GET /commands/{pid}/ready and services find it by. */
const byProcess = new WeakMap<TrackedProcess, Readiness>();

/**
 * Whether a started command is ready yet: pending, ready (after how long), or
 * ended first. States: pending → ready | ended, once. Past `timeoutMs` after its
 * start, a command still pending is killed (its end then settles it as ended).
 */
export class Readiness {
  private outcome: ReadyOutcome | undefined;
  private readonly waiters = new Set<(outcome: ReadyOutcome) => void>();
  private subscriber: ReadyLogSubscriber | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  private deadline: NodeJS.Timeout | undefined;

  constructor(
    readonly proc: TrackedProcess,
    readonly check: ReadyCheck,
    private readonly options: { timeoutMs?: number | undefined; guardStream?: boolean; logger: Logger; readyAfterMs?: number | undefined },
  ) {
    byProcess.set(proc, this);
    if (options.readyAfterMs !== undefined) {
      this.outcome = { ready: true, afterMs: options.readyAfterMs };
      return;
    }
    void proc.finished.then((exit) => this.settle({ ready: false, exit }));
    if (!proc.running) return;
    if ('log' in check || options.guardStream) this.follow('log' in check ? compileReadyPattern(check.log) : undefined);
    if (!('log' in check)) this.probe();
    if (options.timeoutMs !== undefined) {
      const left = options.timeoutMs - (Date.now() - proc.startedAt.getTime());
      this.deadline = setTimeout(() => this.expire(), Math.max(0, left));
    }
  }

  /** How it stands: undefined while pending. */
  get current(): ReadyOutcome | undefined {
    return this.outcome;
  }

  /** Calls `wake` once settled (at once if it is); the returned function takes it back. */
  whenSettled(wake: (outcome: ReadyOutcome) => void): () => void {
    if (this.outcome) {
      wake(this.outcome);
      return () => {};
    }
    this.waiters.add(wake);
    return () => this.waiters.delete(wake);
  }

  private follow(pattern: RegExp | undefined): void {
    const subscriber = new ReadyLogSubscriber(this.proc, pattern, () => this.becameReady(), () => {
      // The holder's link was lost and the subscriber dropped: follow again (from the start of the log) once it is back.
      this.subscriber = undefined;
      setTimeout(() => {
        if (!this.outcome && this.proc.running) this.follow(pattern);
      }, RESUBSCRIBE_MS).unref();
    });
    this.subscriber = subscriber;
    this.proc.subscribe(subscriber);
  }

  private probe(): void {
    const check = this.check;
    const attempt = async () => {
      this.probeTimer = undefined;
      if (this.outcome) return;
      const ok = 'port' in check ? await portListening(check.port) : 'http' in check ? await httpAnswers(check.http.url, check.http.status) : false;
      if (this.outcome) return;
      if (ok) this.becameReady();
      else this.probeTimer = setTimeout(() => void attempt(), READY_PROBE_INTERVAL_MS);
    };
    void attempt();
  }

  private becameReady(): void {
    if (this.outcome || !this.proc.running) return;
    const afterMs = Math.max(0, Date.now() - this.proc.startedAt.getTime());
    try {
      writeFileSync(join(this.proc.log.dir, READY_FILE), String(afterMs), { mode: 0o600 });
    } catch (error) {
      this.options.logger.warn({ err: error, pid: this.proc.pid }, 'could not record that a command is ready');
    }
    this.options.logger.info({ pid: this.proc.pid, afterMs }, 'command ready');
    this.settle({ ready: true, afterMs });
  }

  private expire(): void {
    if (this.outcome || !this.proc.running) return;
    this.options.logger.info({ pid: this.proc.pid, timeoutMs: this.options.timeoutMs }, 'command not ready within ready_timeout_ms: killing it');
    this.proc.kill();
  }

  private settle(outcome: ReadyOutcome): void {
    if (this.outcome) return;
    this.outcome = outcome;
    clearTimeout(this.probeTimer);
    clearTimeout(this.deadline);
    this.subscriber?.stop();
    // After the output that is being handed out now (a stream shows the line that made it ready
    // first), and before the command may lend a stream's socket to its holder (unsubscribe).
    setImmediate(() => {
      for (const wake of this.waiters) wake(outcome);
      this.waiters.clear();
      if (this.subscriber) this.proc.unsubscribe(this.subscriber);
      this.subscriber = undefined;
    });
  }
}

/**
 * Starts checking a command's readiness, and records the check with the
 * command so a restarted envd carries on. `guardStream`: a stream follows the
 * command and gets a `ready` event.
 */
export function watchReadiness(proc: TrackedProcess, check: ReadyCheck, options: { timeoutMs?: number | undefined; guardStream?: boolean; logger: Logger }): Readiness {
  const stored: StoredCheck = { check, ...(options.timeoutMs !== undefined ? { timeout_ms: options.timeoutMs } : {}) };
  try {
    writeFileSync(join(proc.log.dir, CHECK_FILE), JSON.stringify(stored), { mode: 0o600 });
  } catch (error) {
    options.logger.warn({ err: error, pid: proc.pid }, 'could not record the readiness check of a command');
  }
  return new Readiness(proc, check, options);
}

/**
 * A command's readiness: the one being checked, or (a command a previous envd
 * started) the one its record names, checked again from here. Undefined for a
 * command started without `ready`.
 */
export function readinessOf(proc: TrackedProcess, logger: Logger): Readiness | undefined {
  const known = byProcess.get(proc);
  if (known) return known;
  let stored: StoredCheck;
  try {
    stored = JSON.parse(readFileSync(join(proc.log.dir, CHECK_FILE), 'utf8')) as StoredCheck;
  } catch {
    return undefined;
  }
  const readyFile = join(proc.log.dir, READY_FILE);
  const readyAfterMs = existsSync(readyFile) ? Number(readFileSync(readyFile, 'utf8')) || 0 : undefined;
  return new Readiness(proc, stored.check, { timeoutMs: stored.timeout_ms, logger, readyAfterMs });
}
