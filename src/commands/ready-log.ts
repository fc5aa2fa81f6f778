import type { StreamName } from '../holder/protocol.js';
import type { KeptLog } from './kept-log.js';
import type { ExitInfo } from './schemas.js';
import type { LendableSocket, OutputSubscriber, ReplayTarget, TrackedProcess } from './tracked-process.js';
import { Utf8Cursor } from './utf8-cursor.js';

/**
 * The longest line a `ready.log` pattern sees whole: a longer line is tested
 * by its last this-many characters, so a command that never prints a newline
 * costs a bounded buffer (at most 1.5 times this, trimmed as it grows).
 */
export const MAX_READY_LINE_CHARS = 64 * 1024;
/**
 * A line not finished yet (a prompt, `Ready> `) is tested as it grows while it
 * is at most this long; a longer one when its newline comes. Testing a long
 * unfinished line again at every chunk made the check quadratic: 200 MB on one
 * line took 168 s against 3.6 s without the check.
 */
export const MAX_READY_PARTIAL_CHARS = 1024;

/**
 * Follows a command's output for readiness: from the start of its kept log,
 * then live, each line of each stream tested against `pattern` (the line
 * not finished yet too, as it grows). Without a pattern it only keeps the
 * command from lending a stream's socket to the holder while readiness is
 * pending, so that envd can still write the stream's `ready` event.
 * It never backs up: the command is never held for it.
 */
export class ReadyLogSubscriber implements OutputSubscriber {
  readonly backedUp = false;
  private readonly cursors = { stdout: new Utf8Cursor(), stderr: new Utf8Cursor() };
  private readonly lines = { stdout: '', stderr: '' };
  private done = false;

  constructor(
    private readonly proc: TrackedProcess,
    private readonly pattern: RegExp | undefined,
    private readonly onMatch: () => void,
    /** The holder's channel was lost (the stream is cut): subscribe again once it is back. */
    private readonly onAbort: () => void,
  ) {}

  /** Stops testing: nothing is kept from here on. */
  stop(): void {
    this.done = true;
    this.lines.stdout = this.lines.stderr = '';
  }

  catchUp(log: KeptLog, target: () => ReplayTarget): void {
    void (async () => {
      try {
        for await (const frame of log.frames(() => target().logEnd)) {
          if (this.done) break;
          this.push(frame.stream, frame.bytes);
        }
      } catch {
        // The log went away (the command was forgotten): nothing left to match.
      }
      this.proc.caughtUp(this);
    })();
  }

  push(stream: StreamName, bytes: Buffer): void {
    if (this.pattern && !this.done) this.take(stream, this.cursors[stream].write(bytes));
  }

  pushText(stream: StreamName, json: Buffer): void {
    if (!this.pattern || this.done || json.length === 0) return;
    // The holder's TEXT is the inside of a JSON string.
    this.take(stream, JSON.parse(`"${json.toString('utf8')}"`) as string);
  }

  finish(_exit: ExitInfo): void {
    this.done = true;
  }

  abort(): void {
    if (!this.done) this.onAbort();
  }

  lendableSocket(): LendableSocket | undefined {
    return undefined;
  }

  lend(flushed: () => void): void {
    flushed();
  }

  reclaim(): void {}

  private take(stream: StreamName, text: string): void {
    if (text === '' || this.done) return;
    let start = 0;
    for (let end = text.indexOf('\n'); end !== -1; end = text.indexOf('\n', start)) {
      const line = this.lines[stream] + text.slice(start, end);
      this.lines[stream] = '';
      if (this.test(line.length > MAX_READY_LINE_CHARS ? line.slice(-MAX_READY_LINE_CHARS) : line)) return;
      start = end + 1;
    }
    if (start === text.length) return;
    const piece = start === 0 ? text : text.slice(start);
    let rest: string;
    if (piece.length >= MAX_READY_LINE_CHARS) {
      // The chunk alone fills the window: what was kept is dropped, nothing is joined or copied.
      rest = piece.slice(-MAX_READY_LINE_CHARS);
    } else {
      // Appending makes a rope (no copy); trimmed past 1.5x the limit, so each character is copied O(1) times.
      // Smaller flat copies than trimming at 2x (up to 192 Ki characters, kept across chunks until the next
      // trim): envd's peak on one endless 200 MB line fell from +40-46 MiB to +10-32 MiB (docs/api.md).
      rest = this.lines[stream] + piece;
      if (rest.length > MAX_READY_LINE_CHARS + MAX_READY_LINE_CHARS / 2) rest = rest.slice(-MAX_READY_LINE_CHARS);
    }
    this.lines[stream] = rest;
    if (rest.length <= MAX_READY_PARTIAL_CHARS) this.test(rest);
  }

  private test(line: string): boolean {
    if (!this.pattern!.test(line.endsWith('\r') ? line.slice(0, -1) : line)) return false;
    this.stop();
    this.onMatch();
    return true;
  }
}
