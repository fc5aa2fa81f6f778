import { existsSync, statSync, writeFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { conflict, HttpError } from '../errors.js';
import type { AckStatus, DirectEndReason, StreamName, StreamOffsets, Truncation } from '../holder/protocol.js';
import type { Logger } from '../logger.js';
import { HolderLink } from './holder-link.js';
import { KeptLog } from './kept-log.js';
import { killProcessTrees, signalGroup, signalProcess, type TreeRoot } from './kill-tree.js';
import { monotonicMs, processState, readHolderStatus, writeMeta, type CommandMeta, type HolderPids, type PtySize } from './meta.js';
import type { CommandCgroups } from '../cgroups/command-cgroups.js';
import type { ExitInfo } from './schemas.js';

/** The exit code a timed-out command reports, as coreutils `timeout` does. */
export const TIMEOUT_EXIT_CODE = 124;

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, number]) => [number, name]));

/**
 * How long a reconnect waits for the holder's HELLO. Short: a holder that does
 * not answer (stopped, or its backlog full) is retried, never taken for gone.
 */
export const RECONNECT_HELLO_TIMEOUT_MS = 2_000;
/** Back-off between reconnects to a live holder that did not answer: from the first to the last. */
export const RECONNECT_BACKOFF_MS = { first: 100, max: 5_000 } as const;
/** How long a status file that exists but cannot be read (EMFILE) is retried before the command counts as lost. */
const STATUS_READ_PATIENCE_MS = 60_000;
/** How long forgetting a command waits for a holder without a link to be gone after SIGKILL. */
const HOLDER_EXIT_WAIT_MS = 5_000;

/**
 * How far a subscriber replays the kept log: to `logEnd` (asked again as the
 * replay goes: it moves to the whole log once the command has finished), where
 * the live output (or the end) starts at `offsets` in each stream; whatever of
 * the streams lies between what the log kept and `offsets` is lost to this
 * subscriber (past the cap or the budgets). `offsets` is undefined for a holder
 * older than protocol 4.
 */
export interface ReplayTarget {
  logEnd: number;
  offsets: StreamOffsets | undefined;
}

/**
 * Someone following a command's output: a stream client or an attacher.
 * It first catches up from the kept log (`catchUp`), then gets live output
 * (`push`), then `finish`.
 */
export interface OutputSubscriber {
  /** Replays the kept log from where the subscriber starts up to `target()`, then calls `proc.caughtUp(this)`. */
  catchUp(log: KeptLog, target: () => ReplayTarget): void;
  /** Live output, including output past the cap that the log no longer keeps. */
  push(stream: StreamName, bytes: Buffer): void;
  /**
   * Live output as the holder decoded and escaped it (the inside of a JSON
   * string), valid only during the call. Its decoder carries on from where
   * the replay stopped: a character the replay left incomplete is completed
   * (or replaced) here.
   */
  pushText(stream: StreamName, json: Buffer, offset?: number): void;
  /** The last call: the command has ended and its output is complete. */
  finish(exit: ExitInfo): void;
  /**
   * The output can no longer be followed without a gap (envd lost the holder's channel): the stream
   * ends before `exit`, with an `error` event saying `message` where envd may still write to it, else cut.
   */
  abort(message: string): void;
  /** True while it holds output it could not yet write; the command is paused meanwhile. */
  readonly backedUp: boolean;
  /** The client's socket, if the holder may write this subscriber's live output to it itself. */
  lendableSocket(): LendableSocket | undefined;
  /** It sends the output's raw bytes (encoding base64): live output must come as DATA, never as the holder's TEXT. */
  readonly wantsBytes?: boolean;
  /** Writes nothing from now on; calls `flushed` once all it wrote before has gone to the socket. */
  lend(flushed: () => void): void;
  /**
   * The socket is the subscriber's to write again: all output up to here is on it (`offsets`: where it
   * stands in each stream, protocol 4), or (`intact` false) the holder vanished while writing and the
   * stream may end inside an event.
   */
  reclaim(intact: boolean, offsets?: StreamOffsets): void;
}

/** A socket of envd's process, by fd, and how its response frames a body (HTTP chunks or none). */
export interface LendableSocket {
  fd: number;
  /** Which socket the fd is now: the holder takes it only if it is still this one. */
  inode: number;
  chunked: boolean;
}

type SubscriberState = 'syncing' | 'replaying' | 'live';

/**
 * A lent socket (the holder's direct output, docs/holder-protocol.md): asked for (TEXT still comes), ready
 * (the subscriber flushes what it wrote), on (the holder writes), ending (asked back; DIRECT_ENDED to come).
 */
interface Lent {
  subscriber: OutputSubscriber;
  state: 'asked' | 'ready' | 'on' | 'ending';
  /** GO was sent: the holder may have written to the socket. */
  went: boolean;
}

export interface TrackedProcessInit {
  id: string;
  dir: string;
  meta: CommandMeta;
  pids: HolderPids;
  /**
   * The live channel to the holder; undefined when envd could not connect, in which case the
   * holder's pid record decides: alive (stopped, out of fds, slow) means the command runs and envd
   * reconnects, gone means it ended (its status file says how).
   */
  link: HolderLink | undefined;
  reaped: boolean;
  /** Re-adopted after a restart of envd: kept once finished, whoever started it (its client is gone). */
  adopted: boolean;
  /** Its cgroup (cgroup mode): known before the link can report the end (a command that ended while envd was down). */
  cgroup?: { cgroups: CommandCgroups; id: string } | undefined;
  logEnd: number;
  logger: Logger;
}

/**
 * One started command, seen through its holder: the holder owns the pipes
 * (or terminal), writes the kept output to the log and records how the
 * command ended; this object follows it over the holder's live channel.
 *
 * Flow control: while any subscriber is catching up from the log or cannot
 * write, messages from the holder are held, so the holder stops reading the
 * command's pipes and the command blocks on write: envd holds no output.
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

  private readonly logger: Logger;
  private readonly dir: string;
  private readonly pids: HolderPids;
  private link: HolderLink | undefined;
  /** Set by release(): nothing may connect or reconnect any more. */
  private released = false;
  private reaped: boolean;
  private logEnd: number;
  private finalLogEnd: number | undefined;
  /** The holder's EXIT arrived (completing it reads a file first): its link closing now is its end, not a loss. */
  private exitSeen = false;
  /** How far each stream's output has gone out as TEXT up to logEnd (protocol 4). */
  private liveOffsets: StreamOffsets | undefined;
  /** Every byte the command wrote to each stream, once it has finished. */
  private finalOffsets: StreamOffsets | undefined;
  private exitInfo: ExitInfo | undefined;
  private truncation: Truncation = { stdout: false, stderr: false };
  private live: 'off' | 'syncing' | 'on' = 'off';
  /** LIVE on asked the holder for TEXT (false: DATA, which a bytes subscriber needs and every subscriber can decode). */
  private liveText = false;
  private readonly subscribers = new Map<OutputSubscriber, SubscriberState>();
  private lent: Lent | undefined;
  /** The holder could not take a socket once (not allowed to, e.g. envd runs unprivileged): not asked again. */
  private lendingRefused = false;
  private timedOut = false;
  private detached = false;
  private timeoutTimer: NodeJS.Timeout | undefined;
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
    this.logEnd = init.logEnd;
    this.cgroup = init.cgroup;
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
    if (init.link) this.attach(init.link);
    if (init.meta.deadline_ms !== null) this.armTimeout(init.meta.deadline_ms);
  }

  /**
   * Whether the command's holder is still there: its pid with the start time it
   * recorded. A holder that cannot be reached is not gone, and neither is one
   * whose record cannot be read right now.
   */
  holderAlive(): boolean {
    const state = processState(this.pids.holderPid, this.pids.holderStart);
    return state === 'same' || state === 'unknown';
  }

  /**
   * For a command whose holder did not answer: keeps trying, with back-off,
   * for as long as the holder lives; once it is gone, the command has ended
   * and its status file says how. Meanwhile the command is listed as running.
   */
  async reconnect(): Promise<void> {
    for (let delay: number = RECONNECT_BACKOFF_MS.first; ; delay = Math.min(delay * 2, RECONNECT_BACKOFF_MS.max)) {
      if (this.released || this.detached || this.link || this.exitInfo) return;
      if (!this.holderAlive()) {
        await this.complete();
        return;
      }
      try {
        const { link, hello } = await HolderLink.connect(join(this.dir, 'sock'), RECONNECT_HELLO_TIMEOUT_MS);
        if (this.released || this.detached || this.link || this.exitInfo) {
          link.close();
          return;
        }
        this.reaped = hello.reaped;
        this.logEnd = hello.logEnd;
        this.attach(link);
        this.logger.info({ pid: this.pid }, 'reached the holder of a command again');
        return;
      } catch (error) {
        this.logger.warn({ err: error, pid: this.pid, retryMs: delay }, 'the holder of a command is alive but did not answer: retrying');
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  /** Follows the holder over a (new) link; subscribers waiting for live output get it from here. */
  private attach(link: HolderLink): void {
    this.link = link;
    link.onMessage = (message) => this.onMessage(message);
    link.onClose = () => void this.onHolderGone();
    if (this.live === 'syncing') this.liveOn();
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
    return this.subscribers.size;
  }

  /** For a command found finished at adoption: how it ended, from the holder's status file. */
  async completeFromStatus(): Promise<void> {
    await this.complete();
  }

  subscribe(subscriber: OutputSubscriber): void {
    if (this.exitInfo) {
      this.subscribers.set(subscriber, 'replaying');
      subscriber.catchUp(this.log, () => this.finalTarget());
      return;
    }
    this.subscribers.set(subscriber, 'syncing');
    if (this.live === 'off') {
      this.live = 'syncing';
      this.liveOn();
    } else if (this.lent) {
      // Output may be on the lent socket past logEnd: the replay starts where DIRECT_ENDED says it is.
      this.askBack();
    } else if (subscriber.wantsBytes && this.liveText) {
      // TEXT cannot give back the bytes: DATA from the next SYNC on, where this subscriber's replay ends.
      this.liveOn();
    } else if (this.live === 'on') {
      // Between two messages: everything up to logEnd is in the log, everything after comes live.
      this.startReplay(subscriber, { logEnd: this.logEnd, offsets: this.liveOffsets && { ...this.liveOffsets } });
    }
  }

  unsubscribe(subscriber: OutputSubscriber): void {
    if (!this.subscribers.delete(subscriber)) return;
    if (this.subscribers.size === 0 && this.live !== 'off') {
      // LIVE_OFF takes a lent socket back too, without a DIRECT_ENDED.
      this.live = 'off';
      this.lent = undefined;
      this.link?.liveOff();
    } else if (this.lent?.subscriber === subscriber) {
      this.askBack();
    }
    this.updateFlow();
    this.lendIfAlone();
  }

  /** A subscriber has replayed the log: it follows live output from here (or ends, if the command has). */
  caughtUp(subscriber: OutputSubscriber): void {
    if (!this.subscribers.has(subscriber)) return;
    if (this.exitInfo) {
      this.subscribers.delete(subscriber);
      subscriber.finish(this.exitInfo);
      return;
    }
    this.subscribers.set(subscriber, 'live');
    this.updateFlow();
    this.lendIfAlone();
  }

  /**
   * LIVE on (again), in TEXT unless a subscriber wants raw bytes. Asked again while on, the holder
   * switches to DATA at its SYNC: subscribers following live decode DATA themselves from there (a
   * character split exactly there may come out as U+FFFD), subscribers still syncing replay up to it.
   */
  private liveOn(): void {
    const link = this.link;
    if (!link) return;
    const bytes = [...this.subscribers.keys()].some((subscriber) => subscriber.wantsBytes);
    this.liveText = !bytes && link.speaksText;
    link.liveOn(this.liveText);
  }

  /** envd's keep-alive for a lent socket, which only the holder may write to now. */
  keepLentSocketAlive(): void {
    if (this.lent?.state === 'on') this.link?.directPing();
  }

  /**
   * One caught-up subscriber alone: its socket is lent to the holder, which writes the live output
   * to it directly (two kernel copies and envd's event loop fewer per event). Not while anyone
   * else follows the command: they get TEXT, and one writer per socket is the rule.
   */
  private lendIfAlone(): void {
    if (this.lent || this.lendingRefused || this.live !== 'on' || !this.liveText || this.subscribers.size !== 1) return;
    const link = this.link;
    if (!link || link.closed || !link.lendsSockets) return;
    const [subscriber, state] = this.subscribers.entries().next().value!;
    if (state !== 'live') return;
    const socket = subscriber.lendableSocket();
    if (!socket) return;
    this.lent = { subscriber, state: 'asked', went: false };
    link.directOn(socket.fd, socket.inode, socket.chunked);
  }

  /** Asks for the lent socket back; DIRECT_ENDED (always answered) gives it back and replays for newcomers. */
  private askBack(): void {
    if (!this.lent || this.lent.state === 'ending') return;
    this.lent.state = 'ending';
    this.link?.directOff();
  }

  private onDirectReady(): void {
    const lent = this.lent;
    if (lent?.state !== 'asked') return; // asked back meanwhile: DIRECT_ENDED follows
    lent.state = 'ready';
    lent.subscriber.lend(() => {
      if (this.lent !== lent || lent.state !== 'ready') return;
      lent.state = 'on';
      lent.went = true;
      this.link?.directGo();
    });
  }

  private onDirectEnded(logEnd: number, reason: DirectEndReason, offsets: StreamOffsets | undefined): void {
    const lent = this.lent;
    if (!lent) return; // LIVE_OFF forgot it first
    this.lent = undefined;
    this.logEnd = logEnd;
    this.liveOffsets = offsets;
    if (reason === 'refused') {
      this.lendingRefused = true;
      this.logger.info({ pid: this.pid }, 'the holder could not take the stream socket: envd writes the output');
    }
    if (this.subscribers.has(lent.subscriber)) lent.subscriber.reclaim(true, offsets);
    // The holder is back to TEXT: one who wants bytes waits for the SYNC of DATA.
    const bytes = [...this.subscribers.entries()].some(([subscriber, state]) => state === 'syncing' && subscriber.wantsBytes);
    if (bytes) this.liveOn();
    else for (const [subscriber, state] of this.subscribers) if (state === 'syncing') this.startReplay(subscriber, { logEnd, offsets: offsets && { ...offsets } });
    this.updateFlow();
    // A client that failed is about to go ('close' follows): it is not asked again. Anyone else alone may be.
    if (reason !== 'failed') this.lendIfAlone();
  }

  /** A subscriber's socket drained: the command may run again if nobody else is behind. */
  subscriberDrained(): void {
    this.updateFlow();
  }

  /**
   * SIGKILL to the whole tree: its cgroup's cgroup.kill where it has one (no
   * race with a fork loop), else the /proc walk. Safe after exit: then only
   * leftovers are hit. A running command is recorded as killed first (reason
   * "killed", kept for an envd restarted meanwhile), unless its timeout did it.
   */
  kill(): number[] {
    if (this.detached) return [];
    if (this.running && !this.timedOut && !this.killedOnRequest) {
      this.killedOnRequest = true;
      try {
        writeFileSync(join(this.dir, 'killed'), '', { mode: 0o600 });
      } catch (error) {
        this.logger.warn({ err: error, pid: this.pid }, 'could not record the kill');
      }
    }
    if (this.cgroup?.cgroups.kill(this.cgroup.id)) return [];
    const tree = this.tree();
    return tree ? killProcessTrees([tree]) : [];
  }

  /** The command's own cgroup (cgroup mode): its limits, cgroup.kill, and why it ended. */
  cgroup: { cgroups: CommandCgroups; id: string } | undefined;
  private killedOnRequest = false;

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
    if (this.link) return false;
    // Not reaped while it runs or is a zombie: its holder, its only reaper, has not taken it, so the pid is still its.
    const state = processState(this.pids.shellPid, this.pids.shellStart);
    return state !== 'same' && state !== 'zombie';
  }

  /** Resolves once the command took the data: a command that does not read holds the caller. */
  async writeStdin(data: Buffer): Promise<void> {
    this.requireStdin();
    this.requireReachable();
    this.checkAck(await (this.link?.stdin(data) ?? 'closed'));
  }

  async closeStdin(): Promise<void> {
    this.requireStdin();
    this.requireReachable();
    const status = this.link ? await this.link.stdinEof() : 0;
    // An ended command's stdin is closed already: closing it again is fine.
    if (status !== 'closed') this.checkAck(status);
  }

  get ptySize(): PtySize | null {
    return this.meta.pty;
  }

  async resize(cols: number, rows: number): Promise<void> {
    if (!this.meta.pty) throw conflict(`pid ${this.pid} has no terminal (it was not started with pty)`);
    this.requireReachable();
    const status = this.link ? await this.link.resize(cols, rows) : 'closed';
    if (status === 'closed') throw conflict(`the terminal of pid ${this.pid} is closed: the command has ended`);
    this.checkAck(status);
    this.meta.pty = { cols, rows };
    // So a restarted envd lists the size the terminal really has.
    await writeMeta(this.dir, this.meta).catch((error: unknown) => this.logger.warn({ err: error, pid: this.pid }, 'could not record the new terminal size'));
  }

  /**
   * Stops following the command, for good: kills it if it still runs (with
   * its holder, which would otherwise go on writing files that are about to
   * be removed) and closes the live channel. Resolves once the holder is gone:
   * its directory must not be removed while it lives.
   */
  async release(): Promise<void> {
    this.released = true;
    clearTimeout(this.timeoutTimer);
    const link = this.link;
    if (this.running) {
      this.kill();
      if (this.holderAlive()) signalProcess(this.pids.holderPid, 'SIGKILL');
    }
    if (!link || link.closed) {
      // No link (never reached, or lost): the pid record is all there is to wait on.
      for (const deadline = Date.now() + HOLDER_EXIT_WAIT_MS; this.holderAlive() && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 20));
      return;
    }
    const gone = new Promise<void>((resolve) => {
      const previous = link.onClose;
      link.onClose = () => {
        previous();
        resolve();
      };
    });
    link.close();
    await gone;
  }

  /** Leaves the command running for the next envd (a restart): closes the channel, kills nothing. */
  detach(): void {
    this.detached = true;
    clearTimeout(this.timeoutTimer);
    if (!this.link) return;
    this.link.onClose = () => {};
    this.link.close();
  }

  /** A running command whose holder envd cannot reach right now: its stdin and terminal wait for the reconnect. */
  private requireReachable(): void {
    if (this.running && !this.link) throw new HttpError(503, `the holder of pid ${this.pid} does not answer right now; retry shortly`);
  }

  private requireStdin(): void {
    if (!this.meta.stdin && !this.meta.pty) throw conflict(`pid ${this.pid} was not started with stdin: true`);
  }

  private checkAck(status: AckStatus | 'closed'): void {
    if (status === 0) return;
    if (status === 1) throw conflict(`pid ${this.pid} was not started with stdin: true`);
    throw conflict(`stdin of pid ${this.pid} is closed`);
  }

  private armTimeout(deadlineMs: number): void {
    this.timeoutTimer = setTimeout(
      () => {
        if (!this.running) return;
        this.timedOut = true;
        // Recorded before the kill, so an envd restarted meanwhile still reports a timeout.
        try {
          writeFileSync(join(this.dir, 'timed_out'), '', { mode: 0o600 });
        } catch (error) {
          this.logger.warn({ err: error, pid: this.pid }, 'could not record the timeout');
        }
        this.logger.info({ pid: this.pid }, 'command timed out: killing its process tree');
        this.kill();
      },
      Math.max(0, deadlineMs - monotonicMs()),
    );
  }

  private onMessage(message: Parameters<HolderLink['onMessage']>[0]): void {
    switch (message.type) {
      case 'reaped':
        this.reaped = true;
        return;
      case 'sync':
        this.logEnd = message.logEnd;
        this.liveOffsets = message.offsets;
        // A SYNC while on: the switch to DATA (liveOn) that a subscriber waits for.
        if (this.live === 'off') return;
        this.live = 'on';
        for (const [subscriber, state] of this.subscribers) {
          // A SYNC of TEXT: one who wants bytes waits for the SYNC of the DATA asked for since.
          if (state === 'syncing' && !(subscriber.wantsBytes && this.liveText)) this.startReplay(subscriber, { logEnd: message.logEnd, offsets: message.offsets && { ...message.offsets } });
        }
        return;
      case 'data':
      case 'text':
        this.logEnd = message.logEnd;
        if (message.type === 'text' && message.offset !== undefined && this.liveOffsets) this.liveOffsets[message.stream] = message.offset;
        if (this.live !== 'on') return;
        for (const [subscriber, state] of this.subscribers) {
          if (state !== 'live') continue;
          if (message.type === 'data') subscriber.push(message.stream, message.bytes);
          else subscriber.pushText(message.stream, message.json, message.offset);
        }
        this.updateFlow();
        return;
      case 'direct-ready':
        this.onDirectReady();
        return;
      case 'direct-ended':
        this.onDirectEnded(message.logEnd, message.reason, message.offsets);
        return;
      case 'exit':
        this.exitSeen = true;
        this.reaped = true;
        this.logEnd = message.logEnd;
        this.truncation = message.truncated;
        void this.complete({ exitCode: message.exitCode, signal: message.signal, logEnd: message.logEnd });
        return;
    }
  }

  private startReplay(subscriber: OutputSubscriber, upTo: ReplayTarget): void {
    this.subscribers.set(subscriber, 'replaying');
    this.updateFlow();
    // Once the command has finished the target becomes the whole log, even mid-replay.
    subscriber.catchUp(this.log, () => (this.finalLogEnd !== undefined ? this.finalTarget() : upTo));
  }

  /** The whole log, and (protocol 4) every byte written to each stream: where a replay of a finished command ends. */
  private finalTarget(): ReplayTarget {
    return { logEnd: this.finalLogEnd!, offsets: this.finalOffsets };
  }

  /** Hold the holder's messages while anyone is catching up or cannot write. */
  private updateFlow(): void {
    let behind = false;
    for (const [subscriber, state] of this.subscribers) {
      if (state === 'replaying' || (state === 'live' && subscriber.backedUp)) behind = true;
    }
    if (behind) this.link?.hold();
    else this.link?.release();
  }

  private async onHolderGone(): Promise<void> {
    this.link = undefined;
    // The link closed but the holder lives (it dropped this connection): follow it over a new one. Whoever
    // followed the output over the old one cannot be continued without a gap: their streams end, they attach again.
    // (After EXIT the holder lives on until envd has closed its end: that is its end, not a lost link.)
    if (!this.exitSeen && this.finalLogEnd === undefined && !this.released && !this.detached && this.holderAlive()) {
      this.lent = undefined;
      this.live = 'off';
      const message = `envd lost its link to the holder of pid ${this.pid} (it runs on): attach again (GET /commands/${this.pid}/stream) to follow it`;
      for (const subscriber of this.subscribers.keys()) subscriber.abort(message);
      this.subscribers.clear();
      void this.reconnect();
      return;
    }
    // The holder's copy of a lent socket closed with it; output it did not write is in the log.
    const lent = this.lent;
    this.lent = undefined;
    if (lent && this.subscribers.has(lent.subscriber)) lent.subscriber.reclaim(!lent.went);
    clearTimeout(this.timeoutTimer);
    // Without an EXIT the holder died early (killed): its status file, if any, says how the command ended.
    if (this.running) await this.complete();
  }

  /** The command has ended and its output is complete: from the EXIT message, else from the status file. */
  private async complete(ended?: { exitCode: number; signal: number; logEnd: number }): Promise<void> {
    if (this.finalLogEnd !== undefined) return;
    let end = ended;
    if (!end) {
      const status = await readStatusPatiently(this.dir).catch((error: unknown) => {
        this.logger.error({ err: error, pid: this.pid }, 'could not read the status file of a command');
        return undefined;
      });
      if (status) this.truncation = status.truncated;
      // Forgotten on request (DELETE): envd SIGKILLed the tree and the holder with it, which then
      // had no time to record the end. That SIGKILL is how the command ended.
      const forgotten = !status && this.released && this.killedOnRequest;
      end = status ?? { exitCode: -1, signal: forgotten ? constants.signals.SIGKILL : 0, logEnd: await this.log.size() };
      if (!status && !this.timedOut && !forgotten) this.logger.warn({ pid: this.pid }, 'the holder of a command ended without recording its exit: reporting exit code 1');
    }
    if (this.finalLogEnd !== undefined) return;
    const offsets = this.resumable ? await this.log.offsets() : undefined;
    const endedAt = ended ? new Date() : statusTime(this.dir);
    if (this.finalLogEnd !== undefined) return;
    this.finalOffsets = offsets?.written;
    this.endedAt = endedAt;
    this.finalLogEnd = end.logEnd;
    this.reaped = true;
    clearTimeout(this.timeoutTimer);
    // Markers in the state directory (tmpfs), asked at once: a missing file costs no error object (an
    // fs.promises.access that fails builds one; two per command were ~10 % of envd's CPU per command).
    const timedOut = this.timedOut || existsSync(join(this.dir, 'timed_out'));
    const killed = this.killedOnRequest || existsSync(join(this.dir, 'killed'));
    const cgroupEnd = this.cgroup ? this.cgroup.cgroups.end(this.cgroup.id) : { oomKilled: false, pidsExhausted: false };
    const exit = describeExit(end.exitCode, end.signal, { timedOut, killed, ...cgroupEnd });
    this.exitInfo = exit;
    for (const [subscriber, state] of this.subscribers) {
      if (state === 'live') {
        this.subscribers.delete(subscriber);
        subscriber.finish(exit);
      } else if (state === 'syncing') {
        this.subscribers.set(subscriber, 'replaying');
        subscriber.catchUp(this.log, () => this.finalTarget());
      }
      // 'replaying' ones finish when they have caught up with the (now final) end.
    }
    this.resolveFinished(exit);
  }
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
function statusTime(dir: string): Date {
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
