import type { Hash } from 'node:crypto';
import { Transform } from 'node:stream';

/** A transfer shows its progress only once it has run this long: quick copies print nothing extra. */
const SHOW_AFTER_MS = 1_000;
const REDRAW_MS = 200;

/**
 * `envd cp`'s progress line on a terminal (stderr), for a transfer that takes
 * over a second: bytes done (of the total when known), the rate, the file.
 * Not on a pipe or a file, and never with --json: scripts read stdout.
 */
export class Progress {
  private done = 0;
  private readonly started = Date.now();
  private readonly timer: NodeJS.Timeout | undefined;
  private shown = false;

  constructor(
    private readonly label: string,
    private readonly total: number | undefined,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    if (stream.isTTY) this.timer = setInterval(() => this.draw(), REDRAW_MS).unref();
  }

  /** Counts the bytes that pass through it (and adds them to `hash`, to check against what envd says it had). */
  counter(hash?: Hash): Transform {
    return new Transform({
      transform: (chunk: Buffer, _encoding, next) => {
        this.done += chunk.length;
        hash?.update(chunk);
        next(null, chunk);
      },
    });
  }

  add(bytes: number): void {
    this.done += bytes;
  }

  end(): void {
    clearInterval(this.timer);
    if (this.shown) this.stream.write('\r\u001b[K');
  }

  private draw(): void {
    const ms = Date.now() - this.started;
    if (ms < SHOW_AFTER_MS) return;
    this.shown = true;
    const mib = (bytes: number) => (bytes / 1048576).toFixed(1);
    const of = this.total === undefined ? '' : ` / ${mib(this.total)} MiB (${Math.floor((100 * this.done) / Math.max(1, this.total))} %)`;
    const rate = (this.done / 1e6 / (ms / 1000)).toFixed(1);
    const width = this.stream.columns ?? 80;
    this.stream.write(`\r\u001b[K${`${this.label}  ${mib(this.done)} MiB${of}  ${rate} MB/s`.slice(0, width - 1)}`);
  }
}
