import { constants } from 'node:os';
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { conflict } from '../errors.js';
import type { Logger } from '../logger.js';
import { killProcessTree, signalGroup } from './kill-tree.js';
import { OutputLog, type OutputEvent, type StreamName } from './output-log.js';
import type { CommandResult, ExitInfo } from './schemas.js';
import type { Subprocess } from './spawn.js';

/**
 * After the shell exits, how long its output pipes may stay open. A command
 * that started a daemon leaves the daemon holding them; past this grace envd
 * closes its ends and finishes the command anyway.
 */
export const OUTPUT_DRAIN_GRACE_MS = 200;

/** The exit code a timed-out command reports, as coreutils `timeout` does. */
export const TIMEOUT_EXIT_CODE = 124;

/** Someone following a process's output: a stream client or an attacher. */
export interface OutputSubscriber {
  /** The output kept so far, in order (shared references, never copies of the text). */
  replay(events: readonly OutputEvent[]): void;
  /** Live output, including output past the cap that `wait` no longer keeps. */
  push(event: OutputEvent): void;
  /** The last call: the command has ended and its output is complete. */
  finish(exit: ExitInfo): void;
  /** True while it holds events it could not yet write; the command is paused meanwhile. */
  readonly backedUp: boolean;
}

export interface ProcessSpec {
  cmd: string;
  cwd: string;
  user: string;
  background: boolean;
  stdin: boolean;
}

/**
 * One started command: its pipes and decoders, the output kept for `wait`,
 * the clients following it, and how it ended.
 *
 * Ordering matters here: `exit` (the shell was reaped) comes before the
 * output pipes close, and the command only counts as finished once both have
 * happened (or the drain grace ran out), so every byte the command wrote is
 * in the log and has been offered to subscribers before `exit` is reported.
 */
export class TrackedProcess {
  readonly pid: number;
  readonly startedAt = new Date();
  readonly output: OutputLog;
  /** Resolves when the command has ended and its output is complete. */
  readonly finished: Promise<ExitInfo>;

  private readonly logger: Logger;
  private readonly subscribers = new Set<OutputSubscriber>();
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly streams: Readable[];
  private openStreams: number;
  private paused = false;
  private reaped = false;
  private timedOut = false;
  private stdinOpen: boolean;
  private exitInfo: ExitInfo | undefined;
  private shellExit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private timeoutTimer: NodeJS.Timeout | undefined;
  private graceTimer: NodeJS.Timeout | undefined;
  private resolveFinished!: (exit: ExitInfo) => void;

  constructor(
    private readonly subprocess: Subprocess,
    readonly spec: ProcessSpec,
    options: { maxOutputBytes: number; timeoutMs: number; logger: Logger },
  ) {
    this.logger = options.logger;
    this.pid = subprocess.pid!;
    this.output = new OutputLog(options.maxOutputBytes);
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
    this.stdinOpen = spec.stdin;

    this.streams = [this.follow('stdout', subprocess.stdout), this.follow('stderr', subprocess.stderr)];
    this.openStreams = this.streams.length;
    // EPIPE when the command stops reading; writeStdin reports it through its callback.
    subprocess.stdin?.on('error', () => {});
    // After a successful spawn only kill() can fail here; an unhandled 'error' would end envd.
    subprocess.on('error', (error: unknown) => this.logger.warn({ err: error, pid: this.pid }, 'child process error'));
    subprocess.once('exit', (code, signal) => this.onShellExit(code, signal));

    if (options.timeoutMs > 0) {
      this.timeoutTimer = setTimeout(() => {
        this.timedOut = true;
        this.logger.info({ pid: this.pid, timeoutMs: options.timeoutMs }, 'command timed out: killing its process tree');
        this.kill();
      }, options.timeoutMs);
    }
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  /** Clients following the output live (for leak checks and metrics). */
  get subscriberCount(): number {
    return this.subscribers.size;
  }

  get exit(): ExitInfo | undefined {
    return this.exitInfo;
  }

  /** Stdout and stderr as kept (capped), with how the command ended. */
  result(): CommandResult {
    const exit = this.exitInfo;
    if (!exit) throw new Error('result() before the command finished');
    return {
      stdout: this.output.text('stdout'),
      stderr: this.output.text('stderr'),
      ...exit,
      ...(this.output.truncated.stdout ? { stdout_truncated: true as const } : {}),
      ...(this.output.truncated.stderr ? { stderr_truncated: true as const } : {}),
    };
  }

  subscribe(subscriber: OutputSubscriber): void {
    subscriber.replay(this.output.events.slice());
    if (this.exitInfo) return subscriber.finish(this.exitInfo);
    this.subscribers.add(subscriber);
    this.updateFlow();
  }

  unsubscribe(subscriber: OutputSubscriber): void {
    if (this.subscribers.delete(subscriber)) this.updateFlow();
  }

  /** A subscriber has caught up; the command may run again if nobody else is behind. */
  subscriberDrained(): void {
    this.updateFlow();
  }

  /** SIGKILL to the whole tree. Safe after exit: then only leftovers still in the group are hit. */
  kill(): number[] {
    return killProcessTree(this.pid, { leaderReaped: this.reaped });
  }

  /** Sends a signal to the process group; false once the shell is gone (its pid may be reused). */
  signal(signal: NodeJS.Signals): boolean {
    if (this.reaped) return false;
    return signalGroup(this.pid, signal);
  }

  /** Resolves once the command's pipe took the data: a command that does not read holds the caller. */
  async writeStdin(data: string): Promise<void> {
    const stdin = this.usableStdin();
    await new Promise<void>((resolve, reject) =>
      stdin.write(data, (error) => (error ? reject(conflict(`stdin of pid ${this.pid} is closed: the process no longer reads it`)) : resolve())),
    );
  }

  closeStdin(): void {
    if (!this.spec.stdin) throw conflict(`pid ${this.pid} was not started with stdin: true`);
    if (!this.stdinOpen) return;
    this.stdinOpen = false;
    this.subprocess.stdin?.end();
  }

  private usableStdin() {
    const stdin = this.subprocess.stdin;
    if (!this.spec.stdin || !stdin) throw conflict(`pid ${this.pid} was not started with stdin: true`);
    if (!this.stdinOpen || stdin.destroyed || stdin.writableEnded) throw conflict(`stdin of pid ${this.pid} is closed`);
    return stdin;
  }

  private follow(name: StreamName, stream: Readable): Readable {
    const decoder = this.decoders[name];
    stream.on('data', (chunk: Buffer) => this.emit(name, decoder.write(chunk)));
    stream.on('end', () => this.emit(name, decoder.end()));
    stream.on('error', (error) => this.logger.debug({ err: error, pid: this.pid, stream: name }, 'output pipe error'));
    stream.once('close', () => {
      this.openStreams--;
      if (this.openStreams === 0 && this.shellExit) this.finish();
    });
    return stream;
  }

  private emit(stream: StreamName, data: string): void {
    if (data === '' || this.exitInfo) return;
    this.output.append(stream, data);
    if (this.subscribers.size === 0) return;
    const event: OutputEvent = { stream, data };
    for (const subscriber of this.subscribers) subscriber.push(event);
    this.updateFlow();
  }

  /**
   * Back-pressure: while any subscriber is behind, stop reading the pipes, so
   * the command blocks on write instead of envd buffering its output.
   * With nobody listening the pipes are always read (output past the cap is
   * dropped), so a background command never blocks on a full pipe.
   */
  private updateFlow(): void {
    let behind = false;
    for (const subscriber of this.subscribers) if (subscriber.backedUp) behind = true;
    if (behind === this.paused) return;
    this.paused = behind;
    for (const stream of this.streams) {
      if (behind) stream.pause();
      else stream.resume();
    }
  }

  private onShellExit(code: number | null, signal: NodeJS.Signals | null): void {
    this.reaped = true;
    this.shellExit = { code, signal };
    clearTimeout(this.timeoutTimer);
    if (this.openStreams === 0) return this.finish();
    this.armDrainGrace();
  }

  private armDrainGrace(): void {
    this.graceTimer = setTimeout(() => {
      // One more turn of the event loop, so output already waiting in the
      // pipes is read before the ends are closed, even on a busy loop.
      setImmediate(() => {
        if (this.exitInfo) return;
        // A paused pipe is held by a slow reader of ours, not by a daemon: wait for it.
        if (this.paused) return this.armDrainGrace();
        this.logger.debug({ pid: this.pid }, 'output pipes still open after the shell exited (a daemon holds them): closing our ends');
        this.finish();
      });
    }, OUTPUT_DRAIN_GRACE_MS);
  }

  private finish(): void {
    if (this.exitInfo) return;
    clearTimeout(this.graceTimer);
    clearTimeout(this.timeoutTimer);
    this.emit('stdout', this.decoders.stdout.end());
    this.emit('stderr', this.decoders.stderr.end());
    for (const stream of this.streams) stream.destroy();
    this.stdinOpen = false;
    this.subprocess.stdin?.destroy();

    const { code, signal } = this.shellExit!;
    let exit: ExitInfo;
    if (this.timedOut) exit = { exit_code: TIMEOUT_EXIT_CODE, timed_out: true };
    else if (signal) exit = { exit_code: 128 + (constants.signals[signal] ?? 0), signal };
    else exit = { exit_code: code ?? 1 };
    this.exitInfo = exit;

    for (const subscriber of this.subscribers) subscriber.finish(exit);
    this.subscribers.clear();
    this.resolveFinished(exit);
  }
}
