import { readlinkSync } from 'node:fs';
import type { StreamName } from '../holder/protocol.js';
import { conflict, HttpError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ExitInfo } from '../commands/schemas.js';
import type { OutputSubscriber, TrackedProcess } from '../commands/tracked-process.js';
import { TIMEOUT_EXIT_CODE } from '../commands/tracked-process.js';
import { commandLine, newNonce } from './driver.js';
import { CommandFrames } from './frames.js';
import { interruptForeground, killForeground } from './shell-group.js';
import { removeStdinFile, writeStdinFile } from './stdin-file.js';
import type { UnixUser } from '../users.js';

/** After a timeout's SIGINT, how long the foreground job has before SIGKILL (the 2 s). */
export const INTERRUPT_GRACE_MS = 2_000;
/** After that SIGKILL, how long the shell has to close the command's frame before the session is ended as stuck. */
export const STUCK_SHELL_MS = 2_000;
/** How long a session waits to follow its shell's output (a holder envd must reach again after a restart). */
export const FOLLOW_TIMEOUT_MS = 10_000;

/** Where a session command's output goes: a result being built, or an event stream. */
export interface CommandSink {
  /** false: it holds output it could not write yet and calls the session's `drained()` once it can take more. */
  output(stream: StreamName, bytes: Buffer): boolean;
}

/** How a session command ended: a command's exit, and whether it ended the session. */
export type SessionExit = ExitInfo & { session_ended?: true };

export interface SessionInfo {
  id: string;
  user: UnixUser;
  shell: string;
  startedAt: Date;
}

/**
 * A session's one-at-a-time machine. following: its shell's output is not
 * followed yet (just started, or re-adopted); idle; running: one command's
 * frame is open; ended: the shell is gone (or going), every call is 410.
 */
type State = 'following' | 'idle' | 'running' | 'ended';
const NEXT: Record<State, readonly State[]> = {
  following: ['idle', 'ended'],
  idle: ['running', 'following', 'ended'],
  running: ['idle', 'following', 'ended'],
  ended: [],
};

interface Running {
  cmd: string;
  startedAt: Date;
  frames: CommandFrames;
  sink: CommandSink;
  timedOut: boolean;
  timers: NodeJS.Timeout[];
  settle: (outcome: SessionExit | HttpError) => void;
}

/**
 * One shell that keeps its state between commands. It is a tracked command
 * underneath (the holder owns the shell; it counts in GET /commands, takes
 * limits and outlives envd); this object writes each command to the shell's
 * input and follows the shell's output as a subscriber of that command,
 * cutting each command's frame out of it (frames.ts).
 */
export class Session implements OutputSubscriber {
  readonly id: string;
  readonly user: UnixUser;
  readonly shell: string;
  readonly startedAt: Date;
  lastUsedAt: Date;
  /** Set once, when the shell has gone: the session's end, for the registry. */
  onEnded: (session: Session) => void = () => {};

  readonly wantsBytes = true;
  private state: State = 'following';
  private running: Running | undefined;
  private behind = false;
  /** finish() has run: the shell's end is recorded. */
  private gone = false;
  private followed: Promise<void> | undefined;
  private markFollowed: (() => void) | undefined;

  constructor(
    readonly proc: TrackedProcess,
    info: SessionInfo,
    private readonly logger: Logger,
  ) {
    this.id = info.id;
    this.user = info.user;
    this.shell = info.shell;
    this.startedAt = info.startedAt;
    this.lastUsedAt = info.startedAt;
    void proc.finished.then((exit) => this.finish(exit));
  }

  get pid(): number {
    return this.proc.pid;
  }

  get busy(): boolean {
    return this.state === 'running';
  }

  get ended(): boolean {
    return this.state === 'ended';
  }

  /** The command running now, for the 409 that names it. */
  get runningCommand(): { cmd: string; startedAt: Date } | undefined {
    return this.running && { cmd: this.running.cmd, startedAt: this.running.startedAt };
  }

  /** The shell's current directory; undefined once it cannot be read (it has ended). */
  cwd(): string | undefined {
    try {
      return readlinkSync(`/proc/${this.pid}/cwd`);
    } catch {
      return undefined;
    }
  }

  private to(next: State): void {
    if (!NEXT[this.state].includes(next)) throw new Error(`session ${this.id}: no transition from ${this.state} to ${next}`);
    this.state = next;
  }

  /** Starts following the shell's output (again); resolves once every later byte reaches this session. */
  follow(): Promise<void> {
    if (this.followed) return this.followed;
    this.followed = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new HttpError(503, `session ${this.id}: its shell's holder does not answer right now; retry shortly`)), FOLLOW_TIMEOUT_MS);
      this.markFollowed = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.followed.catch(() => (this.followed = undefined));
    this.proc.subscribe(this);
    return this.followed;
  }

  /**
   * Runs one command in the shell and resolves with how it ended, once its
   * output has all gone to `sink`. 409 while another runs, 410 once the
   * session has ended.
   */
  async run(cmd: string, options: { timeoutMs: number; stdin?: string | undefined }, sink: CommandSink): Promise<SessionExit> {
    this.checkUsable();
    if (this.state === 'following') await this.follow();
    this.checkUsable();
    this.to('running');
    const nonce = newNonce();
    let stdinPath = '';
    const outcome = new Promise<SessionExit | HttpError>((settle) => {
      this.running = { cmd, startedAt: new Date(), frames: new CommandFrames(nonce), sink, timedOut: false, timers: [], settle };
    });
    try {
      if (options.stdin !== undefined) stdinPath = await writeStdinFile(options.stdin, this.user);
      await this.proc.writeStdin(Buffer.from(commandLine(nonce, cmd, stdinPath)));
    } catch (error) {
      // Nothing reached the shell: the session is as it was.
      this.settle(error instanceof HttpError ? error : new HttpError(503, `session ${this.id}: could not hand the command to its shell`, { cause: error }));
    }
    if (options.timeoutMs > 0 && this.running) this.armTimeout(options.timeoutMs);
    const result = await outcome;
    await removeStdinFile(stdinPath).catch((error: unknown) => this.logger.warn({ err: error, session: this.id }, 'could not remove a stdin file'));
    this.lastUsedAt = new Date();
    if (result instanceof HttpError) throw result;
    return result;
  }

  /**
   * The client of the running command went away: the command is interrupted
   * as a timeout would (the session lives on) and its output dropped.
   */
  abandon(): void {
    const running = this.running;
    // No tree once handed over to the next envd (a restart): requests cut by this envd's exit take nothing along.
    if (!running || this.proc.tree() === undefined) return;
    running.sink = { output: () => true };
    this.drained();
    if (running.timers.length === 0) this.interrupt(running);
  }

  /** 410 once ended, 409 naming the command that runs now. */
  checkUsable(): void {
    if (this.state === 'ended') throw new HttpError(410, `session ${this.id} has ended`);
    const running = this.runningCommand;
    if (running) throw conflict(`session ${this.id} is running ${JSON.stringify(running.cmd)} (since ${running.startedAt.toISOString()}): one command at a time`);
  }

  private armTimeout(ms: number): void {
    const running = this.running!;
    running.timers.push(
      setTimeout(() => {
        running.timedOut = true;
        this.logger.info({ session: this.id, pid: this.pid }, 'session command timed out: interrupting it');
        this.interrupt(running);
      }, ms),
    );
  }

  /** SIGINT to the foreground job, SIGKILL 2 s later, and the session ended if the shell still holds the command 2 s after that. */
  private interrupt(running: Running): void {
    interruptForeground(this.pid);
    running.timers.push(
      setTimeout(() => {
        if (this.running !== running) return;
        killForeground(this.pid, Date.now() - running.startedAt.getTime());
        running.timers.push(
          setTimeout(() => {
            if (this.running !== running) return;
            this.logger.warn({ session: this.id, pid: this.pid }, 'the shell of a session did not return from an interrupted command: ending the session');
            this.proc.kill();
          }, STUCK_SHELL_MS),
        );
      }, INTERRUPT_GRACE_MS),
    );
  }

  private settle(outcome: SessionExit | HttpError): void {
    const running = this.running;
    if (!running) return;
    this.running = undefined;
    for (const timer of running.timers) clearTimeout(timer);
    this.behind = false;
    // `exit` in the command: the shell is going, no command may start in the moment before its holder says so.
    if (this.state === 'running') this.to(!(outcome instanceof HttpError) && outcome.session_ended ? 'ended' : 'idle');
    running.settle(outcome);
  }

  /** The frames are closed: the command's exit as the API says it. */
  private exitOf(running: Running, fallback?: ExitInfo): SessionExit {
    const end = running.frames.end;
    const ended = end?.exited || fallback !== undefined ? { session_ended: true as const } : {};
    if (running.timedOut) return { exit_code: TIMEOUT_EXIT_CODE, reason: 'timed_out', timed_out: true, ...ended };
    if (end) return { exit_code: end.status, reason: 'exited', ...ended };
    return { ...fallback!, ...ended };
  }

  // --- OutputSubscriber: the shell's output, as the holder relays it ---

  catchUp(): void {
    // The log holds what the shell wrote before this session followed it: no command's frame can be in it
    // (a command is written to the shell only once following), so it is skipped, not replayed.
    this.proc.caughtUp(this);
    if (this.state === 'following') this.to('idle');
    this.markFollowed?.();
  }

  push(stream: StreamName, bytes: Buffer): void {
    const running = this.running;
    if (!running) return;
    running.frames.feed(stream, bytes, (from, chunk) => {
      if (!running.sink.output(from, chunk)) this.behind = true;
    });
    if (running.frames.complete) this.settle(this.exitOf(running));
  }

  pushText(stream: StreamName, json: Buffer): void {
    // Only when another client asked the holder for text: the inside of a JSON string, back to its bytes.
    this.push(stream, Buffer.from(JSON.parse(`"${json.toString('utf8')}"`) as string, 'utf8'));
  }

  finish(exit: ExitInfo): void {
    if (this.gone) return;
    this.gone = true;
    const running = this.running;
    if (running) {
      running.frames.flush((stream, bytes) => running.sink.output(stream, bytes));
      this.settle(this.exitOf(running, exit));
    }
    this.proc.unsubscribe(this);
    if (this.state !== 'ended') this.to('ended');
    this.logger.info({ session: this.id, pid: this.pid, exit }, 'session ended');
    this.onEnded(this);
  }

  /** envd lost the holder's channel (the shell runs on): the command in flight is lost to its client, the next call follows again. */
  abort(message: string): void {
    this.followed = undefined;
    this.settle(new HttpError(503, `session ${this.id}: ${message}`));
    if (this.state === 'idle') this.to('following');
  }

  get backedUp(): boolean {
    return this.behind;
  }

  /** The sink can take output again. */
  drained(): void {
    if (!this.behind) return;
    this.behind = false;
    this.proc.subscriberDrained();
  }

  lendableSocket(): undefined {
    return undefined;
  }

  lend(flushed: () => void): void {
    flushed();
  }

  reclaim(): void {}
}
