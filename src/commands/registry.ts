import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { startCommand, type PreparedCommand } from './spawn.js';
import { TrackedProcess } from './tracked-process.js';

/**
 * Finished background commands nobody has waited for are kept for `wait`, up
 * to this many; past it the oldest finished ones are forgotten.
 */
export const MAX_FINISHED_BACKGROUND = 1000;

/** How long shutdown waits for killed commands to be reaped. */
export const KILL_ALL_WAIT_MS = 3_000;

/**
 * The processes envd started and still tracks, by OS pid (the shell's).
 * Foreground and streamed commands are tracked while they run; background
 * ones until they are waited for or killed.
 */
export class ProcessRegistry {
  private readonly byPid = new Map<number, TrackedProcess>();

  constructor(
    readonly config: Config,
    readonly log: Logger,
    private readonly limits = { maxFinishedBackground: MAX_FINISHED_BACKGROUND },
  ) {}

  get size(): number {
    return this.byPid.size;
  }

  async start(prepared: PreparedCommand, options: { background: boolean; timeoutMs: number }): Promise<TrackedProcess> {
    const { subprocess } = await startCommand(prepared);
    const proc = new TrackedProcess(
      subprocess,
      { cmd: prepared.cmd, cwd: prepared.cwd, user: prepared.user.name, background: options.background, stdin: prepared.stdin },
      { maxOutputBytes: this.config.maxOutputBytes, timeoutMs: options.timeoutMs, logger: this.log },
    );
    const previous = this.byPid.get(proc.pid);
    if (previous) {
      // The OS reused the pid of a finished command nobody waited for.
      this.log.warn({ pid: proc.pid, previousCmd: previous.spec.cmd, previousRunning: previous.running }, 'pid reused: forgetting the finished command that had it');
      this.byPid.delete(proc.pid);
    }
    this.byPid.set(proc.pid, proc);
    this.log.debug({ pid: proc.pid, user: prepared.user.name, background: options.background }, 'command started');
    void proc.finished.then(() => (options.background ? this.evictFinished() : this.forget(proc.pid, proc)));
    return proc;
  }

  get(pid: number): TrackedProcess | undefined {
    return this.byPid.get(pid);
  }

  list(): TrackedProcess[] {
    return [...this.byPid.values()];
  }

  /** Forgets a pid; with `only`, just when the pid still belongs to that process (not to a newer one). */
  forget(pid: number, only?: TrackedProcess): void {
    if (only === undefined || this.byPid.get(pid) === only) this.byPid.delete(pid);
  }

  /** Kills every tracked tree (leftovers of finished ones too) and waits, bounded, for the shells to be reaped. */
  async killAll(): Promise<void> {
    const all = this.list();
    for (const proc of all) proc.kill();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, KILL_ALL_WAIT_MS)));
    await Promise.race([Promise.all(all.map((proc) => proc.finished)), deadline]);
    clearTimeout(timer);
  }

  private evictFinished(): void {
    let finished = 0;
    for (const proc of this.byPid.values()) if (proc.spec.background && !proc.running) finished++;
    // Map order is insertion order, so the first finished entries are the oldest.
    for (const [pid, proc] of this.byPid) {
      if (finished <= this.limits.maxFinishedBackground) break;
      if (!proc.spec.background || proc.running) continue;
      this.byPid.delete(pid);
      finished--;
      this.log.info({ pid, cmd: proc.spec.cmd }, 'forgot an unwaited finished background command: too many kept');
    }
  }
}
