import { join } from 'node:path';
import type { Config } from '../config.js';
import type { CgroupStats } from '../cgroups/command-cgroups.js';
import type { CgroupMode } from '../cgroups/detect.js';
import { conflict, HttpError } from '../errors.js';
import type { CommandsFigures } from '../lifecycle/metrics.js';
import { holderBinaryPath } from '../holder/binary.js';
import type { Logger } from '../logger.js';
import { HolderLink, HELLO_TIMEOUT_MS } from './holder-link.js';
import { startHolder } from './holder-process.js';
import { HolderSpawner } from './holder-spawner.js';
import { adoptCommands } from './adoption.js';
import { FinishedKeeping } from './finished-keeping.js';
import { createMeta, META_VERSION, monotonicMs, readHolderPids, readHolderStatus, type CommandMeta, type HolderPids } from './meta.js';
import { killProcessTree, killProcessTrees, signalProcess } from './kill-tree.js';
import type { PreparedCommand } from './spawn.js';
import { StateDir } from './state-dir.js';
import { RECONNECT_HELLO_TIMEOUT_MS, TrackedProcess } from './tracked-process.js';

/**
 * Finished commands are kept (for `wait`, replay, resuming, /output) up to
 * this many; past it the ones that ended first are freed.
 */
export const MAX_FINISHED_KEPT = 1000;

/** How long shutdown waits for killed commands to be reaped. */
export const KILL_ALL_WAIT_MS = 3_000;

export { FINISHED_BUDGET_SHARE } from './finished-keeping.js';
export { UNSTARTED_RECORD_WAIT_MS } from './adoption.js';

export interface StartOptions {
  background: boolean;
  timeoutMs: number;
  streamed?: boolean;
}

/**
 * The commands envd tracks, by OS pid (the shell's). Foreground and streamed
 * commands are tracked until their request has its output; background ones
 * until they are waited for or killed. Everything about a command lives in its state directory and
 * with its holder, so a restarted envd finds them all again (`open`).
 */
export class ProcessRegistry {
  private readonly byPid = new Map<number, TrackedProcess>();
  /** How long finished commands are kept, and which collected ones are leaving. */
  private readonly keeping: FinishedKeeping;
  private detached = false;
  /** Set by killAll: no command starts any more. */
  private closing = false;
  /** Starts under way: their command runs before it is tracked, so shutdown waits for them too. */
  private readonly starting = new Set<Promise<unknown>>();
  private readonly spawner: HolderSpawner;

  private constructor(
    readonly config: Config,
    readonly log: Logger,
    private readonly state: StateDir,
    /** The envd-holder binary: it runs every command, and receives large uploads (src/files/upload-splice.ts). */
    readonly holderPath: string,
    limits: { maxFinishedKept: number },
  ) {
    this.spawner = new HolderSpawner(holderPath, log);
    this.keeping = new FinishedKeeping(config, log, state, limits, {
      byPid: this.byPid,
      forget: (pid, only) => this.forget(pid, only),
      detached: () => this.detached,
    });
  }

  /** Prepares the state directory and the spool, and re-adopts the commands a previous envd left running. */
  static async open(config: Config, log: Logger, limits = { maxFinishedKept: MAX_FINISHED_KEPT }, cgroupMode?: CgroupMode): Promise<ProcessRegistry> {
    const state = await StateDir.open(config.stateDir, config.spoolDir);
    const registry = new ProcessRegistry(config, log, state, holderBinaryPath(config.stateDir), limits);
    // Before adoption: a re-adopted command finds its cgroup again (its limits, cgroup.kill, why it ended).
    if (cgroupMode) registry.useCgroups(cgroupMode);
    await adoptCommands({
      state,
      log,
      cgroupMode: registry.cgroupMode,
      follow: (id, dir, meta) => registry.follow(id, dir, meta, true),
      track: (proc) => registry.track(proc),
      stopped: () => registry.closing || registry.detached,
    });
    return registry;
  }

  get size(): number {
    return this.byPid.size;
  }

  /** cgroup mode (a cgroup per command) or proc mode; set once at start, before adoption (open). */
  private cgroupMode: CgroupMode = { mode: 'proc', why: 'cgroups not set up' };

  useCgroups(mode: CgroupMode): void {
    this.cgroupMode = mode;
  }

  /** Why `limits` cannot be honoured, or undefined in cgroup mode. */
  limitsRefused(): string | undefined {
    return this.cgroupMode.mode === 'cgroup' ? undefined : `limits need a cgroup v2 per command, and this envd runs without: ${this.cgroupMode.why}`;
  }

  commandsFigures(): CommandsFigures {
    if (this.cgroupMode.mode === 'proc') return { commands_mode: 'proc', commands_mode_reason: this.cgroupMode.why };
    const total = this.cgroupMode.cgroups.total();
    return { commands_mode: 'cgroup', commands_cpu_usec: total.cpu_usec, commands_memory_bytes: total.memory_bytes, commands_pids: total.pids };
  }

  /** What a command's cgroup has used; undefined in proc mode. */
  stats(proc: TrackedProcess): CgroupStats | undefined {
    return proc.cgroup?.cgroups.stats(proc.cgroup.id);
  }

  /** Bytes of kept output in memory (tmpfs) and in the spool, over all commands. */
  usage(): { memory: number; spool: number } {
    return this.state.usage();
  }

  /**
   * Starts a command. `streamed`: its request streams the output (POST /commands/stream), which must get
   * every byte: the holder reads nothing until that stream says LIVE_ON.
   */
  async start(prepared: PreparedCommand, options: StartOptions): Promise<TrackedProcess> {
    if (this.closing) throw new HttpError(503, 'envd is shutting down');
    const started = this.launch(prepared, options);
    this.starting.add(started);
    try {
      return await started;
    } finally {
      this.starting.delete(started);
    }
  }

  private async launch(prepared: PreparedCommand, options: StartOptions): Promise<TrackedProcess> {
    const cgroups = this.cgroupMode.mode === 'cgroup' ? this.cgroupMode.cgroups : undefined;
    if (prepared.limits && !cgroups) throw conflict(`body/limits: ${this.limitsRefused()}`);
    const slot = this.state.takeSlot();
    const { id, dir } = await this.state.createCommandDir().catch((error: unknown) => {
      this.state.releaseSlot(slot);
      throw error;
    });
    const meta: CommandMeta = {
      v: META_VERSION,
      cmd: prepared.cmd,
      ...(prepared.argv ? { args: prepared.argv } : {}),
      cwd: prepared.cwd,
      user: prepared.user.name,
      background: options.background,
      stdin: prepared.stdin,
      pty: prepared.pty ?? null,
      started_at: new Date().toISOString(),
      deadline_ms: options.timeoutMs > 0 ? monotonicMs() + options.timeoutMs : null,
      slot,
      ...(prepared.limits ? { limits: prepared.limits } : {}),
    };
    let proc: TrackedProcess;
    try {
      await createMeta(dir, meta);
      const cgroup = cgroups?.create(id, prepared.limits);
      const pids = await startHolder(
        prepared,
        {
          holderPath: this.holderPath,
          dir,
          usagePath: this.state.usagePath,
          slot,
          memoryBudget: this.config.outputMemoryBytes,
          spoolDir: this.config.spoolDir,
          spoolBudget: this.config.maxSpoolBytes,
          capBytes: this.config.maxOutputBytes,
          holdOutput: options.streamed ?? false,
          cgroup,
        },
        this.spawner,
      );
      proc = await this.follow(id, dir, meta, false, pids);
    } catch (error) {
      cgroups?.remove(id);
      await this.state.removeCommand(id);
      this.state.releaseSlot(slot);
      throw error;
    }
    this.track(proc);
    this.log.debug({ pid: proc.pid, user: prepared.user.name, background: options.background }, 'command started');
    return proc;
  }

  /** A tracked command; not one already collected and about to be forgotten (its last answer still going out). */
  get(pid: number): TrackedProcess | undefined {
    const proc = this.byPid.get(pid);
    return proc && !this.keeping.isLeaving(proc) ? proc : undefined;
  }

  list(): TrackedProcess[] {
    return this.all().filter((proc) => !this.keeping.isLeaving(proc));
  }

  /** Every command envd follows, those about to be forgotten included (shutdown and restart reach them all). */
  private all(): TrackedProcess[] {
    return [...this.byPid.values()];
  }

  /**
   * Forgets a command for good: kills it if it still runs, removes its record
   * and kept output, and frees its usage slot once its holder is gone. With
   * `only`, just when the pid still belongs to that process (not a newer one).
   */
  async forget(pid: number, only?: TrackedProcess): Promise<void> {
    const proc = this.byPid.get(pid);
    if (!proc || (only !== undefined && proc !== only)) return;
    this.byPid.delete(pid);
    this.keeping.drop(proc);
    await proc.release();
    await this.state.removeCommand(proc.id);
    this.state.releaseSlot(proc.meta.slot);
    // Empty once its tree is gone; a cgroup still busy (a straggler the shell left) stays until it empties.
    proc.cgroup?.cgroups.remove(proc.cgroup.id);
  }

  /** Shutdown: kills every tracked tree, waits (bounded) for their ends, and removes what they kept. */
  async killAll(): Promise<void> {
    if (this.detached) return;
    this.closing = true;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, KILL_ALL_WAIT_MS)));
    // A command whose holder has not answered yet already runs: it is tracked once it answers, and killed with the rest.
    await Promise.race([Promise.allSettled([...this.starting]), deadline]);
    const all = this.all();
    for (const proc of all) if (proc.cgroup) proc.cgroup.cgroups.kill(proc.cgroup.id);
    killProcessTrees(all.flatMap((proc) => proc.tree() ?? []));
    await Promise.race([Promise.all(all.map((proc) => proc.finished)), deadline]);
    clearTimeout(timer);
    await Promise.all(all.map((proc) => this.forget(proc.pid, proc)));
    this.spawner.close();
    this.state.close();
  }

  /**
   * The command's result has been handed out (its foreground request answered, its stream's `exit` sent,
   * `wait` answered): the spec's "the process is then removed from the tracked list". It is forgotten
   * once the answers still going out are, or --keep-collected later.
   */
  collect(proc: TrackedProcess, byStream = false): void {
    this.keeping.collect(proc, byStream);
  }

  /** The command with this pid for a resume by id: also one its stream collected moments ago (STREAM_RESUME_MS). */
  resumable(pid: number): TrackedProcess | undefined {
    const proc = this.byPid.get(pid);
    return proc && this.keeping.isResumable(proc) ? proc : this.get(pid);
  }

  /**
   * A result or output is being handed out (`wait` from before the command
   * ended, an attach's replay, `/output`), until the answer is out or its
   * client gone: a collection meanwhile forgets the command only when the last
   * such answer is out, so that two waiters both get the result and an
   * attacher still replaying is not cut. Call the returned function once it is over.
   */
  answering(proc: TrackedProcess): () => void {
    return this.keeping.answering(proc);
  }

  /** A restart, not a shutdown: leaves every command running with its holder, for the next envd to re-adopt. */
  detach(): void {
    this.detached = true;
    this.keeping.stopAll();
    for (const proc of this.all()) proc.detach();
    this.byPid.clear();
    this.spawner.close();
    this.state.close();
  }

  /**
   * Connects to a command's holder and follows it. `started`: the pid record from a holder's ready line
   * (re-adopted ones are read from their pid file). A holder that has just said `ready` is alive: failing
   * to connect to it is an error, not an end. A re-adopted one that does not answer is alive or gone as
   * its pid record says: alive, it is tracked as running and reconnected to; gone, it has finished.
   */
  private async follow(id: string, dir: string, meta: CommandMeta, adopted: boolean, started?: HolderPids): Promise<TrackedProcess> {
    const pids = started ?? readHolderPids(dir);
    if (!pids) throw new Error(`no pid file in ${dir}`);
    // A fast command's holder may have finished (status written, socket gone) before envd connects:
    // it is exiting, not unreachable, and its status says how the command ended.
    let finished = false;
    const connected = await HolderLink.connect(join(dir, 'sock'), adopted ? RECONNECT_HELLO_TIMEOUT_MS : HELLO_TIMEOUT_MS).catch(async (error: unknown) => {
      finished = (await readHolderStatus(dir).catch(() => undefined)) !== undefined;
      if (adopted || finished) return undefined;
      // Started, but not reachable: end it rather than track a command nobody can follow or kill.
      killProcessTree(pids.shellPid, { leaderReaped: false });
      signalProcess(pids.holderPid, 'SIGKILL');
      throw new HttpError(503, 'the command started but its holder did not answer; retry shortly', { cause: error });
    });
    const proc = new TrackedProcess({
      id,
      dir,
      meta,
      pids,
      link: connected?.link,
      reaped: connected?.hello.reaped ?? false,
      adopted,
      logEnd: connected?.hello.logEnd ?? 0,
      logger: this.log,
      // Its cgroup, if it was started in one (also after a restart: the path is the command's id).
      cgroup: this.cgroupMode.mode === 'cgroup' && this.cgroupMode.cgroups.exists(id) ? { cgroups: this.cgroupMode.cgroups, id } : undefined,
    });
    if (connected) return proc;
    if (!finished && proc.holderAlive()) void proc.reconnect();
    else await proc.completeFromStatus();
    return proc;
  }

  private track(proc: TrackedProcess): void {
    const previous = this.byPid.get(proc.pid);
    if (previous) {
      // The OS reused the pid of a finished command nobody waited for.
      this.log.warn({ pid: proc.pid, previousCmd: previous.meta.cmd, previousRunning: previous.running }, 'pid reused: forgetting the finished command that had it');
      void this.forget(proc.pid, previous);
    }
    this.byPid.set(proc.pid, proc);
    void proc.finished.then(() => this.keeping.onFinished(proc));
  }
}
