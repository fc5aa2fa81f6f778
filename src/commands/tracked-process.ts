import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CommandCgroups } from '../cgroups/command-cgroups.js';
import type { StreamOffsets, Truncation } from '../holder/protocol.js';
import type { Logger } from '../logger.js';
import { describeExit, endCauses, readRecordedEnd, statusTime, type RecordedEnd } from './command-end.js';
import type { HolderLink } from './holder-link.js';
import { KeptLog } from './kept-log.js';
import { KillSwitch } from './kill-switch.js';
import { killProcessTrees, signalGroup, signalProcess, type TreeRoot } from './kill-tree.js';
import { processState, type CommandMeta, type HolderPids, type PtySize } from './meta.js';
import { closeStdin, resizeTerminal, writeStdin } from './command-input.js';
import { OutputFeed } from './output-feed.js';
import type { OutputSubscriber, ReplayTarget } from './output-subscriber.js';
import type { ExitInfo } from './schemas.js';
import type { TrackedProcessInit } from './tracked-process-init.js';
import { HolderLife, reconnectWhileAlive } from './states/holder-life.js';

export { describeExit, TIMEOUT_EXIT_CODE, type EndCauses } from './command-end.js';
export type { LendableSocket, OutputSubscriber, ReplayTarget } from './output-subscriber.js';
export { RECONNECT_BACKOFF_MS, RECONNECT_HELLO_TIMEOUT_MS } from './states/holder-life.js';
export type { TrackedProcessInit } from './tracked-process-init.js';

/**
 * One started command, seen through its holder: the holder owns the pipes (or terminal), writes the
 * kept output to the log and records how the command ended; this object follows it over the holder's
 * live channel. It composes the holder's life (link, reconnect, end: states/holder-life.ts) with the
 * output's followers (output-feed.ts: their states, the lent socket, flow control).
 */
export class TrackedProcess {
  readonly id: string;
  readonly pid: number;
  readonly meta: CommandMeta;
  readonly log: KeptLog;
  readonly startedAt: Date;
  /** Resolves when the command has ended and its output is complete. */
  readonly finished: Promise<ExitInfo>;
  /**
   * Its result has been handed out: the request that started it (foreground, stream) is over, or `wait`
   * answered. Finished and collected, it is listed only when asked for (?finished=true) until it is freed.
   * Not kept across a restart of envd: a re-adopted finished command is listed again.
   */
  collected = false;
  /** When it ended (for a command found finished at re-adoption: when its holder wrote its status). */
  endedAt: Date | undefined;
  /** Its holder says where each stream's output is (protocol 4: an offsets file): events carry ids, clients can resume. */
  readonly resumable: boolean;
  /** The command's own cgroup (cgroup mode): its limits, cgroup.kill, and why it ended. */
  cgroup: { cgroups: CommandCgroups; id: string } | undefined;

  private readonly logger: Logger;
  private readonly dir: string;
  private readonly pids: HolderPids;
  private readonly life = new HolderLife();
  private readonly feed: OutputFeed;
  /** Set by release(): nothing may connect or reconnect any more. */
  private released = false;
  /** Handed over to the next envd (a restart): nothing is killed, nothing reconnects. */
  private detached = false;
  private reaped: boolean;
  private finalLogEnd: number | undefined;
  /** Every byte the command wrote to each stream, once it has finished. */
  private finalOffsets: StreamOffsets | undefined;
  private exitInfo: ExitInfo | undefined;
  private truncation: Truncation = { stdout: false, stderr: false };
  private readonly killSwitch: KillSwitch;
  private resolveFinished!: (exit: ExitInfo) => void;

  constructor(init: TrackedProcessInit) {
    this.id = init.id;
    this.dir = init.dir;
    this.meta = init.meta;
    this.pid = init.pids.shellPid;
    this.pids = init.pids;
    this.log = new KeptLog(init.dir);
    this.startedAt = new Date(init.meta.started_at);
    this.resumable = existsSync(join(init.dir, 'offsets'));
    this.logger = init.logger;
    this.reaped = init.reaped;
    this.cgroup = init.cgroup;
    this.feed = new OutputFeed(this.log, init.logger, this.pid, init.logEnd);
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
    this.killSwitch = new KillSwitch(init.dir, this.pid, init.logger, () => this.killTree());
    if (init.meta.deadline_ms !== null) this.killSwitch.arm(init.meta.deadline_ms, () => this.running);
    // Last: the link delivers what the holder sent with its HELLO (its EXIT, for a fast command) at once.
    if (init.link) this.attach(init.link);
  }

  /** Whether the holder is still there (its pid with the start time it recorded); one that cannot be told counts as there. */
  holderAlive(): boolean {
    const state = processState(this.pids.holderPid, this.pids.holderStart);
    return state === 'same' || state === 'unknown';
  }

  /** For a command whose holder did not answer: reconnects with back-off while it lives; once gone, it has ended. */
  reconnect(): Promise<void> {
    return reconnectWhileAlive({
      dir: this.dir,
      pid: this.pid,
      logger: this.logger,
      wanted: () => !this.released && !this.detached && this.life.state === 'unreached',
      holderAlive: () => this.holderAlive(),
      gone: () => this.ending('gone'),
      attach: (link, hello) => {
        this.reaped = hello.reaped;
        this.feed.logEnd = hello.logEnd;
        this.attach(link);
      },
    });
  }

  /** Follows the holder over a (new) link; subscribers waiting for live output get it from here. */
  private attach(link: HolderLink): void {
    this.life.attach(link);
    this.feed.attach(link);
    link.listen((message) => this.onMessage(message), () => void this.onLinkClosed());
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  get exit(): ExitInfo | undefined {
    return this.exitInfo;
  }

  get truncated(): Truncation {
    return this.truncation;
  }

  /** The whole log's length once the command has finished. */
  get completeLogEnd(): number | undefined {
    return this.finalLogEnd;
  }

  /** Clients following the output (for leak checks). */
  get subscriberCount(): number {
    return this.feed.size;
  }

  /** For a command found finished at adoption: how it ended, from the holder's status file. */
  completeFromStatus(): Promise<void> {
    return this.ending('gone');
  }

  subscribe(subscriber: OutputSubscriber): void {
    this.feed.subscribe(subscriber);
  }

  unsubscribe(subscriber: OutputSubscriber): void {
    this.feed.unsubscribe(subscriber);
  }

  /** A subscriber has replayed the log: it follows live output from here (or ends, if the command has). */
  caughtUp(subscriber: OutputSubscriber): void {
    this.feed.caughtUp(subscriber);
  }

  /** envd's keep-alive for a lent socket, which only the holder may write to now. */
  keepLentSocketAlive(): void {
    this.feed.keepLentSocketAlive();
  }

  /** A subscriber's socket drained: the command may run again if nobody else is behind. */
  subscriberDrained(): void {
    this.feed.updateFlow();
  }

  /**
   * SIGKILL to the whole tree: its cgroup's cgroup.kill where it has one (no race with a fork loop),
   * else the /proc walk. Safe after exit: then only leftovers are hit. A running command is recorded
   * as killed first (reason "killed", kept for an envd restarted meanwhile), unless its timeout did it.
   */
  kill(): number[] {
    if (this.detached) return [];
    if (this.running) this.killSwitch.recordKill();
    return this.killTree();
  }

  private killTree(): number[] {
    if (this.cgroup?.cgroups.kill(this.cgroup.id)) return [];
    const tree = this.tree();
    return tree ? killProcessTrees([tree]) : [];
  }

  /** What kill() would kill, for killing many commands in one pass (registry.killAll). */
  tree(): TreeRoot | undefined {
    // Handed over to the next envd: the requests cut by this one's exit must not take their commands along.
    if (this.detached) return undefined;
    return { root: this.pid, leaderReaped: this.shellReaped() };
  }

  /** Sends a signal to the process group; false once the shell is gone (its pid may be reused). */
  signal(signal: NodeJS.Signals): boolean {
    if (this.shellReaped()) return false;
    return signalGroup(this.pid, signal);
  }

  /** Whether the shell's pid may belong to someone else: the holder said so, or (no link) its record says so. */
  private shellReaped(): boolean {
    if (this.reaped) return true;
    if (this.life.link) return false;
    // Not reaped while it runs or is a zombie: its holder, its only reaper, has not taken it, so the pid is still its.
    const state = processState(this.pids.shellPid, this.pids.shellStart);
    return state !== 'same' && state !== 'zombie';
  }

  /** Resolves once the command took the data: a command that does not read holds the caller. */
  writeStdin(data: Buffer): Promise<void> {
    return writeStdin(this.input(), data);
  }

  closeStdin(): Promise<void> {
    return closeStdin(this.input());
  }

  get ptySize(): PtySize | null {
    return this.meta.pty;
  }

  resize(cols: number, rows: number): Promise<void> {
    return resizeTerminal(this.input(), cols, rows, this.logger);
  }

  private input() {
    return { pid: this.pid, dir: this.dir, meta: this.meta, running: this.running, link: this.life.link };
  }

  /**
   * Stops following the command, for good: kills it if it still runs (with its holder, which would
   * otherwise go on writing files that are about to be removed) and closes the live channel.
   * Resolves once the holder is gone: its directory must not be removed while it lives.
   */
  async release(): Promise<void> {
    this.released = true;
    this.killSwitch.disarm();
    if (this.running) {
      this.kill();
      if (this.holderAlive()) signalProcess(this.pids.holderPid, 'SIGKILL');
    }
    await this.life.closeAndWait(() => this.holderAlive());
  }

  /** Leaves the command running for the next envd (a restart): closes the channel, kills nothing. */
  detach(): void {
    this.detached = true;
    this.killSwitch.disarm();
    this.life.abandon();
  }

  private onMessage(message: Parameters<HolderLink['onMessage']>[0]): void {
    if (message.type !== 'reaped' && message.type !== 'exit') return this.feed.onMessage(message);
    this.reaped = true;
    if (message.type === 'reaped') return;
    // A second EXIT would be the holder's bug: logged, not thrown into the link's read.
    if (this.life.state !== 'linked') return void this.logger.error({ pid: this.pid, state: this.life.state }, 'the holder sent EXIT out of turn: ignored');
    this.feed.logEnd = message.logEnd;
    this.truncation = message.truncated;
    void this.ending('exit', { exitCode: message.exitCode, signal: message.signal, logEnd: message.logEnd });
  }

  /** The link closed: lost if the holder lives on (followed over a new one), else the holder's end (after EXIT, too). */
  private async onLinkClosed(): Promise<void> {
    if (this.life.linkClosed(!this.released && !this.detached && this.holderAlive()) === 'lost') {
      this.life.on('lost');
      this.feed.linkLost(`envd lost its link to the holder of pid ${this.pid} (it runs on): attach again (GET /commands/${this.pid}/stream) to follow it`);
      void this.reconnect();
      return;
    }
    this.feed.linkGone();
    this.killSwitch.disarm();
    // Without an EXIT the holder died early (killed): its status file, if any, says how the command ended.
    await this.ending('gone');
  }

  /** The command has ended (EXIT, else the holder gone): its end is read once, and its output is complete. */
  private async ending(event: 'exit' | 'gone', said?: RecordedEnd): Promise<void> {
    if (!this.life.on(event)) return;
    const forgotten = () => this.released && this.killSwitch.killedOnRequest;
    const end = said ?? (await readRecordedEnd(this.dir, this.log, { logger: this.logger, pid: this.pid, forgotten, quiet: this.killSwitch.timedOut }));
    if (end.truncated) this.truncation = end.truncated;
    const offsets = this.resumable ? await this.log.offsets() : undefined;
    this.endedAt = said ? new Date() : statusTime(this.dir);
    this.finalOffsets = offsets?.written;
    this.finalLogEnd = end.logEnd;
    this.reaped = true;
    this.killSwitch.disarm();
    const exit = describeExit(end.exitCode, end.signal, endCauses(this.dir, { timedOut: this.killSwitch.timedOut, killed: this.killSwitch.killedOnRequest }, this.cgroup));
    this.exitInfo = exit;
    this.life.on('completed');
    // Where a replay of the finished command ends: the whole log, and (protocol 4) every byte of each stream.
    this.feed.ended({ exit, target: (): ReplayTarget => ({ logEnd: end.logEnd, offsets: this.finalOffsets }) });
    this.resolveFinished(exit);
  }
}
