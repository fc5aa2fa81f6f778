import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config.js';
import type { CgroupStats } from '../cgroups/command-cgroups.js';
import type { CgroupMode } from '../cgroups/detect.js';
import { conflict, HttpError } from '../errors.js';
import type { CommandsFigures } from '../lifecycle/metrics.js';
import { holderBinaryPath } from '../holder/binary.js';
import type { Logger } from '../logger.js';
import { HolderLink, HELLO_TIMEOUT_MS } from './holder-link.js';
import { READY_TIMEOUT_MS, startHolder } from './holder-process.js';
import { HolderSpawner } from './holder-spawner.js';
import { createMeta, META_VERSION, monotonicMs, readHolderPids, readHolderStatus, readMeta, type CommandMeta, type HolderPids } from './meta.js';
import { killProcessTree, killProcessTrees, signalProcess } from './kill-tree.js';
import type { PreparedCommand } from './spawn.js';
import { StateDir } from './state-dir.js';
import { RECONNECT_HELLO_TIMEOUT_MS, TrackedProcess } from './tracked-process.js';

/**
 * Finished commands are kept (for `wait`, replay, resuming, /output) up to
 * this many; past it the ones that ended first are freed.
 */
export const MAX_FINISHED_KEPT = 1000;

/**
 * Collected finished commands are freed early (those that ended first) while
 * kept output holds more than this share of the memory tier or of the spool:
 * running commands come first.
 */
export const FINISHED_BUDGET_SHARE = 0.75;

/** How long shutdown waits for killed commands to be reaped. */
export const KILL_ALL_WAIT_MS = 3_000;

/**
 * A record without a pid file is a start a previous envd did not see
 * through: its holder may still come up (the spawner starts what it was
 * sent) and write one. It is waited for this long after the record was
 * written, a little more than envd gives a holder to say `ready`, before the
 * record is taken for a start that never happened.
 */
export const UNSTARTED_RECORD_WAIT_MS = READY_TIMEOUT_MS + 2_000;
const UNSTARTED_RECORD_POLL_MS = 100;

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
  /** When each finished command is freed (--keep-finished after its end, or --keep-collected after its collection). */
  private readonly expiries = new Map<TrackedProcess, NodeJS.Timeout>();
  /** Answers being handed out (wait, attach, /output), per command: a collected command is forgotten once none is left. */
  private readonly answers = new Map<TrackedProcess, number>();
  /** Collected, forgotten once their answers in flight are out: no longer found, listed or waitable. */
  private readonly leaving = new Set<TrackedProcess>();
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
    private readonly limits: { maxFinishedKept: number },
  ) {
    this.spawner = new HolderSpawner(holderPath, log);
  }

  /** Prepares the state directory and the spool, and re-adopts the commands a previous envd left running. */
  static async open(config: Config, log: Logger, limits = { maxFinishedKept: MAX_FINISHED_KEPT }, cgroupMode?: CgroupMode): Promise<ProcessRegistry> {
    const state = await StateDir.open(config.stateDir, config.spoolDir);
    const registry = new ProcessRegistry(config, log, state, holderBinaryPath(config.stateDir), limits);
    // Before adoption: a re-adopted command finds its cgroup again (its limits, cgroup.kill, why it ended).
    if (cgroupMode) registry.useCgroups(cgroupMode);
    await registry.adopt();
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
    return proc && !this.leaving.has(proc) ? proc : undefined;
  }

  list(): TrackedProcess[] {
    return this.all().filter((proc) => !this.leaving.has(proc));
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
    clearTimeout(this.expiries.get(proc));
    this.expiries.delete(proc);
    this.leaving.delete(proc);
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
  collect(proc: TrackedProcess): void {
    proc.collected = true;
    // Gone for every request from now on, even while an answer is still going out.
    if (this.config.keepCollectedMs === 0) this.leaving.add(proc);
    if (!this.answers.has(proc)) this.expireCollected(proc);
  }

  /**
   * A result or output is being handed out (`wait` from before the command
   * ended, an attach's replay, `/output`), until the answer is out or its
   * client gone: a collection meanwhile forgets the command only when the last
   * such answer is out, so that two waiters both get the result and an
   * attacher still replaying is not cut. Call the returned function once it is over.
   */
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

  /** A collected command is forgotten now (--keep-collected 0), or that long from now. */
  private expireCollected(proc: TrackedProcess): void {
    if (this.byPid.get(proc.pid) !== proc || this.detached) return;
    clearTimeout(this.expiries.get(proc));
    this.expiries.delete(proc);
    if (this.config.keepCollectedMs === 0) return void this.forget(proc.pid, proc);
    const timer = setTimeout(() => void this.forget(proc.pid, proc), this.config.keepCollectedMs);
    timer.unref();
    this.expiries.set(proc, timer);
    this.evictFinished();
  }

  /** A restart, not a shutdown: leaves every command running with its holder, for the next envd to re-adopt. */
  detach(): void {
    this.detached = true;
    for (const timer of this.expiries.values()) clearTimeout(timer);
    this.expiries.clear();
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
    void proc.finished.then(() => this.onFinished(proc));
  }

  /**
   * Finds every command a previous envd left in the state directory: running
   * ones through their holder's socket, finished ones through the status the
   * holder wrote. Records nobody can use are removed, and so is spooled
   * output that belongs to no command.
   */
  private async adopt(): Promise<void> {
    const found: TrackedProcess[] = [];
    const later: { id: string; meta?: CommandMeta }[] = [];
    const ids = await this.state.listCommandIds();
    await Promise.all(
      ids.map(async (id) => {
        const record = await this.adoptRecord(id).catch((error: unknown) => ({ unreadable: error }));
        if (record instanceof TrackedProcess) found.push(record);
        else if ('unstarted' in record) later.push({ id, meta: record.unstarted });
        else if ('unreadable' in record) later.push({ id });
      }),
    );
    found.sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime());
    // A record not read yet keeps its slot unknown: the slot it names may be handed out meanwhile (only the budgets' count suffers).
    this.state.claimSlots([...found.map((proc) => proc.meta.slot), ...later.flatMap((entry) => (entry.meta ? [entry.meta.slot] : []))]);
    for (const proc of found) this.track(proc);
    for (const entry of later) void this.adoptLater(entry.id);
    const swept = await this.state.sweepSpool(new Set([...found.map((proc) => proc.id), ...later.map((entry) => entry.id)]));
    // Cgroups whose command has no record left: a crashed envd's, or removals that ran out of tries.
    if (this.cgroupMode.mode === 'cgroup') {
      try {
        const sweptCgroups = this.cgroupMode.cgroups.sweep(new Set(await this.state.listCommandIds()));
        if (sweptCgroups > 0) this.log.info({ sweptCgroups }, 'removed the cgroups of commands no record owns');
      } catch (error) {
        this.log.warn({ err: error }, 'could not sweep the cgroups of commands no record owns: serving on'); // a leak, never a reason not to start
      }
    }
    if (found.length > 0 || swept > 0 || later.length > 0) {
      this.log.info(
        { adopted: found.length, running: found.filter((proc) => proc.running).length, later: later.length, sweptSpoolFiles: swept },
        're-adopted the commands of a previous envd',
      );
    }
  }

  /**
   * One record of a previous envd: followed, left alone (a newer envd's),
   * removed (torn before its holder could be asked for), or to be looked at
   * again: no pid file yet (a start under way), or a read that failed (EMFILE).
   * Throws when the record cannot be read.
   */
  private async adoptRecord(id: string): Promise<TrackedProcess | { newer: true } | { removed: true } | { unstarted: CommandMeta }> {
    const dir = this.state.commandDir(id);
    const meta = readMeta(dir);
    // Written by a newer envd: not ours to judge.
    if (meta === 'newer') return { newer: true };
    if (!meta) {
      // Torn before its holder could be asked for (written in place, see createMeta): nothing runs for it.
      await this.state.removeCommand(id);
      return { removed: true };
    }
    if (!readHolderPids(dir)) return { unstarted: meta };
    return this.follow(id, dir, meta, true);
  }

  /**
   * A record whose holder had not written its pid file when the previous envd
   * stopped (the holder may still be coming up), or one that could not be read.
   * It is looked at again with back-off until it can be followed. A start that
   * never happened (no pid file long after the record was written) is
   * removed and its slot freed; a holder that comes up later than that finds
   * its directory gone, cannot write its pid file, and kills its command.
   */
  private async adoptLater(id: string): Promise<void> {
    const dir = this.state.commandDir(id);
    for (let delay = UNSTARTED_RECORD_POLL_MS; !this.closing && !this.detached; delay = Math.min(delay * 2, UNSTARTED_RECORD_POLL_MS * 20)) {
      await new Promise((resolve) => setTimeout(resolve, delay));
      if (this.closing || this.detached) return;
      let record;
      try {
        record = await this.adoptRecord(id);
      } catch (error) {
        this.log.warn({ err: error, id }, 'cannot read the record of a command yet: retrying');
        continue;
      }
      if (record instanceof TrackedProcess) {
        if (this.closing || this.detached) return record.detach();
        this.state.claimSlot(record.meta.slot);
        this.track(record);
        this.log.info({ pid: record.pid, running: record.running }, 're-adopted a command later');
        return;
      }
      if (!('unstarted' in record)) return;
      const written = statSync(join(dir, 'meta.json'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
      if (Date.now() > written + UNSTARTED_RECORD_WAIT_MS) {
        this.log.warn({ id, cmd: record.unstarted.cmd }, 'a command whose start a previous envd did not see through never came up: removing its record');
        await this.state.removeCommand(id);
        this.state.releaseSlot(record.unstarted.slot);
        return;
      }
    }
  }

  /**
   * A command has ended: nobody has collected it yet, so it is freed --keep-finished after its end (0: not
   * for time), or earlier if too many or too much is kept.
   */
  private onFinished(proc: TrackedProcess): void {
    if (this.byPid.get(proc.pid) !== proc || this.detached) return;
    this.evictFinished();
    // Collected meanwhile: --keep-collected rules it.
    if (this.config.keepFinishedMs === 0 || proc.collected) return;
    const left = Math.max(0, (proc.endedAt?.getTime() ?? Date.now()) + this.config.keepFinishedMs - Date.now());
    const timer = setTimeout(() => void this.forget(proc.pid, proc), left);
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
    const finished = [...this.byPid.values()].filter((proc) => !proc.running && !this.leaving.has(proc));
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
      void this.forget(proc.pid, proc);
    }
  }
}
