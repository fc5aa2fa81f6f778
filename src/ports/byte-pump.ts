import type { Socket } from 'node:net';

/**
 * Bytes all forwarded connections together may hold in envd: read from one
 * side and not yet handed to the other side's kernel buffer. Each direction of
 * each connection already stops reading while its destination is full (plain
 * backpressure: one chunk of at most 64 KiB, libuv's read size, plus the
 * socket's write buffer); this bound is for many connections at once, so a
 * thousand slow clients cannot make envd hold a thousand times that. Past it
 * every direction that reads pauses until the total is back under half.
 */
export const FORWARD_BUFFER_BYTES = 4 * 1024 * 1024;

/** What the forwarded connections hold, and the directions waiting for room. */
export class ForwardBuffers {
  held = 0;
  private readonly waiting = new Set<() => void>();

  constructor(readonly limit = FORWARD_BUFFER_BYTES) {}

  take(bytes: number): boolean {
    this.held += bytes;
    return this.held <= this.limit;
  }

  give(bytes: number): void {
    this.held -= bytes;
    if (this.held > this.limit / 2 || this.waiting.size === 0) return;
    const resumes = [...this.waiting];
    this.waiting.clear();
    for (const resume of resumes) resume();
  }

  /** Runs `resume` once there is room (at once if there is). */
  whenRoom(resume: () => void): void {
    if (this.held <= this.limit) resume();
    else this.waiting.add(resume);
  }
}

/**
 * Copies one direction of a forwarded connection: every byte, in order, and
 * the end (a half-close: `from` sent FIN, so `to` gets one, while the other
 * direction goes on). Reading pauses while `to` cannot take more or all
 * forwards together hold FORWARD_BUFFER_BYTES.
 */
export function pump(from: Socket, to: Socket, buffers: ForwardBuffers): void {
  let stalled = false;
  const resume = () => {
    stalled = false;
    if (!from.destroyed) from.resume();
  };
  from.on('data', (chunk: Buffer) => {
    const length = chunk.length;
    const room = buffers.take(length);
    const more = to.write(chunk, () => buffers.give(length));
    if (stalled || (more && room)) return;
    stalled = true;
    from.pause();
    if (!more) to.once('drain', () => buffers.whenRoom(resume));
    else buffers.whenRoom(resume);
  });
  from.once('end', () => {
    if (!to.destroyed) to.end();
  });
}
