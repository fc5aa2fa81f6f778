import { join } from 'node:path';
import type { Config } from '../config.js';
import { HttpError } from '../errors.js';
import { holderBinaryPath } from '../holder/binary.js';
import type { Logger } from '../logger.js';
import { HolderLink } from './holder-link.js';
import { startHolder } from './holder-process.js';
import { HolderSpawner } from './holder-spawner.js';
import { createMeta, META_VERSION, monotonicMs, readHolderPids, readHolderStatus, readMeta, type CommandMeta, type HolderPids } from './meta.js';
import { killProcessTree, killProcessTrees } from './kill-tree.js';
import type { PreparedCommand } from './spawn.js';
import { StateDir } from './state-dir.js';
import { TrackedProcess } from './tracked-process.js';

/**
 * Finished background commands nobody has waited for are kept for `wait`, up
 * to this many; past it the oldest finished ones are forgotten.
 */
export const MAX_FINISHED_BACKGROUND = 1000;

/** How long shutdown waits for killed commands to be reaped. */
export const KILL_ALL_WAIT_MS = 3_000;

/**
 * The commands envd tracks, by OS pid (the shell's). Foreground and streamed
 * commands are tracked until their request has its output; background ones
 * until they are waited for or killed. Everything about a command lives in its state directory and
 * with its holder, so a restarted envd finds them all again (`open`).
 */
export class ProcessRegistry {
  private readonly byPid = new Map<number, TrackedProcess>();
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
    private readonly limits: { maxFinishedBackground: number },
  ) {
    this.spawner = new HolderSpawner(holderPath, log);
  }

  /** Prepares the state directory and the spool, and re-adopts the commands a previous envd left running. */
  static async open(config: Config, log: Logger, limits = { maxFinishedBackground: MAX_FINISHED_BACKGROUND }): Promise<ProcessRegistry> {
    const state = await StateDir.open(config.stateDir, config.spoolDir);
    const registry = new ProcessRegistry(config, log, state, holderBinaryPath(config.stateDir), limits);
    await registry.adopt();
    return registry;
  }

  get size(): number {
    return this.byPid.size;
  }

  /** Bytes of kept output in memory (tmpfs) and in the spool, over all commands. */
  usage(): { memory: number; spool: number } {
    return this.state.usage();
  }

  async start(prepared: PreparedCommand, options: { background: boolean; timeoutMs: number }): Promise<TrackedProcess> {
    if (this.closing) throw new HttpError(503, 'envd is shutting down');
    const started = this.launch(prepared, options);
    this.starting.add(started);
    try {
      return await started;
    } finally {
      this.starting.delete(started);
    }
  }

  private async launch(prepared: PreparedCommand, options: { background: boolean; timeoutMs: number }): Promise<TrackedProcess> {
    const slot = this.state.takeSlot();
    const { id, dir } = await this.state.createCommandDir().catch((error: unknown) => {
      this.state.releaseSlot(slot);
      throw error;
    });
    const meta: CommandMeta = {
      v: META_VERSION,
      cmd: prepared.cmd,
      cwd: prepared.cwd,
      user: prepared.user.name,
      background: options.background,
      stdin: prepared.stdin,
      pty: prepared.pty ?? null,
      started_at: new Date().toISOString(),
      deadline_ms: options.timeoutMs > 0 ? monotonicMs() + options.timeoutMs : null,
      slot,
    };
    let proc: TrackedProcess;
    try {
      await createMeta(dir, meta);
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
        },
        this.spawner,
      );
      proc = await this.follow(id, dir, meta, false, pids);
    } catch (error) {
      await this.state.removeCommand(id);
      this.state.releaseSlot(slot);
      throw error;
    }
    this.track(proc);
    this.log.debug({ pid: proc.pid, user: prepared.user.name, background: options.background }, 'command started');
    return proc;
  }

  get(pid: number): TrackedProcess | undefined {
    return this.byPid.get(pid);
  }

  list(): TrackedProcess[] {
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
    await proc.release();
    await this.state.removeCommand(proc.id);
    this.state.releaseSlot(proc.meta.slot);
  }

  /** Shutdown: kills every tracked tree, waits (bounded) for their ends, and removes what they kept. */
  async killAll(): Promise<void> {
    if (this.detached) return;
    this.closing = true;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, KILL_ALL_WAIT_MS)));
    // A command whose holder has not answered yet already runs: it is tracked once it answers, and killed with the rest.
    await Promise.race([Promise.allSettled([...this.starting]), deadline]);
    const all = this.list();
    killProcessTrees(all.flatMap((proc) => proc.tree() ?? []));
    await Promise.race([Promise.all(all.map((proc) => proc.finished)), deadline]);
    clearTimeout(timer);
    await Promise.all(all.map((proc) => this.forget(proc.pid, proc)));
    this.spawner.close();
    this.state.close();
  }

  /** A restart, not a shutdown: leaves every command running with its holder, for the next envd to re-adopt. */
  detach(): void {
    this.detached = true;
    for (const proc of this.list()) proc.detach();
    this.byPid.clear();
    this.spawner.close();
    this.state.close();
  }

  /**
   * Connects to a command's holder and follows it; a holder that is gone leaves the command finished.
   * `started`: the pid record from a holder's ready line (re-adopted ones are read from their pid file).
   * A holder that has just said `ready` is alive: failing to connect to it is an error, not an end.
   */
  private async follow(id: string, dir: string, meta: CommandMeta, adopted: boolean, started?: HolderPids): Promise<TrackedProcess> {
    const pids = started ?? readHolderPids(dir);
    if (!pids) throw new Error(`no pid file in ${dir}`);
    const connected = await HolderLink.connect(join(dir, 'sock')).catch(async (error: unknown) => {
      if (adopted || (await readHolderStatus(dir))) return undefined;
      // Started, but not reachable: end it rather than track a command nobody can follow or kill.
      killProcessTree(pids.shellPid, { leaderReaped: false });
      try {
        process.kill(pids.holderPid, 'SIGKILL');
      } catch {
        // already gone
      }
      throw new HttpError(503, 'the command started but its holder did not answer; retry shortly', { cause: error });
    });
    const proc = new TrackedProcess({
      id,
      dir,
      meta,
      pids,
      link: connected?.link,
      reaped: connected ? connected.hello.reaped : true,
      adopted,
      logEnd: connected?.hello.logEnd ?? 0,
      logger: this.log,
    });
    if (!connected) await proc.completeFromStatus();
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
    // Foreground and streamed commands are forgotten by their request once it has read the output (routes.ts).
    void proc.finished.then(() => proc.keepWhenFinished && this.evictFinished());
  }

  /**
   * Finds every command a previous envd left in the state directory: running
   * ones through their holder's socket, finished ones through the status the
   * holder wrote. Records nobody can use are removed, and so is spooled
   * output that belongs to no command.
   */
  private async adopt(): Promise<void> {
    const found: TrackedProcess[] = [];
    const ids = await this.state.listCommandIds();
    await Promise.all(
      ids.map(async (id) => {
        const dir = this.state.commandDir(id);
        const meta = readMeta(dir);
        // Written by a newer envd: not ours to judge.
        if (meta === 'newer') return;
        if (!meta) {
          // A start that never finished.
          await this.state.removeCommand(id);
          return;
        }
        try {
          found.push(await this.follow(id, dir, meta, true));
        } catch (error) {
          this.log.warn({ err: error, id }, 'could not re-adopt a command: removing its record');
          await this.state.removeCommand(id);
        }
      }),
    );
    found.sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime());
    this.state.claimSlots(found.map((proc) => proc.meta.slot));
    for (const proc of found) this.track(proc);
    const swept = await this.state.sweepSpool(new Set(found.map((proc) => proc.id)));
    if (found.length > 0 || swept > 0) {
      this.log.info({ adopted: found.length, running: found.filter((proc) => proc.running).length, sweptSpoolFiles: swept }, 're-adopted the commands of a previous envd');
    }
  }

  private evictFinished(): void {
    let finished = 0;
    for (const proc of this.byPid.values()) if (proc.keepWhenFinished && !proc.running) finished++;
    // Map order is insertion order, so the first finished entries are the oldest.
    for (const [pid, proc] of this.byPid) {
      if (finished <= this.limits.maxFinishedBackground) break;
      if (!proc.keepWhenFinished || proc.running) continue;
      finished--;
      this.log.info({ pid, cmd: proc.meta.cmd }, 'forgot an unwaited finished background command: too many kept');
      void this.forget(pid, proc);
    }
  }
}
