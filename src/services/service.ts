import type { Logger } from '../logger.js';
import { readinessOf, watchReadiness } from '../commands/readiness.js';
import type { ProcessRegistry } from '../commands/registry.js';
import type { ExitInfo } from '../commands/schemas.js';
import type { PreparedCommand } from '../commands/spawn.js';
import type { TrackedProcess } from '../commands/tracked-process.js';
import { nextBackoff } from './backoff.js';
import type { ServiceDefinition, ServiceRecord, ServiceState } from './schemas.js';
import type { StoredService } from './store.js';

/** How long a stopped service's run has after SIGTERM before SIGKILL. */
export const STOP_GRACE_MS = 5_000;

/** What a service needs from the manager that holds all of them. */
export interface ServiceHost {
  processes: ProcessRegistry;
  logger: Logger;
  prepare(definition: ServiceDefinition): Promise<PreparedCommand>;
  /** Whether its dependencies are up; `broken`: they never will be (missing, in a cycle, broken themselves). */
  dependencies(service: Service): { up: true } | { up: false; waitingFor: string[] } | { up: false; broken: string };
  /** The service changed: it is written down, and (its state moved) services waiting for it look again. */
  changed(service: Service, stateMoved: boolean): void;
}

type LastExit = NonNullable<ServiceRecord['last_exit']>;

/**
 * One supervised command. States (docs/api.md, "Services"): waiting →
 * starting | running → ready → backoff → … | failed | stopped; every change
 * goes through transition(), which tells the host. Each run is a tracked
 * background command (holder-owned: it outlives envd, and a restarted envd
 * re-adopts it and hands it back here with restore()).
 */
export class Service {
  state: ServiceState = 'stopped';
  /** The current (or last) run. */
  run: TrackedProcess | undefined;
  restarts = 0;
  lastExit: LastExit | null = null;
  error: string | null = null;
  readyAfterMs: number | null = null;
  /** The delay in force: the last back-off, doubled on the next quick end. */
  backoffMs: number | undefined;
  /** Asked to run, and not stopped since. */
  wanted = false;
  private timer: NodeJS.Timeout | undefined;
  /** Counts starts and stops: a start or readiness that finishes after a newer one is ignored. */
  private generation = 0;
  private closed = false;

  constructor(
    readonly name: string,
    public definition: ServiceDefinition,
    private readonly host: ServiceHost,
  ) {}

  /**
   * Wants it up: starts it once its dependencies are up (at once if they are).
   * Resolves once a start begun here has its command running (or failed).
   */
  async start(): Promise<void> {
    this.wanted = true;
    if (this.state === 'starting' || this.state === 'ready' || this.state === 'running') return;
    clearTimeout(this.timer);
    this.backoffMs = undefined;
    await this.tryStart();
  }

  /** Another service changed: a waiting one looks at its dependencies again. */
  dependencyChanged(): void {
    if (this.wanted && this.state === 'waiting') void this.tryStart();
  }

  /**
   * Stops it for good (no restart): SIGTERM to its process group, SIGKILL
   * STOP_GRACE_MS later; resolves once the run has ended.
   */
  async stop(): Promise<void> {
    this.wanted = false;
    this.generation++;
    clearTimeout(this.timer);
    const proc = this.run;
    if (!proc?.running) return this.transition('stopped');
    proc.signal('SIGTERM');
    const grace = setTimeout(() => proc.kill(), STOP_GRACE_MS);
    await proc.finished;
    clearTimeout(grace);
  }

  /** It cannot start, for a reason that a restart would not change (a boot file's cycle or missing dependency). */
  fail(error: string): void {
    this.wanted = false;
    this.transition('failed', error);
  }

  /** No more starts or transitions (envd is closing, or the service is deleted). */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  /** After a restart of envd: what the previous one recorded, and its run if it is still tracked. */
  restore(stored: StoredService, run: TrackedProcess | undefined): void {
    this.restarts = stored.restarts;
    this.lastExit = stored.last_exit;
    this.wanted = stored.wanted;
    if (!stored.wanted) {
      this.run = run;
      if (run?.running) run.kill(); // a stop that a previous envd did not see through
      this.transition(stored.state === 'failed' ? 'failed' : 'stopped', stored.error);
      return;
    }
    if (run) this.follow(run, false);
    else void this.tryStart();
  }

  record(): ServiceRecord {
    return {
      name: this.name,
      state: this.state,
      pid: this.run && this.state !== 'stopped' && this.state !== 'failed' && this.state !== 'backoff' && this.state !== 'waiting' ? this.run.pid : null,
      restarts: this.restarts,
      last_exit: this.lastExit,
      started_at: this.run ? this.run.startedAt.toISOString() : null,
      ready_after_ms: this.readyAfterMs,
      backoff_ms: this.state === 'backoff' ? (this.backoffMs ?? null) : null,
      error: this.error,
      definition: this.definition,
    };
  }

  stored(): StoredService {
    return {
      v: 1,
      definition: this.definition,
      wanted: this.wanted,
      state: this.state,
      run: this.run ? { pid: this.run.pid, id: this.run.id } : null,
      restarts: this.restarts,
      last_exit: this.lastExit,
      error: this.error,
    };
  }

  private async tryStart(): Promise<void> {
    if (this.closed || !this.wanted) return;
    const deps = this.host.dependencies(this);
    if ('broken' in deps) {
      this.wanted = false;
      return this.transition('failed', deps.broken);
    }
    if ('waitingFor' in deps) return this.transition('waiting', `waiting for ${deps.waitingFor.join(', ')}`);
    await this.launch();
  }

  private async launch(): Promise<void> {
    const generation = ++this.generation;
    this.transition('starting');
    let proc: TrackedProcess;
    try {
      proc = await this.host.processes.start(await this.host.prepare(this.definition), { background: true, timeoutMs: 0 });
    } catch (error) {
      if (generation !== this.generation || this.closed) return;
      this.host.logger.warn({ err: error, service: this.name }, 'a service could not start');
      // As a run that failed at once: its restart policy decides (a slot or a user may be there next time).
      return this.ended(undefined, `could not start: ${(error as Error).message}`);
    }
    this.follow(proc, true);
    if (generation !== this.generation || this.closed) void this.stopRun(proc);
  }

  /** A run started meanwhile by a launch that a stop overtook. */
  private async stopRun(proc: TrackedProcess): Promise<void> {
    proc.signal('SIGTERM');
    const grace = setTimeout(() => proc.kill(), STOP_GRACE_MS);
    await proc.finished;
    clearTimeout(grace);
  }

  /** Follows a run: its readiness, then its end. `fresh`: started here (its readiness check starts now). */
  private follow(proc: TrackedProcess, fresh: boolean): void {
    const previous = this.run;
    // The previous run's output stays readable until a new run replaces it; then it is collected like a waited command.
    if (previous && previous !== proc) this.host.processes.collect(previous);
    this.run = proc;
    this.readyAfterMs = null;
    this.error = null;
    const generation = this.generation;
    const { ready, ready_timeout_ms: timeoutMs } = this.definition;
    if (ready) {
      const readiness = (!fresh && readinessOf(proc, this.host.logger)) || watchReadiness(proc, ready, { timeoutMs, logger: this.host.logger });
      if (proc.running) this.transition('starting');
      readiness.whenSettled((outcome) => {
        if (!outcome.ready || this.run !== proc || generation !== this.generation || !proc.running || this.closed) return;
        this.readyAfterMs = outcome.afterMs;
        this.transition('ready');
      });
    } else if (proc.running) {
      this.transition('running');
    }
    void proc.finished.then((exit) => {
      if (this.run === proc) this.ended(exit);
    });
  }

  /** The current run ended (or could not start): stopped, failed, or a restart after the back-off. */
  private ended(exit: ExitInfo | undefined, error: string | null = null): void {
    if (this.closed) return;
    if (exit) this.lastExit = { exit_code: exit.exit_code, signal: exit.signal ?? null, reason: exit.reason };
    if (!this.wanted) return this.transition('stopped');
    const failed = !exit || exit.exit_code !== 0 || exit.reason !== 'exited';
    const policy = this.definition.restart ?? 'on-failure';
    if (policy === 'always' || (policy === 'on-failure' && failed)) {
      const upFor = exit && this.run ? (this.run.endedAt?.getTime() ?? Date.now()) - this.run.startedAt.getTime() : 0;
      this.backoffMs = nextBackoff(this.backoffMs, upFor);
      this.transition('backoff', error);
      this.timer = setTimeout(() => {
        if (this.state !== 'backoff' || !this.wanted) return;
        this.restarts++;
        void this.tryStart();
      }, this.backoffMs);
      return;
    }
    this.wanted = false;
    this.transition(failed ? 'failed' : 'stopped', error);
  }

  private transition(to: ServiceState, error: string | null = null): void {
    if (this.closed) return;
    const from = this.state;
    this.state = to;
    this.error = error;
    if (from !== to) this.host.logger.info({ service: this.name, from, to, pid: this.run?.pid, ...(error ? { error } : {}) }, 'service state');
    // Waiting services look again only when a state moved: one waiting service waking another that stays waiting would never end.
    this.host.changed(this, from !== to);
  }
}
