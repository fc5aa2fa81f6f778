import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { StateDir } from './state-dir.js';
import type { TrackedProcess } from './tracked-process.js';

/**
 * Collected finished commands are freed early (those that ended first) while
 * kept output holds more than this share of the memory tier or of the spool:
 * running commands come first.
 */
export const FINISHED_BUDGET_SHARE = 0.75;

/**
 * How long a command collected by its stream (its `exit` event went out) can
 * still be resumed by its resume id. "Went out" means handed to the kernel: a
 * proxy in between (the control plane's) may have taken the bytes and lost
 * its connection to the client before passing the `exit` on, and the client's
 * reconnect must then get the rest instead of a 404. Hidden from everything
 * else meanwhile (`wait`, lists, /output), as any collected command is.
 */
export const STREAM_RESUME_MS = 10_000;

/** What the keeping of finished commands needs of the registry. */
export interface KeptCommands {
  /** The command that has this pid now (a finished one's pid may be another's already). */
  byPid: ReadonlyMap<number, TrackedProcess>;
  forget(pid: number, only: TrackedProcess): Promise<void>;
  /** Handed over to the next envd: nothing is freed any more. */
  detached(): boolean;
}

/**
 * How long finished commands are kept, for `wait`, replay, resuming and
 * /output: --keep-finished after their end until collected, --keep-collected
 * after their collection (once the answers still going out are out), and
 * earlier when too many are kept or their output crowds the budgets.
 */
export class FinishedKeeping {
  /** When each finished command is freed (--keep-finished after its end, or --keep-collected after its collection). */
  private readonly expiries = new Map<TrackedProcess, NodeJS.Timeout>();
  /** Answers being handed out (wait, attach, /output), per command: a collected command is forgotten once none is left. */
  private readonly answers = new Map<TrackedProcess, number>();
  /** Collected, forgotten once their answers in flight are out: no longer found, listed or waitable. */
  private readonly leaving = new Set<TrackedProcess>();
  /** Collected by their stream: resumable by id for STREAM_RESUME_MS (at least). */
  private readonly resumable = new Set<TrackedProcess>();

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly state: StateDir,
    private readonly limits: { maxFinishedKept: number },
    private readonly commands: KeptCommands,
  ) {}

  /** Collected and about to be forgotten (its last answer still going out): found by nobody any more. */
  isLeaving(proc: TrackedProcess): boolean {
    return this.leaving.has(proc);
  }

  /** Collected by its stream, and still resumable by its resume id (STREAM_RESUME_MS). */
  isResumable(proc: TrackedProcess): boolean {
    return this.resumable.has(proc);
  }

  /** The command is being forgotten: nothing of it is kept here any more. */
  drop(proc: TrackedProcess): void {
    clearTimeout(this.expiries.get(proc));
    this.expiries.delete(proc);
    this.leaving.delete(proc);
    this.resumable.delete(proc);
  }

  /** A restart: no timer may forget a command the next envd re-adopts. */
  stopAll(): void {
    for (const timer of this.expiries.values()) clearTimeout(timer);
    this.expiries.clear();
  }

  /** See ProcessRegistry.collect. */
  collect(proc: TrackedProcess, byStream = false): void {
    proc.collected = true;
    if (byStream) this.resumable.add(proc);
    // Gone for every request from now on, even while an answer is still going out.
    if (this.config.keepCollectedMs === 0) this.leaving.add(proc);
    if (!this.answers.has(proc)) this.expireCollected(proc);
  }

  /** See ProcessRegistry.answering. */
  answering(proc: TrackedProcess): () => void {
    this.answers.set(proc, (this.answers.get(proc) ?? 0) + 1);
    let over = false;
    return () => {
      if (over) return;
      over = true;
      const left = this.answers.get(proc)! - 1;
      if (left > 0) return void this.answers.set(proc, left);
      this.answers.delete(proc);
      if (proc.collected) this.expireCollected(proc);
    };
  }

  /**
   * A command has ended: nobody has collected it yet, so it is freed --keep-finished after its end (0: not
   * for time), or earlier if too many or too much is kept.
   */
  onFinished(proc: TrackedProcess): void {
    if (this.commands.byPid.get(proc.pid) !== proc || this.commands.detached()) return;
    this.evictFinished();
    // Collected meanwhile: --keep-collected rules it.
    if (this.config.keepFinishedMs === 0 || proc.collected) return;
    const left = Math.max(0, (proc.endedAt?.getTime() ?? Date.now()) + this.config.keepFinishedMs - Date.now());
    this.forgetIn(proc, left);
  }

  /** A collected command is forgotten now (--keep-collected 0), or that long from now. */
  private expireCollected(proc: TrackedProcess): void {
    if (this.commands.byPid.get(proc.pid) !== proc || this.commands.detached()) return;
    clearTimeout(this.expiries.get(proc));
    this.expiries.delete(proc);
    const keep = Math.max(this.config.keepCollectedMs, this.resumable.has(proc) ? STREAM_RESUME_MS : 0);
    if (keep === 0) return void this.commands.forget(proc.pid, proc);
    this.forgetIn(proc, keep);
    this.evictFinished();
  }

  private forgetIn(proc: TrackedProcess, ms: number): void {
    const timer = setTimeout(() => void this.commands.forget(proc.pid, proc), ms);
    timer.unref();
    this.expiries.set(proc, timer);
  }

  /**
   * Frees finished commands while more than the limit are kept (collected
   * ones first, then those that ended first), and collected ones while kept
   * output crowds the budgets: a result nobody has collected yet is not freed
   * for space, running commands' output comes before what was handed out.
   */
  private evictFinished(): void {
    const ended = (proc: TrackedProcess) => proc.endedAt?.getTime() ?? 0;
    const finished = [...this.commands.byPid.values()].filter((proc) => !proc.running && !this.leaving.has(proc));
    // This runs as each command ends: the common case (few kept, budgets free) must cost no sort.
    if (finished.length <= this.limits.maxFinishedKept && !finished.some((proc) => proc.collected)) return;
    // What is kept now, less what the commands freed here held (their files go asynchronously).
    const usage = this.state.usage();
    const crowded = () => usage.memory > this.config.outputMemoryBytes * FINISHED_BUDGET_SHARE || usage.spool > this.config.maxSpoolBytes * FINISHED_BUDGET_SHARE;
    if (finished.length <= this.limits.maxFinishedKept && !crowded()) return;
    finished.sort((a, b) => Number(b.collected) - Number(a.collected) || ended(a) - ended(b));
    let count = finished.length;
    for (const proc of finished) {
      const tooMany = count > this.limits.maxFinishedKept;
      if (!tooMany && !(proc.collected && crowded())) break;
      count--;
      const held = this.state.slotUsage(proc.meta.slot);
      usage.memory -= held.memory;
      usage.spool -= held.spool;
      this.log.info({ pid: proc.pid, cmd: proc.meta.cmd }, tooMany ? 'freed a finished command early: too many kept' : 'freed a finished command early: kept output crowds the budgets');
      void this.commands.forget(proc.pid, proc);
    }
  }
}
